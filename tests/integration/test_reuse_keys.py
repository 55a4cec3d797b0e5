"""Case 1 of "nothing wrong committed": every reused intermediate is keyed by every config key
that decides its bytes (Config.stage_keys), checked key by key, and end to end on a real run."""

from __future__ import annotations

import json
import shutil
import typing
from pathlib import Path

import numpy as np
import pydantic
import pytest
from pydantic import BaseModel, ByteSize, Field
from support import SAMPLE_CONFIG, SOURCES_CONFIG

from pipeline.config import reuse_keys
from pipeline.config.loader import load_config
from pipeline.config.model import Config
from pipeline.config.reuse_keys import changes
from pipeline.config.sections import InputConfig
from pipeline.core.model import StrictModel
from pipeline.formats.megatron import decode_index
from pipeline.run.driver import run_pipeline
from pipeline.tokens.encode import load_tokenizer

STAGES = ("read", "tokens", "run")
DECLARED = reuse_keys.declarations(Config)  # raises for a key that declares nothing
# The decisions behind the declarations, pinned: a declaration that moves must move here too.
PINNED = {
    "name": {"read", "tokens", "run"},  # a single input's source name: the rows' origin
    "inputs.name": {"read", "tokens", "run"},
    "input.uri": set(),  # where, not what
    "input.include": {"run"},  # selection: same units keep their outputs
    "tokenize.tokenizer": set(),  # a copy with the same content: by content, not by path
    "tokenize.eos": {"read", "tokens", "run"},  # the read task tokenizes
    "tokenize.batch_docs": set(),  # each document is encoded on its own: not even a new run
    "tokenize.engine": set(),  # same ids whatever the engine (issue 11)
    "tokenize.verify_bytes": set(),  # how much is re-checked, never which ids
    "dedup.exact": {"run"},  # dedup decisions reach pack through <removed> (select)
    "dedup.partitions": {"read", "tokens", "run"},  # hash rows are sectioned by partition
    "pack.seed": {"read", "tokens", "run"},
    "pack.shard_bytes": {"run"},
    # a token file holds each split in one block (tokens/pack.py): it is in the token files
    "split.valid_fraction": {"read", "tokens", "run"},
    # columns of the read outputs and of the index, never of a token file (issue 23)
    "input.keep_fields": {"read", "run"},
    "inputs.keep_fields": {"read", "run"},
}


def expected(key: str) -> set[str]:
    """The intermediates a change of `key` recomputes, from its declaration: the read outputs
    reach the token files through the read key, which the token key hashes; and the read task
    tokenizes (the documents the tokenizer quarantines are never hashed), so the read key hashes
    the tokens keys."""
    while key not in DECLARED:  # a section declared as a whole (storage, retention, ...)
        key = key.rpartition(".")[0]
    decl = DECLARED[key]
    if decl.get("by_content"):  # the walk gives a copy with the same content: nothing changes
        return set()
    stages = set(decl["changes_bytes_of"])
    if "read" in stages and not decl.get("columns_only"):  # columns never reach a token file
        stages.add("tokens")
    if "tokens" in stages:
        stages.add("read")
    return {"run" if s == "output" else s for s in stages}


def test_every_config_key_declares_which_bytes_it_changes():
    assert "tokenize.eos" in DECLARED and "storage" in DECLARED and "inputs.weight" in DECLARED
    for key, stages in PINNED.items():
        assert expected(key) == stages, key


def test_a_key_without_a_declaration_is_refused():
    class Section(StrictModel):
        declared: int = Field(1, json_schema_extra=changes("output"))
        forgotten: int = 2

    class Whole(StrictModel):
        section: Section = Section()

    with pytest.raises(TypeError, match="'section.forgotten' does not declare"):
        reuse_keys.declarations(Whole)


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, typing.Any]]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if f"{prefix}{name}" == "input":  # InputConfig | None: `inputs` is the other form
            ann = InputConfig
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += leaves(ann, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", ann))
    return out


def candidates(key: str, ann: typing.Any, current: typing.Any, tmp: Path) -> list[typing.Any]:
    if key == "tokenize.tokenizer":
        copy = tmp / "same-content.json"
        shutil.copyfile(current, copy)
        return [str(copy)]
    if key == "tokenize.eos":
        return ["<|pad|>", "<pad>", "<unk>", "</s>", "<s>"]
    if key.endswith("curate"):  # a curation chain (curate/chain.py)
        return [[{"pii": {}}], [{"length": {"min_words": 5}}]]
    if typing.get_origin(ann) is typing.Literal:  # a choice: every other allowed value
        return [v for v in typing.get_args(ann) if v != current]
    if isinstance(current, bool):
        return [not current]
    if isinstance(current, (ByteSize, int)):
        return [current + 1, current * 2 + 1, 1]
    if isinstance(current, float):
        return [current / 2, current + 1, 0.5, 0.9]
    if isinstance(current, str):
        return [current + "x", current + "/x", "x"]
    if isinstance(current, list):
        return [[*current, "**/*.x"], ["x"], []]
    if current is None:
        return ["x", 1, 1.0, True, "http://127.0.0.1:1"]
    if isinstance(current, dict):
        return [{}]
    return []


def set_key(raw: dict, key: str, value: typing.Any) -> dict:
    raw = json.loads(json.dumps(raw))
    node = raw
    *path, last = key.split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    return raw


def fingerprint(cfg: Config) -> dict[str, str]:
    return {**cfg.stage_keys(), "run": cfg.output_hash()}


def test_every_config_key_changes_exactly_the_intermediates_it_decides(tmp_path):
    base = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path / "out"))
    raw = base.model_dump(mode="python")
    before = fingerprint(base)
    walked, unchangeable = [], []
    for key, ann in leaves(Config):
        node = raw
        for part in key.split("."):
            node = node[part]
        changed = None
        for value in candidates(key, ann, node, tmp_path):
            try:
                changed = Config.model_validate(set_key(raw, key, value))
            except pydantic.ValidationError:
                continue
            if changed.model_dump() != base.model_dump():
                break
            changed = None
        if changed is None:
            unchangeable.append(key)
            continue
        after, was = fingerprint(changed), before
        if key.startswith("extract."):  # counts where a web archive is listed (unused_sections)
            after = fingerprint(changed.for_listing(0, ["warc"]))
            was = fingerprint(base.for_listing(0, ["warc"]))
        recomputed = {s for s in STAGES if after[s] != was[s]}
        assert recomputed == expected(key), f"{key}: recomputes {recomputed}"
        walked.append(key)
    # retention rules validate as a whole (keep_forever excludes delete_after_days, ...): they
    # are retention's, excluded from every key as one section, and walked where a value validates
    # `inputs` excludes `input` (this config's form): its keys are walked below
    assert all(k.startswith("retention.rules.") or k == "inputs" for k in unchangeable), (
        unchangeable
    )
    # the walk covers the whole config, including the keys that decide the read and token files
    assert {"input.text_field", "input.id_field", "dedup.partitions", "tokenize.eos"} <= set(walked)
    assert {"extract.engine", "extract.main_content"} <= set(walked)


def test_the_token_files_format_changes_the_token_key_only(tmp_path, monkeypatch):
    """tokens/framed.py: a folder of token files holds one format, so a run never reads a file
    written in another; the read outputs and the run (its shards) stay."""
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path / "out"))
    before = (cfg.stage_keys(), cfg.output_hash())
    monkeypatch.setattr(reuse_keys, "TOKEN_FORMAT", reuse_keys.TOKEN_FORMAT + 1)
    after = (cfg.stage_keys(), cfg.output_hash())
    assert after[0]["tokens"] != before[0]["tokens"]
    assert (after[0]["read"], after[1]) == (before[0]["read"], before[1])


@pytest.mark.parametrize(
    "key,value,stages",
    [
        ("weight", 3.0, {"run"}),  # the blend line and the reader, not any intermediate
        ("include", ["docs/**"], {"run"}),  # selection, as input.include
        ("uri", "/elsewhere", set()),
        ("name", "other", {"read", "tokens", "run"}),  # ids are <name>/<id>
        ("text_field", "body", {"read", "tokens", "run"}),
        ("keep_fields", ["url"], {"read", "run"}),  # index columns, not token files
    ],
)
def test_source_keys_change_exactly_the_intermediates_they_decide(tmp_path, key, value, stages):
    base = load_config(SOURCES_CONFIG, output_uri=str(tmp_path / "out"))
    raw = base.model_dump(mode="python")
    raw["inputs"][0][key] = value
    after = fingerprint(Config.model_validate(raw))
    assert {s for s in STAGES if after[s] != fingerprint(base)[s]} == stages


def _decoded_start(version, tokenizer_path: str) -> str:
    manifest = json.loads((version / "manifest.json").read_bytes())
    shard = manifest["shards"][0]
    idx = decode_index((version / shard["idx"]).read_bytes())
    tokens = np.frombuffer((version / shard["bin"]).read_bytes(), idx.dtype)
    tokenizer, _ = load_tokenizer(tokenizer_path, "<|endoftext|>")
    return tokenizer.decode(tokens[:64].tolist())


def _stage(result, name):
    return next(s for s in result.stages if s.name == name)


@pytest.mark.parametrize(
    "change, read_reused, tokens_reused",
    [
        ("pack.shard_bytes=600KiB", True, True),  # only packing: every unit output reused
        # shuffle order is in the token files, which the read task writes
        ("pack.seed=7", False, False),
        ("input.text_field=raw_html", False, False),
    ],
)
def test_reruns_recompute_exactly_what_a_change_decides(
    ray_local, tmp_path, change, read_reused, tokens_reused
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [
        json.dumps({"id": i, "text": f"clean text {i} " * 20, "raw_html": f"<html>RAW-HTML {i}"})
        for i in range(300)
    ]
    (corpus / "a.jsonl").write_text("\n".join(lines[:150]) + "\n")
    (corpus / "b.jsonl").write_text("\n".join(lines[150:]) + "\n")
    common = dict(input_uri=str(corpus), output_uri=str(tmp_path / "out"))
    first = run_pipeline(load_config(SAMPLE_CONFIG, **common), show_progress=False)
    second_cfg = load_config(SAMPLE_CONFIG, **common, overrides=[change])
    second = run_pipeline(second_cfg, show_progress=False)
    assert not second.already_committed
    # read+hash: a task per unit and the engine probe; select: a task per unit bucket
    units = _stage(second, "read+hash").tasks - 1
    for stage, reused, tasks in (
        ("read+hash", read_reused, units),
        ("select", tokens_reused, _stage(second, "select").tasks),
    ):
        report = _stage(second, stage)
        assert report.reused == (tasks if reused else 0), (stage, report)
    # what the reused or recomputed files give is what a fresh output gives
    fresh = run_pipeline(
        load_config(
            SAMPLE_CONFIG,
            input_uri=str(corpus),
            output_uri=str(tmp_path / "fresh"),
            overrides=[change],
        ),
        show_progress=False,
    )
    names = [s["bin"] for s in fresh.manifest["shards"]]
    assert [s["bin_xxh3_128"] for s in second.manifest["shards"]] == [
        s["bin_xxh3_128"] for s in fresh.manifest["shards"]
    ], names
    if change.startswith("input.text_field"):
        assert second.manifest["counts"]["tokens"] != first.manifest["counts"]["tokens"]
        text = _decoded_start(second.version, second_cfg.tokenize.tokenizer)
        assert "RAW-HTML" in text and "clean text" not in text


def test_another_batch_size_is_the_same_run(ray_local, tmp_path):
    """tokenize.batch_docs changes no byte (each document is encoded on its own): a rerun with
    another batch size finds the committed version, and a fresh run with it writes the same
    shards."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [json.dumps({"id": i, "text": f"batch text {i} " * (5 + i % 7)}) for i in range(200)]
    (corpus / "a.jsonl").write_text("\n".join(lines) + "\n")

    def run(out: str, batch: int):
        cfg = load_config(
            SAMPLE_CONFIG,
            input_uri=str(corpus),
            output_uri=str(tmp_path / out),
            overrides=[f"tokenize.batch_docs={batch}"],
        )
        return run_pipeline(cfg, show_progress=False)

    first = run("out", 1024)
    assert run("out", 3).already_committed
    fresh = run("fresh", 3)
    assert [s["bin_xxh3_128"] for s in fresh.manifest["shards"]] == [
        s["bin_xxh3_128"] for s in first.manifest["shards"]
    ]

"""Test inputs: JSONL corpora and configs pointed at an S3 bucket."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from tokenizers import SentencePieceUnigramTokenizer

from pipeline.config.loader import load_config
from pipeline.config.model import Config
from support.paths import SAMPLE_CONFIG, TOKENIZER


def jsonl_records(records: Iterable[dict[str, Any]]) -> bytes:
    """JSONL: one JSON object a line, every line ending in a newline."""
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def jsonl(prefix: str, n: int, words: str = "text", repeat: int = 12) -> bytes:
    """n distinct documents {"id": "<prefix>-<i>", "text": "<prefix> <words> <i> " x repeat}:
    every 5-word shingle holds `i`, so no two are near-duplicates."""
    return jsonl_records(
        {"id": f"{prefix}-{i}", "text": f"{prefix} {words} {i} " * repeat} for i in range(n)
    )


def setter(*path: Any, value: Any = None, delete: bool = False):
    """An edit of a JSON-like object (a manifest): set (or delete) the value at `path`."""

    def edit(obj: Any) -> None:
        node = obj
        for key in path[:-1]:
            node = node[key]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return edit


def s3_config(bucket: str, endpoint: str, output: str, *sets: str, config=SAMPLE_CONFIG) -> Config:
    """`config` reading s3://<bucket>/raw and writing s3://<bucket>/<output> at `endpoint`,
    with one --set per item of `sets`."""
    return load_config(
        config,
        input_uri=f"s3://{bucket}/raw",
        output_uri=f"s3://{bucket}/{output}",
        overrides=[f"storage.endpoint_url={endpoint}", *sets],
    )


PROSE = "The river runs past the old mill and the children walk to school each day."


def chain_config(tmp_path: Path, chain: list, **raw_sections: Any) -> Path:
    """A config file in `tmp_path`: the single-source sample config over six prose documents
    (tmp_path/in/a.jsonl), writing to tmp_path/out, with curation `chain` and the top-level
    sections `raw_sections` (e.g. split, storage) replacing the config's."""
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    rows = [json.dumps({"id": f"d{i}", "text": f"{PROSE} Number {i}."}) for i in range(6)]
    (folder / "a.jsonl").write_text("\n".join(rows) + "\n")
    raw = yaml.safe_load(SAMPLE_CONFIG.read_text())
    raw["input"]["uri"] = str(folder)
    raw["output"]["uri"] = str(tmp_path / "out")
    raw["tokenize"]["tokenizer"] = str(TOKENIZER)
    raw["curate"] = chain
    raw.update(raw_sections)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def unigram(folder: Path) -> Path:
    """A SentencePiece Unigram tokenizer.json whose vocabulary holds <unk>, <s> and </s> (its EOS)
    as pieces: its model can emit </s> from the text `</s>`."""
    tok = SentencePieceUnigramTokenizer()
    sents = ["the quick brown fox jumps over the lazy dog", "x y z marks the spot"] * 20
    tok.train_from_iterator(
        sents, vocab_size=40, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>"
    )
    path = folder / "unigram.json"
    tok.save(str(path))
    return path


# Ids of `sparse_tokenizer`'s added tokens: far above its 8,192 entries, past uint16's range
SPARSE_EOS, SPARSE_BOS, SPARSE_WORD = "<|big_eos|>", "<|big_bos|>", "zqxbigword"
SPARSE_IDS = {SPARSE_EOS: 65_537, SPARSE_WORD: 66_000, SPARSE_BOS: 70_000}


def sparse_tokenizer(folder: Path) -> Path:
    """The shipped tokenizer (8,192 entries) plus three tokens at ids past 65,535 (SPARSE_IDS):
    an EOS and a BOS (special) and a word (not special, so text makes it mid-document). 8,195
    entries, yet ids that uint16 would wrap (65,537 -> 1). Each is a model vocabulary entry too:
    tokenizers renumbers an added token that is not (from the vocabulary's size up)."""
    spec = json.loads(Path(TOKENIZER).read_text())
    for content, tid in SPARSE_IDS.items():
        spec["model"]["vocab"][content] = tid
        spec["added_tokens"].append(
            {"id": tid, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": content != SPARSE_WORD}
        )  # fmt: skip
    path = folder / "sparse.json"
    path.write_text(json.dumps(spec))
    return path

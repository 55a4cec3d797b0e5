"""Named sources end to end on Ray: cross-source dedup priority, per-source accounting, the
validation split, weights (the reader's mixture and the Megatron blend line)."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from support import REPO, SAMPLE, SOURCES_CONFIG, TOKENIZER, jsonl_records, own_ray_env, run_command

from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.core.io_counters import IO
from pipeline.core.layout import MANIFEST, RunLayout
from pipeline.core.storage import Location
from pipeline.formats.manifest import parse_blend
from pipeline.formats.megatron import read_shard
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.formats.versions import comparable, resolve_version
from pipeline.run.driver import run_pipeline
from pipeline.run.pack_tasks import _unit_rows
from pipeline.run.summary import format_summary
from pipeline.stream.reader import StreamReader
from pipeline.tokens import framed
from pipeline.tokens.pack import pack_plan, split_block
from pipeline.tokens.split import in_valid

KINDS = ("bin", "idx")
N_EXACT, N_NEAR, N_OWN = 8, 8, 10  # copies the second source shares with the first, and its own


def _shingles(text: str) -> set:
    words = text.lower().split()
    return {tuple(words[i : i + 5]) for i in range(len(words) - 4)}


def _texts() -> list[str]:
    """Real texts of the shipped sample's books, longest first, none resembling another."""
    texts = sorted({p.read_text() for p in (SAMPLE / "books").glob("*.txt")}, key=len)[::-1]
    chosen: list[tuple[str, set]] = []
    for text in texts:
        sh = _shingles(text)
        if len(text.split()) > 150 and all(len(sh & o) < 0.2 * len(sh | o) for _, o in chosen):
            chosen.append((text, sh))
    n = 20 + N_EXACT + N_NEAR + N_OWN
    assert len(chosen) >= n
    return [t for t, _ in chosen[:n]]


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jsonl_records(records))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Source `zeta` (listed first) and source `alpha`: alpha holds exact copies of some of
    zeta's documents under smaller ids, and longer near copies of others, which today's rules
    alone (smallest id, longest text) would keep in alpha."""
    root = tmp_path_factory.mktemp("corpus")
    texts = _texts()
    first, exact = texts[:20 + N_EXACT + N_NEAR], texts[:N_EXACT]
    near = texts[N_EXACT : N_EXACT + N_NEAR]
    own = texts[20 + N_EXACT + N_NEAR :]
    zeta = [{"id": f"z{i}", "text": t} for i, t in enumerate(first)]
    _write_jsonl(root / "zeta/part-0.jsonl", zeta)
    tail = " and the maintainers reworded this closing paragraph of the notes."
    alpha = (
        [{"id": f"a{i}", "text": t} for i, t in enumerate(exact)]
        + [{"id": f"b{i}", "text": t + tail} for i, t in enumerate(near)]
        + [{"id": f"c{i}", "text": t} for i, t in enumerate(own)]
    )
    _write_jsonl(root / "alpha/part-0.jsonl", alpha[: len(alpha) // 2])
    _write_jsonl(root / "alpha/more/part-1.jsonl", alpha[len(alpha) // 2 :])
    return root


def _config(root: Path, out: Path, *sets: str, weights=(2.0, 1.0), fraction=0.0):
    raw = {
        "name": "mix",
        "inputs": [
            {"name": "zeta", "uri": str(root / "zeta"), "weight": weights[0]},
            {"name": "alpha", "uri": str(root / "alpha"), "weight": weights[1]},
        ],
        "output": {"uri": str(out)},
        "ingest": {"unit_bytes": "64KiB"},
        "dedup": {"partitions": 2},
        "tokenize": {"tokenizer": str(TOKENIZER)},
        "pack": {"shard_bytes": "64KiB"},
        "split": {"valid_fraction": fraction},
    }
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path, overrides=list(sets))


@pytest.fixture(scope="module")
def mix_run(ray_local, corpus, tmp_path_factory):
    cfg = _config(corpus, tmp_path_factory.mktemp("mix") / "out")
    result = run_pipeline(cfg, show_progress=False)
    result.layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    return result


def test_first_listed_source_keeps_its_copies(mix_run):
    manifest = verify_version(mix_run.version)
    removed = (mix_run.layout.removed).read_parquet().to_pylist()
    cross = [r for r in removed if r["origin"] != r["kept_origin"]]
    by_rule = Counter(r["rule"] for r in cross)
    # every shared copy is removed from alpha in favour of zeta, whatever id or length says
    assert by_rule == {"exact": N_EXACT, "near": N_NEAR}
    assert all(r["origin"] == "alpha" and r["kept_origin"] == "zeta" for r in cross)
    for r in cross:
        assert r["doc_id"].startswith("alpha/") and r["kept_id"].startswith("zeta/")
        if r["rule"] == "exact":  # the smaller id lost: priority first
            assert r["doc_id"] < r["kept_id"]
    sources = manifest["sources"]
    assert sources["alpha"]["removed_in_favour_of"] == {"zeta": N_EXACT + N_NEAR}
    assert sources["zeta"]["removed_in_favour_of"] == {}
    assert sources["zeta"]["docs_out"] == 20 + N_EXACT + N_NEAR
    assert sources["alpha"]["docs_out"] == N_OWN
    for name, e in sources.items():
        assert e["docs_in"] == e["docs_out"] + e["removed_exact"] + e["removed_near"] + (
            e["quarantined"]
        ), name
    counts = manifest["counts"]
    for key in ("docs_in", "docs_out", "removed_exact", "removed_near", "quarantined", "tokens"):
        assert sum(e[key] for e in sources.values()) == counts[key]
    # shards are per source, and each says which
    assert {s["source"] for s in manifest["shards"]} == {"zeta", "alpha"}
    assert all(s["bin"].startswith(f"train-{s['source']}-") for s in manifest["shards"])
    summary = format_summary(mix_run)
    assert "removed in favour of" in summary and f"zeta {N_EXACT + N_NEAR}" in summary


def test_verify_checks_per_source_balance(mix_run, tmp_path):
    import shutil

    copy = tmp_path / "v"
    shutil.copytree(mix_run.version.path, copy / "mix" / mix_run.version.name)
    shutil.copytree(mix_run.layout.work.path, copy / "mix" / "_work")
    manifest_path = copy / "mix" / mix_run.version.name / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["sources"]["alpha"]["removed_near"] -= 1  # moved to zeta: totals still agree
    manifest["sources"]["zeta"]["removed_near"] += 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match="source"):
        verify_version(Location.from_uri(str(copy / "mix")))


def test_weights_mix_the_reader_and_the_blend_line(mix_run):
    manifest, version = mix_run.manifest, mix_run.version
    sources = manifest["sources"]
    # the blend line: pairs of weight and path prefix, each prefix a readable MMIDIDX shard
    pairs = parse_blend(manifest["blend"]["train"])
    assert len(pairs) == len([s for s in manifest["shards"] if s["tokens"]])
    assert abs(sum(w for w, _ in pairs) - 1.0) < 1e-9
    share: Counter = Counter()
    for weight, prefix in pairs:
        docs = read_shard(
            (version / f"{prefix}.bin").read_bytes(), (version / f"{prefix}.idx").read_bytes()
        )
        entry = next(s for s in manifest["shards"] if s["bin"] == f"{prefix}.bin")
        assert sum(len(d) for d in docs) == entry["tokens"] and len(docs) == entry["documents"]
        share[entry["source"]] += weight
    expected = {n: e["weight"] * e["tokens"] for n, e in sources.items()}
    total = sum(expected.values())
    for name in sources:
        assert share[name] == pytest.approx(expected[name] / total, rel=1e-9)

    # the reader: per-source tokens over an epoch within 1 % of weight x tokens (2:1); read in
    # stream order (shuffle_windows=False) to line the windows up with the layout's stretches
    seq_len = 256
    with StreamReader(version, seq_len=seq_len, seed=3, shuffle_windows=False) as reader:
        windows = list(reader)
        layout = reader.epoch_layout()
    stream = np.concatenate([w[:-1] for w in windows] + [windows[-1][-1:]])
    covered, at, per_source = len(stream), 0, Counter()
    shards = {}
    for source, bin_name, first, n in layout:
        if bin_name not in shards:
            prefix = bin_name.removesuffix(".bin")
            shards[bin_name] = np.concatenate(
                list(
                    read_shard(
                        (version / f"{prefix}.bin").read_bytes(),
                        (version / f"{prefix}.idx").read_bytes(),
                    )
                )
            )
        take = min(n, covered - at)
        if take <= 0:
            break
        # what the reader yielded at this stretch is that shard's tokens
        assert np.array_equal(stream[at : at + take], shards[bin_name][first : first + take])
        per_source[source] += take
        at += take
    assert at == covered
    for name, e in sources.items():
        assert per_source[name] == pytest.approx(e["weight"] * e["tokens"], rel=0.01)
    ratio = per_source["zeta"] / sources["zeta"]["tokens"]
    assert ratio / (per_source["alpha"] / sources["alpha"]["tokens"]) == pytest.approx(2, rel=0.01)


def _pack_ids(layout: RunLayout, entries: list[dict]) -> list[str]:
    ids = []
    for s in entries:
        name = s["bin"].removesuffix(".bin")
        ids += layout.shard_docs(name).read_parquet()["doc_id"].to_pylist()
    return ids


def _run_cli(config: Path, out: Path, *sets: str) -> Location:
    subprocess.run(
        run_command(config, out, *sets), check=True, env=own_ray_env(), cwd=REPO,
        capture_output=True,
    )
    return resolve_version(Location.from_uri(str(out / "sample")))


@pytest.fixture(scope="module")
def sample_split(sources_sample_run):
    """configs/sample.yaml (two sources, a 5 % validation split) run with 2 CPUs."""
    cfg = sources_sample_run.cfg
    assert cfg.split.valid_fraction == 0.05 and [s.name for s in cfg.sources] == ["docs", "web"]
    return sources_sample_run


def _files(version: Location, entries: list[dict]) -> list[bytes]:
    return [(version / s[k]).read_bytes() for s in entries for k in ("bin", "idx")]


def test_validation_split_is_disjoint_and_reads_back(sample_split):
    manifest, layout, version = sample_split.manifest, sample_split.layout, sample_split.version
    verify_version(version)
    valid, train = manifest["splits"]["valid"], manifest["shards"]
    assert valid and manifest["splits"]["train"] == [s["bin"] for s in train]
    assert all(s["split"] == "valid" and s["bin"].startswith("valid-") for s in valid)
    valid_ids, train_ids = _pack_ids(layout, valid), _pack_ids(layout, train)
    assert len(set(valid_ids)) == len(valid_ids) and not set(valid_ids) & set(train_ids)
    assert len(valid_ids) + len(train_ids) == manifest["counts"]["docs_out"]
    # membership is the id hash: every valid id below the fraction, every train id above
    assert in_valid(valid_ids, 0.05).all() and not in_valid(train_ids, 0.05).any()
    assert 0.02 < len(valid_ids) / manifest["counts"]["docs_out"] < 0.08
    for name, e in manifest["sources"].items():
        mine = [s for s in valid if s["source"] == name]
        assert e["valid_documents"] == sum(s["documents"] for s in mine)
    # the reader's valid split yields exactly the validation shards' tokens
    expected = np.concatenate(
        [
            np.concatenate(list(read_shard(*[(version / s[k]).read_bytes() for k in KINDS])))
            for s in valid
        ]
    )
    # in stream order: the last window's label is then the stream's last token
    with StreamReader(version, seq_len=1, split="valid", shuffle_windows=False) as reader:
        windows = list(reader)
    got = np.concatenate([w[:1] for w in windows] + [windows[-1][1:]])
    assert reader.total_tokens == len(expected) == len(got)
    assert Counter(got.tolist()) == Counter(expected.tolist())
    assert manifest["blend"]["valid"].count("valid-") == len(valid)
    # a resume state names its split: the training stream refuses the validation stream's
    with pytest.raises(ValueError, match="split"):
        StreamReader(version, seq_len=1).load_state_dict(reader.state_dict())


def test_each_split_is_one_block_of_a_token_file(sample_split):
    """A token file holds the training documents, then the validation split's, each block in
    shuffle order (tokens/pack.py): the validation pack reads only its block of each file, not
    every token file a second time. The blocks are what the id hash says (tokens/split.py)."""
    layout = sample_split.layout
    units = pq.read_table(layout.units.path, columns=["unit_id"])["unit_id"].to_pylist()
    blocks = 0
    for unit in sorted(set(units)):
        index = layout.tokens_all(unit).read_parquet()
        valid = index["valid"].to_numpy(zero_copy_only=False)
        assert (valid == in_valid(index["doc_id"], 0.05)).all()
        assert not (np.diff(valid.astype(int)) < 0).any()  # train rows first, then valid
        for split, flag in (("train", False), ("valid", True)):
            block = split_block(index, split)
            assert (block["valid"].to_numpy(zero_copy_only=False) == flag).all()
            assert block.num_rows == int((valid == flag).sum())
            keys = block["key"].to_numpy()
            assert (keys[1:] >= keys[:-1]).all()  # shuffle order within the block
        blocks += bool(valid.any())
    assert blocks  # some unit holds validation documents
    # the validation pack reads the frames of its block, not the whole file: the largest
    # unit's key range [0, 2^64) through the pack's own read, once per split
    unit = max(set(units), key=lambda u: layout.tokens_bin(u).size())
    [kept] = Path(layout.tokens_bin(unit).path).parent.glob(f"{unit}-*.parquet")
    removed = kept.stem.removeprefix(f"{unit}-")
    index = layout.tokens_index(unit, removed).read_parquet()
    table = framed.table_of(index)
    first_valid = int(split_block(index, "valid")["offset"].to_numpy()[0]) * 2  # uint16 tokens
    valid_from = table.offsets[first_valid // table.frame_bytes]
    assert valid_from > 0  # the training block fills at least one frame: the check means something
    before = IO.snapshot()
    layout.tokens_index(unit, removed).read_parquet()  # what reading the index costs alone
    index_read = IO.delta(IO.snapshot(), before)["bytes_read"]
    read = {}
    for split in ("train", "valid"):
        plan = replace(pack_plan(10**6, 1, 2**20, 2**20), split=split, valid_fraction=0.05)
        before = IO.snapshot()
        assert _unit_rows(layout, unit, removed, 0, 2**64, 2, plan) is not None
        read[split] = IO.delta(IO.snapshot(), before)["bytes_read"] - index_read
    assert 0 < read["valid"] <= table.offsets[-1] - valid_from
    assert 0 < read["train"] <= table.offsets[-1]


def test_validation_split_same_with_1_and_4_workers(sample_split, tmp_path):
    base = sample_split
    valid = base.manifest["splits"]["valid"]
    for cpus, unit in ((1, "64MiB"), (4, "256KiB")):
        version = _run_cli(
            SOURCES_CONFIG, tmp_path / f"w{cpus}", f"ray.num_cpus={cpus}",
            f"ingest.unit_bytes={unit}",
        )
        manifest = json.loads((version / MANIFEST).read_bytes())
        assert _files(version, manifest["splits"]["valid"]) == _files(base.version, valid)
        assert _files(version, manifest["shards"]) == _files(base.version, base.manifest["shards"])
        for key in ("counts", "sources", "splits", "blend", "shards", "tokenizer"):
            assert comparable(manifest)[key] == comparable(base.manifest)[key], key


def test_input_option_refused_for_several_sources(tmp_path):
    with pytest.raises(ConfigError, match="--input"):
        load_config(SOURCES_CONFIG, input_uri=str(SAMPLE), output_uri=str(tmp_path))


@pytest.mark.parametrize(
    "change,message",
    [
        ({"input": {"uri": str(SAMPLE)}}, "not both"),
        ({"inputs": [{"name": "a", "uri": str(SAMPLE)}, {"name": "a", "uri": str(SAMPLE)}]},
         "unique"),
        ({"inputs": [{"name": "a/b", "uri": str(SAMPLE)}]}, "inputs.0.name"),
        ({"inputs": [{"name": "a", "uri": str(SAMPLE), "weight": 0}]}, "inputs.0.weight"),
        ({"split": {"valid_fraction": 1.0}}, "split.valid_fraction"),
    ],
)
def test_source_config_errors(tmp_path, change, message):
    raw = yaml.safe_load(SOURCES_CONFIG.read_text())
    raw["tokenize"]["tokenizer"] = str(TOKENIZER)
    raw.update(change)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message):
        load_config(path, output_uri=str(tmp_path / "out"))


def test_boundaries_match_eos_and_the_index_on_every_sample_window(sample_split):
    """Every window of the shipped sample (weights 2:1): document starts and position ids equal
    those derived by hand from EOS, and those of the shards' .idx (each document ends in EOS),
    plus the starts of the mixture's pieces (cut at any token: a cut document's rest is a span)."""
    version, seq_len = sample_split.version, 512
    eos = sample_split.manifest["tokenizer"]["eos_id"]
    with StreamReader(version, seq_len, boundaries=True, shuffle_windows=False) as reader:
        windows = list(reader)
        layout = reader.epoch_layout()
    assert reader.layout == 2 and len(windows) == reader.windows_per_epoch
    # document starts in stream positions, from each stretch's shard index
    starts, pieces, at = set(), set(), 0
    for _, bin_name, first, n in layout:
        pieces.add(at)
        prefix = bin_name.removesuffix(".bin")
        docs = read_shard(*[(version / f"{prefix}.{k}").read_bytes() for k in KINDS])
        doc_starts = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
        assert all(d[-1] == eos for d in docs)
        starts.update(int(at + p - first) for p in doc_starts if first <= p < first + n)
        at += n
    for j, w in enumerate(windows):
        tokens = w.tokens.tolist()
        cuts = {p - j * seq_len for p in pieces if 0 < p - j * seq_len < seq_len}
        by_eos = sorted({0, *cuts, *(i for i in range(1, seq_len) if tokens[i - 1] == eos)})
        by_index = sorted({0, *cuts, *(p - j * seq_len for p in starts)} & set(range(seq_len)))
        assert w.cu_seqlens.tolist() == by_eos + [seq_len] == by_index + [seq_len]
        positions, pos = [], 0
        for i in range(seq_len):
            pos = 0 if i in by_eos else pos + 1
            positions.append(pos)
        assert w.position_ids.tolist() == positions


def test_a_quarantined_record_is_found_by_its_source_qualified_id(sources_sample_run):
    """Named sources prefix every id with the source's name, a quarantined record's too."""
    from support.cli import call

    rows = pq.read_table(sources_sample_run.layout.quarantine.path).to_pylist()
    named = [r for r in rows if r["doc_id"] is not None]
    assert named and all(r["doc_id"].split("/", 1)[0] == r["origin"] for r in named)
    missing = next(r for r in named if r["reason"] == "missing_text")
    code, out, _ = call(["find", sources_sample_run.version.uri, "--id", missing["doc_id"]])
    assert code == 7
    assert f"{missing['doc_id']!r} was quarantined: missing_text" in out

"""Bad input cannot hurt the run: its own output is never re-ingested, giant documents are
bounded, objects that change mid-run are caught, local runs are quiet. (Invalid numeric config
values: tests/test_config_values.py.)"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from support import REPO, SAMPLE_CONFIG, jsonl_records

from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.core.io_counters import IO
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.ingest.listing import OWN_OUTPUT, PIPELINE_DATASET, cut_units, list_inputs
from pipeline.ingest.read_guards import ObjectChanged
from pipeline.ingest.readers import read_piece
from pipeline.run.driver import run_pipeline
from pipeline.run.read_tasks import read_unit

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "owls")


def doc_text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] + str(i * 31 + k) for k in range(40))


def jsonl(prefix: str, n: int) -> bytes:
    """n documents of varied words, ids <prefix><i> (no dash: a1 is edited below)."""
    return jsonl_records({"id": f"{prefix}{i}", "text": doc_text(i)} for i in range(n))


def corpus(folder: Path) -> Path:
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "one.jsonl").write_bytes(jsonl("a", 120))
    (folder / "b.jsonl").write_bytes(jsonl("b", 80))
    return folder


def run_twice(input_uri: str, output_uri: str, sets: list[str] = ()):
    """Run with seed 0, then the same command with seed 1: the issue's report, as a test."""
    results = []
    for seed in (0, 1):
        cfg = load_config(
            SAMPLE_CONFIG,
            input_uri=input_uri,
            output_uri=output_uri,
            overrides=[f"pack.seed={seed}", "dedup.near.enabled=false", *sets],
        )
        Location.from_uri(cfg.input.uri, cfg.storage).fs.invalidate_cache()
        results.append((cfg, run_pipeline(cfg, show_progress=False)))
    return results


def skipped_of(cfg, result) -> list[dict]:
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    return layout.skipped.read_parquet().to_pylist()


# -- case 1: output inside input -------------------------------------------------------------
def test_own_output_inside_input_is_never_read(ray_local, tmp_path):
    data = corpus(tmp_path / "data")
    (_, first), (cfg, second) = run_twice(str(data), str(data / "out"))
    assert first.manifest["counts"]["docs_in"] == 200
    # the second run listed the first one's shards, manifest and work state, and read none of it
    counts = second.manifest["counts"]
    assert counts["docs_in"] == 200 and counts["quarantined"] == 0
    skipped = skipped_of(cfg, second)
    own = [s for s in skipped if s["reason"] == OWN_OUTPUT]
    assert own and all(s["path"].startswith("out/sample/") for s in own)
    assert {"manifest.json", "inputs.parquet"} <= {s["path"].rsplit("/", 1)[-1] for s in own}
    assert any(s["path"].endswith(".docs.parquet") for s in own)
    assert second.manifest["run"]["skipped_files"][OWN_OUTPUT] == len(own)

    # someone else's dataset, and a version folder copied alone, under the input: skipped too
    shutil.copytree(data / "out" / "sample", data / "archive" / "old")
    shutil.copytree(first.version.path, data / "copies" / first.version.name)
    cfg3 = load_config(
        SAMPLE_CONFIG,
        input_uri=str(data),
        output_uri=str(tmp_path / "elsewhere"),
        overrides=["dedup.near.enabled=false"],
    )
    third = run_pipeline(cfg3, show_progress=False)
    assert third.manifest["counts"]["docs_in"] == 200
    assert third.manifest["counts"]["quarantined"] == 0
    reasons = {s["path"].split("/")[0]: s["reason"] for s in skipped_of(cfg3, third)}
    assert reasons["archive"] == reasons["copies"] == PIPELINE_DATASET
    assert reasons["out"] == PIPELINE_DATASET  # not this run's output any more

    # the other way round, an input inside the dataset the run writes, is a config error
    with pytest.raises(ConfigError, match="is inside the output dataset"):
        load_config(
            SAMPLE_CONFIG,
            input_uri=str(data / "out" / "sample" / "_work"),
            output_uri=str(data / "out"),
        )


def test_own_output_inside_input_on_s3(ray_local, tmp_path, s3_upload, s3_bucket, s3_storage):
    s3_upload({"data/a/one.jsonl": jsonl("a", 120), "data/b.jsonl": jsonl("b", 80)})
    (_, first), (cfg, second) = run_twice(
        f"s3://{s3_bucket}/data",
        f"s3://{s3_bucket}/data/out",
        [f"storage.endpoint_url={s3_storage.endpoint_url}"],
    )
    assert first.manifest["counts"]["docs_in"] == 200
    assert second.manifest["counts"]["docs_in"] == 200
    assert second.manifest["counts"]["quarantined"] == 0
    own = [s for s in skipped_of(cfg, second) if s["reason"] == OWN_OUTPUT]
    assert own and all(s["path"].startswith("out/sample/") for s in own)
    assert any(s["path"].endswith("/manifest.json") for s in own)



# -- case 2: giant documents -----------------------------------------------------------------
def read_all(root: Location, unit_bytes: int, cap: int, batch_docs: int = 4096):
    """(docs, quarantine rows, [(piece, bytes read)]) of everything under root."""
    inputs, _ = list_inputs(root, ["**"], [])
    docs, bad, reads = [], [], []
    for piece in cut_units(inputs, unit_bytes).to_pylist():
        before = IO.snapshot().get("bytes_read", 0)
        for d, q in read_piece(root, piece, "text", "id", batch_docs, max_doc_bytes=cap):
            docs += d.to_pylist()
            bad += q.to_pylist()
        reads.append((piece, IO.snapshot().get("bytes_read", 0) - before))
    return docs, bad, reads


def test_giant_jsonl_line_is_quarantined_and_read_boundedly(tmp_path):
    import tracemalloc

    cap, unit = 2**20, 2**16
    head, tail = jsonl("h", 200), jsonl("t", 50)
    giant = json.dumps({"id": "giant", "text": "word " * (8 * 2**20 // 5)}).encode()
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "big.jsonl"
    path.write_bytes(head + giant + b"\n" + tail)
    root = Location.from_uri(str(tmp_path / "in"))

    tracemalloc.start()
    docs, bad, reads = read_all(root, unit, cap)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    ids = [d["doc_id"] for d in docs]
    assert sorted(ids) == sorted([f"h{i}" for i in range(200)] + [f"t{i}" for i in range(50)])
    assert [(q["row"], q["reason"]) for q in bad] == [(len(head), "too_large")]
    assert bad[0]["detail"].startswith(f"{len(giant)} bytes > ingest.max_doc_bytes = {cap}")
    size = path.stat().st_size
    total = sum(n for _, n in reads)
    assert total <= 2 * size, (total, size)
    # a piece starting inside the long line reads its own range (and the byte before) only
    giant_end = len(head) + len(giant)
    inside = [(p, n) for p, n in reads if len(head) < p["start"] and p["end"] < giant_end]
    assert len(inside) > 50
    assert all(n <= p["end"] - p["start"] + 1 for p, n in inside)
    assert peak < 4 * cap, peak  # the 8 MiB record was never held whole


def test_giant_records_in_every_format(tmp_path):
    cap = 2**16
    big_text = "many words " * (cap // 5)
    small = jsonl("s", 5)
    big_line = json.dumps({"id": "big", "text": big_text}).encode() + b"\n"
    table = pa.table({"id": ["p0", "p1", "p2"], "text": ["fine", big_text, "also fine"]})
    parquet = io.BytesIO()
    pq.write_table(table, parquet)
    files = {
        "c.jsonl.gz": gzip.compress(small + big_line + small.replace(b'"s', b'"g')),
        "c.jsonl.zst": zstandard.ZstdCompressor().compress(big_line + small.replace(b'"s', b'"z')),
        "big.txt": big_text.encode(),
        "big.txt.gz": gzip.compress(big_text.encode()),
        "ok.txt": b"a small text file",
        "t.parquet": parquet.getvalue(),
    }
    for rel, data in files.items():
        (tmp_path / "in" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / rel).write_bytes(data)
    docs, bad, reads = read_all(Location.from_uri(str(tmp_path / "in")), 2**30, cap)
    found = {(q["source"], q["row"], q["reason"], int(q["detail"].split()[0])) for q in bad}
    assert found == {
        ("c.jsonl.gz", len(small), "too_large", len(big_line) - 1),
        ("c.jsonl.zst", 0, "too_large", len(big_line) - 1),
        ("big.txt", 0, "too_large", len(big_text)),
        ("big.txt.gz", 0, "too_large", len(big_text)),
        ("t.parquet", 1, "too_large", len(big_text)),
    }
    assert len(docs) == 5 + 5 + 5 + 1 + 2
    assert not any(len(d["text"]) > cap for d in docs)
    # an uncompressed text file over the cap is judged from its listed size: never opened
    assert [n for p, n in reads if p["path"] == "big.txt"] == [0]


# -- case 3: objects that change between listing and reading ----------------------------------
def listed_pieces(root: Location) -> list[dict]:
    inputs, _ = list_inputs(root, ["**"], [])
    return cut_units(inputs, 2**30).to_pylist()


def read_unit_here(tmp_path: Path, root: Location, pieces: list[dict]):
    """read_unit without Ray: (summary, docs, quarantine rows)."""
    cfg = load_config(
        SAMPLE_CONFIG,
        input_uri=root.uri if root.is_local else str(tmp_path),
        output_uri=str(tmp_path / "out"),
    )
    layout = RunLayout.for_config(cfg, "test")
    with open(cfg.tokenize.tokenizer, "rb") as f:
        summary = read_unit(layout, root, "u", pieces, cfg, f.read())
    docs = layout.read_docs("u").read_parquet().to_pylist()
    return summary, docs, layout.read_quarantine("u").read_parquet().to_pylist()


def test_object_changed_after_listing_is_quarantined_locally(tmp_path):
    root = Location.from_uri(str(corpus(tmp_path / "in")))
    pieces = listed_pieces(root)
    grown = tmp_path / "in" / "b.jsonl"
    grown.write_bytes(grown.read_bytes() + jsonl("new", 3))  # size and mtime change
    same_size = tmp_path / "in" / "a" / "one.jsonl"
    st = same_size.stat()
    same_size.write_bytes(same_size.read_bytes().replace(b'"a1"', b'"A1"'))
    os.utime(same_size, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same size, new mtime

    summary, docs, bad = read_unit_here(tmp_path, root, pieces)
    assert docs == [] and summary.docs_in == 2
    assert {(q["source"], q["row"], q["reason"]) for q in bad} == {
        ("a/one.jsonl", 0, "changed_during_run"),
        ("b.jsonl", 0, "changed_during_run"),
    }
    assert any("listed" in q["detail"] and "now" in q["detail"] for q in bad)

    # a file changed while its piece is read: the piece's records already read are not kept
    pieces = listed_pieces(root)
    reading = read_piece(root, pieces[1], "text", "id", batch_docs=10)
    next(reading)
    grown.write_bytes(grown.read_bytes() + jsonl("late", 1))
    with pytest.raises(ObjectChanged):
        list(reading)


def test_object_changed_after_listing_on_s3(tmp_path, s3_upload, s3_bucket, s3_storage):
    import s3fs

    root = s3_upload({"a.jsonl": jsonl("a", 30), "b.jsonl": jsonl("b", 30)})
    pieces = listed_pieces(root)
    root.fs.ls(s3_bucket, detail=True)  # a listing cached in this client, as a worker may have
    other = s3fs.S3FileSystem(
        skip_instance_cache=True, client_kwargs={"endpoint_url": s3_storage.endpoint_url}
    )
    # same size, new content (new ETag), written by another client: this one's cache is stale,
    # so the open trusts the listed ETag and the conditional GET (If-Match) is what refuses
    other.pipe(f"{s3_bucket}/a.jsonl", jsonl("a", 30).replace(b'"a1"', b'"A1"'))
    with pytest.raises(ObjectChanged, match="changed while read"):
        list(read_piece(root, pieces[0], "text", "id"))
    # with a fresh look at the object (HEAD), the size/ETag comparison refuses before any GET
    other.pipe(f"{s3_bucket}/b.jsonl", jsonl("b", 31))
    root.fs.invalidate_cache()
    summary, docs, bad = read_unit_here(tmp_path, root, pieces)
    assert docs == [] and summary.docs_in == 2
    assert [(q["source"], q["reason"]) for q in bad] == [
        ("a.jsonl", "changed_during_run"),
        ("b.jsonl", "changed_during_run"),
    ]
    # the rerun lists afresh: new ETags, new unit ids, the new content is read
    assert {p["etag"] for p in listed_pieces(root)}.isdisjoint(p["etag"] for p in pieces)


# -- case 5: quiet local runs ----------------------------------------------------------------
@pytest.mark.slow  # runs the pipeline
def test_local_run_prints_no_warning_a_user_cannot_act_on(tmp_path):
    import logging

    from pipeline.run.ray_env import _AUTH_LOGGER, _LOCAL_AUTH_NOTICE

    data = tmp_path / "data"
    data.mkdir()
    (data / "d.jsonl").write_bytes(jsonl("d", 150))
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(SAMPLE_CONFIG), "--quiet"]
        + ["--input", str(data), "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr and "Token authentication" not in result.stderr, (
        result.stderr
    )
    assert "committed" in result.stdout

    # only that notice is dropped: the same logger's other warnings still reach the user
    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord(_AUTH_LOGGER, logging.WARNING, "f.py", 1, msg, None, None)

    enabled = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled"
    assert not _LOCAL_AUTH_NOTICE.filter(record(enabled))
    assert _LOCAL_AUTH_NOTICE.filter(record("Token authentication is disabled for this cluster."))

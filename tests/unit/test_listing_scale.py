"""The listing's column-by-column classification against the per-file rules, and the driver's
memory from the store's listing to the first read task: bounded by its batches, not by the
number of objects (synthetic metadata fed right after the store call, as `bench listing`)."""

from __future__ import annotations

import tracemalloc

import pytest

from pipeline.bench import listing as bench
from pipeline.config.sections import StorageConfig
from pipeline.core.storage import Location
from pipeline.ingest import listing, work_units
from pipeline.ingest.listing import detect_format, list_inputs, skip_reason

NAMES = ["a", ".h", "_m", "x.crc", "Y.CRC", "d.JSONL", "e.jsonl.gz", "f.parquet", "g.parquet.gz",
         "h.txt.zst", "i.md.zstd", "j.ndjson", "k.json", "l.text", "m.bin", "n.gz", "o.jsonl.GZ",
         "p.Parquet", "q.tar.gz", "r.zst", "ü.txt", "s.gz.jsonl"]  # fmt: skip
ROOT = Location.from_uri("s3://b/pre", StorageConfig(endpoint_url="http://127.0.0.1:1"))


def entries(paths: list[str]):
    def store(root):
        for i, rel in enumerate(paths):
            yield f"b/pre/{rel}", {"Key": f"b/pre/{rel}", "size": i, "ETag": f'"e{i}"'}

    return store


@pytest.mark.parametrize(
    "include, exclude",
    [(["**"], []), (["a/**", "**/*.txt", "*.json"], ["**/k.json", "_m/**"])],
)
def test_columns_classify_as_the_per_file_rules(include, exclude):
    paths = sorted({f"{a}/{b}" for a in NAMES for b in NAMES} | set(NAMES))
    inputs, skipped = list_inputs(ROOT, include, exclude, listing=entries(paths))
    inc, exc = listing._compile_globs(include), listing._compile_globs(exclude)
    expected = {rel: skip_reason(rel, inc, exc) for rel in paths}
    assert dict(zip(*skipped.select(["path", "reason"]).to_pydict().values(), strict=True)) == {
        rel: why for rel, why in expected.items() if why is not None
    }
    accepted = sorted(rel for rel, why in expected.items() if why is None)
    assert inputs["path"].to_pylist() == accepted
    assert list(
        zip(inputs["format"].to_pylist(), inputs["compression"].to_pylist(), strict=True)
    ) == [detect_format(rel) for rel in accepted]


def python_heap_peak(tmp_path, n: int) -> int:
    """Peak bytes of Python objects while the driver goes from a listing of n objects to the
    first read task (Arrow's own buffers are not Python objects)."""
    cfg = bench.bench_config("http://127.0.0.1:1", str(tmp_path / f"out-{n}"))
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"unit_bytes": 1 << 20})})
    tracemalloc.start()
    try:
        run, units, first = bench.to_first_task(cfg, bench.synthetic_listing(n, 2048))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_driver_memory_does_not_grow_with_the_listing(tmp_path, monkeypatch):
    for module, name in ((listing, "LIST_BATCH"), (work_units, "_PIECE_BATCH"),
                         (listing, "DIGEST_BATCH")):  # fmt: skip
        monkeypatch.setattr(module, name, 256)
    small, large = python_heap_peak(tmp_path, 1_000), python_heap_peak(tmp_path, 4_000)
    assert large < 1.5 * small, (small, large)  # 4× the objects; per-object Python memory: 4×

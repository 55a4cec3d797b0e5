"""Listing (metadata only, local and S3 alike) and byte-balanced work units."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import zstandard

from pipeline.config.sections import StorageConfig
from pipeline.core.io_counters import IO
from pipeline.core.storage import Location
from pipeline.ingest.listing import INPUTS_SCHEMA, cut_units, list_inputs
from pipeline.testing.s3 import recorded_requests

JSONL = b"".join(json.dumps({"id": i, "text": f"doc {i}"}).encode() + b"\n" for i in range(20))


def parquet_bytes(table: pa.Table, **kwargs) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **kwargs)
    return buffer.getvalue()


# Relative path -> (content, expected (format, compression) or skip reason).
CORPUS: dict[str, tuple[bytes, tuple[str, str] | str]] = {
    "a.jsonl": (JSONL, ("jsonl", "none")),
    "b/c.jsonl.gz": (gzip.compress(JSONL), ("jsonl", "gzip")),
    "b/d.ndjson.zst": (zstandard.compress(JSONL), ("jsonl", "zstd")),
    "b/deep/e.json": (JSONL, ("jsonl", "none")),
    "f.parquet": (parquet_bytes(pa.table({"text": ["x", "y"]})), ("parquet", "none")),
    "notes/x.txt": (b"hello", ("text", "none")),
    "notes/y.md.gz": (gzip.compress(b"# title"), ("text", "gzip")),
    "notes/z.TEXT": (b"upper-case extension", ("text", "none")),
    "empty.jsonl": (b"", ("jsonl", "none")),
    ".hidden.jsonl": (JSONL, "hidden"),
    ".git/config.jsonl": (JSONL, "hidden"),
    "sub/.cache/z.txt": (b"x", "hidden"),
    "_SUCCESS": (b"", "marker"),
    "b/_metadata": (b"meta", "marker"),
    "part-0.crc": (b"crc", "marker"),
    "image.png": (b"\x89PNG", "unsupported_format"),
    "archive.tar.gz": (b"tar", "unsupported_format"),
    "f.parquet.gz": (b"pq", "unsupported_format"),
    "README": (b"readme", "unsupported_format"),
}
FILES = {path: content for path, (content, _) in CORPUS.items()}
ACCEPTED = {p: e for p, (_, e) in CORPUS.items() if isinstance(e, tuple)}
SKIPPED = {p: e for p, (_, e) in CORPUS.items() if isinstance(e, str)}


def write_tree(folder: Path, files: dict[str, bytes]) -> Location:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return Location.from_uri(str(folder))


@pytest.fixture
def local_root(tmp_path: Path) -> Location:
    return write_tree(tmp_path / "input", FILES)


# -- listing ---------------------------------------------------------------------------------
def test_local_listing_classifies_every_file(local_root: Location) -> None:
    inputs, skipped = list_inputs(local_root, ["**"], [])
    assert inputs.schema == INPUTS_SCHEMA
    assert inputs["path"].to_pylist() == sorted(ACCEPTED)
    for row in inputs.to_pylist():
        assert (row["format"], row["compression"]) == ACCEPTED[row["path"]]
        assert row["size"] == len(FILES[row["path"]])
        assert row["etag"] is None and row["mtime"] > 0
    assert (
        dict(zip(skipped["path"].to_pylist(), skipped["reason"].to_pylist(), strict=True))
        == SKIPPED
    )
    assert skipped["path"].to_pylist() == sorted(SKIPPED)


def test_s3_listing_equals_local(local_root: Location, s3_upload) -> None:
    s3_root = s3_upload(FILES)
    local_inputs, local_skipped = list_inputs(local_root, ["**"], [])
    s3_inputs, s3_skipped = list_inputs(s3_root, ["**"], [])
    same = ["path", "size", "format", "compression"]
    assert s3_inputs.select(same).equals(local_inputs.select(same))
    assert s3_skipped.equals(local_skipped)
    for row in s3_inputs.to_pylist():  # single-part uploads: the ETag is the MD5 of the content
        assert row["etag"] == hashlib.md5(FILES[row["path"]]).hexdigest()
        assert row["mtime"] is None


def test_s3_listing_reads_no_object_content(s3_upload, s3_server) -> None:
    """S3 is listed from metadata alone (a local folder's files are opened for their
    head_tail_xxh3: tests/unit/test_content_fingerprint.py)."""
    s3_root = s3_upload(FILES)
    before = IO.snapshot()
    with recorded_requests(s3_server) as proxy:
        via_proxy = Location.from_uri(s3_root.uri, StorageConfig(endpoint_url=proxy.endpoint))
        inputs, _ = list_inputs(via_proxy, ["**"], [])
    requests = proxy.requests
    counts = IO.delta(IO.snapshot(), before)
    assert "bytes_read" not in counts and "get_requests" not in counts
    assert inputs.num_rows == len(ACCEPTED)
    # What crossed the wire: only bucket listings, no GET or HEAD of any object.
    assert requests, "the recorder saw nothing: the check would be vacuous"
    for method, url in requests:
        assert method == "GET" and "list-type=2" in url, (method, url)
        assert url.split("?")[0].rstrip("/").endswith(s3_root.path), url


def test_include_exclude_globs(local_root: Location) -> None:
    inputs, skipped = list_inputs(local_root, ["b/**", "notes/*.txt"], ["**/*.zst"])
    assert inputs["path"].to_pylist() == ["b/c.jsonl.gz", "b/deep/e.json", "notes/x.txt"]
    reasons = dict(zip(skipped["path"].to_pylist(), skipped["reason"].to_pylist(), strict=True))
    assert reasons["b/d.ndjson.zst"] == "excluded"
    assert reasons["a.jsonl"] == "excluded" and reasons["notes/y.md.gz"] == "excluded"
    assert reasons["b/_metadata"] == "marker"  # markers and hidden files stay what they are
    assert reasons[".git/config.jsonl"] == "hidden"
    assert inputs.num_rows + skipped.num_rows == len(CORPUS)  # nothing silently dropped


def test_star_stays_in_one_folder(local_root: Location) -> None:
    top, _ = list_inputs(local_root, ["*.json*"], [])
    anywhere, _ = list_inputs(local_root, ["**/*.json*"], [])
    assert top["path"].to_pylist() == ["a.jsonl", "empty.jsonl"]
    assert anywhere["path"].to_pylist() == [
        "a.jsonl",
        "b/c.jsonl.gz",
        "b/deep/e.json",
        "empty.jsonl",
    ]


def test_single_object_root_is_refused(local_root: Location) -> None:
    with pytest.raises(ValueError, match="is an object, not a prefix"):
        list_inputs(local_root / "a.jsonl", ["**"], [])


# -- work units (pure) -----------------------------------------------------------------------
def manifest(files: list[tuple[str, int, str, str]], etag: str | None = None) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"path": p, "size": s, "etag": etag, "mtime": None, "format": f, "compression": c}
            for p, s, f, c in files
        ],
        schema=INPUTS_SCHEMA,
    )


def unit_bytes_of(units: pa.Table) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in units.to_pylist():
        totals[row["unit_id"]] = totals.get(row["unit_id"], 0) + row["end"] - row["start"]
    return totals


def assert_covers_each_byte_once(units: pa.Table, inputs: pa.Table) -> None:
    pieces: dict[str, list[tuple[int, int]]] = {}
    for row in units.to_pylist():
        pieces.setdefault(row["path"], []).append((row["start"], row["end"]))
    assert sorted(pieces) == sorted(inputs["path"].to_pylist())
    for file in inputs.to_pylist():
        ranges = sorted(pieces[file["path"]])
        assert ranges[0][0] == 0 and ranges[-1][1] == file["size"]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


def test_one_big_file_and_many_small_make_similar_units() -> None:
    unit = 4 * 2**20
    files = [("big.jsonl", 2 * 10**9, "jsonl", "none")]
    files += [(f"small/{i:05d}.jsonl", 2000, "jsonl", "none") for i in range(10_000)]
    inputs = manifest(files)
    units = cut_units(inputs, unit)
    assert_covers_each_byte_once(units, inputs)
    sizes = list(unit_bytes_of(units).values())
    assert len(sizes) == len(set(units["unit_id"].to_pylist()))
    # Every unit within a factor of 2 of the target, except the one left over at the end.
    assert sum(1 for s in sizes if not unit / 2 <= s < 1.5 * unit) <= 1
    assert len(sizes) == pytest.approx((2 * 10**9 + 2000 * 10_000) / unit, rel=0.15)


def test_non_splittable_big_files_are_units_alone_and_empty_files_kept() -> None:
    unit = 1000
    inputs = manifest(
        [
            ("a.jsonl.gz", 5000, "jsonl", "gzip"),
            ("b.txt", 3000, "text", "none"),
            ("c.jsonl", 0, "jsonl", "none"),
            ("d.parquet", 2500, "parquet", "none"),
            ("e.jsonl", 300, "jsonl", "none"),
        ]
    )
    units = cut_units(inputs, unit)
    assert_covers_each_byte_once(units, inputs)
    by_path = {}
    for row in units.to_pylist():
        by_path.setdefault(row["path"], []).append(row)
    assert [(r["start"], r["end"]) for r in by_path["a.jsonl.gz"]] == [(0, 5000)]
    assert [(r["start"], r["end"]) for r in by_path["b.txt"]] == [(0, 3000)]
    assert [(r["start"], r["end"]) for r in by_path["d.parquet"]] == [
        (0, 833),
        (833, 1666),
        (1666, 2500),
    ]
    for path in ("a.jsonl.gz", "b.txt"):
        uid = by_path[path][0]["unit_id"]
        assert units.filter(pc.equal(units["unit_id"], uid)).num_rows == 1
    assert by_path["c.jsonl"][0]["size"] == 0  # a zero-byte file is in a unit, for quarantine
    assert all(r["size"] == 2500 for r in by_path["d.parquet"])  # size: the whole file's


def test_units_are_deterministic_and_content_addressed() -> None:
    files = [
        (f"f{i:03d}.jsonl", random.Random(i).randrange(1, 5000), "jsonl", "none")
        for i in range(200)
    ]
    units = cut_units(manifest(files, etag="e1"), 4000)
    shuffled = manifest(random.Random(7).sample(files, len(files)), etag="e1")
    assert cut_units(shuffled, 4000).equals(units)
    changed = cut_units(manifest(files, etag="e2"), 4000)  # every file's content changed
    assert set(changed["unit_id"].to_pylist()).isdisjoint(units["unit_id"].to_pylist())
    assert changed.drop(["unit_id", "etag"]).equals(units.drop(["unit_id", "etag"]))


def test_unit_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        cut_units(manifest([("a.jsonl", 10, "jsonl", "none")]), 0)


def test_units_are_runs_of_the_path_order_around_a_big_file() -> None:
    """A unit of small files closes before a big file's pieces (it stayed open around them):
    every unit is a run of the path order, so unit and position order documents alike
    whatever the unit size (near dedup's node ids, run/neardup.node_ids)."""
    files = [(f"a{i}.jsonl", 300, "jsonl", "none") for i in range(3)]
    files += [("m-big.jsonl", 5000, "jsonl", "none")]
    files += [(f"z{i}.jsonl", 300, "jsonl", "none") for i in range(3)]
    units = cut_units(manifest(files), 1000)
    rows = list(zip(units["path"].to_pylist(), units["start"].to_pylist(), strict=True))
    assert rows == sorted(rows)  # the units, in order, walk the files in path order
    ids = units["unit_id"].to_pylist()
    runs = [u for i, u in enumerate(ids) if i == 0 or ids[i - 1] != u]
    assert len(runs) == len(set(ids))  # each unit's pieces are consecutive

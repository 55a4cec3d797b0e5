"""The local content fingerprint (head_tail_xxh3 of the first and last 64 KiB) and how retention
compares a raw file with the record of the run that read it (plan.ReadAs)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from pipeline.core.storage import Location
from pipeline.ingest.listing import INPUTS_SCHEMA, cut_units, list_inputs
from pipeline.ingest.local_listing import HEAD_TAIL_BYTES, head_tail_xxh3
from pipeline.retention.decide import StoredObject
from pipeline.retention.plan import ReadAs

LARGE = 3 * HEAD_TAIL_BYTES  # past the first and before the last 64 KiB: 64 KiB unseen


def fingerprint_after(tmp_path, size: int, offset: int | None) -> tuple[str | None, str | None]:
    """(fingerprint of `size` bytes, fingerprint once the byte at `offset` is flipped)."""
    path = tmp_path / "f.jsonl"
    blob = bytearray(os.urandom(size))
    path.write_bytes(blob)
    before = head_tail_xxh3(str(path), size)
    if offset is not None:
        blob[offset] ^= 0xFF
        path.write_bytes(blob)
    return before, head_tail_xxh3(str(path), size)


@pytest.mark.parametrize(
    ("size", "offset"),
    [
        (1, 0),
        (2 * HEAD_TAIL_BYTES, HEAD_TAIL_BYTES),  # up to 128 KiB the whole content counts
        (LARGE, 0),
        (LARGE, HEAD_TAIL_BYTES - 1),
        (LARGE, 2 * HEAD_TAIL_BYTES),
        (LARGE, LARGE - 1),
    ],
)
def test_a_change_in_the_head_or_tail_changes_the_fingerprint(tmp_path, size, offset):
    before, after = fingerprint_after(tmp_path, size, offset)
    assert before is not None and after is not None and before != after


@pytest.mark.parametrize("offset", [HEAD_TAIL_BYTES, 2 * HEAD_TAIL_BYTES - 1])
def test_a_change_only_in_the_middle_is_not_seen(tmp_path, offset):
    """Documented (docs/retention.md): the bytes between the first and last 64 KiB are not read."""
    before, after = fingerprint_after(tmp_path, LARGE, offset)
    assert before == after is not None


def test_unchanged_content_same_fingerprint_and_unreadable_none(tmp_path):
    assert len(set(fingerprint_after(tmp_path, LARGE, None))) == 1
    assert head_tail_xxh3(str(tmp_path / "missing.jsonl"), 10) is None


def local(size=10, mtime=100.0, head_tail="aa" * 16):
    return StoredObject("raw", "f.jsonl", "/in/f.jsonl", size, mtime, head_tail_xxh3=head_tail)


def test_a_local_file_matches_only_with_size_mtime_and_fingerprint():
    read = ReadAs(10, None, 100.0, "aa" * 16)
    assert read.matches(local())
    assert read.change(local(size=11)) == "changed since read: size 10 -> 11"
    assert read.change(local(mtime=101.0)).startswith("changed since read: mtime ")
    assert read.change(local(head_tail="bb" * 16)).startswith(
        "changed since read: first or last 64 KiB"
    )
    assert read.change(local(head_tail=None)).startswith("not comparable: cannot be read")


def test_a_local_record_without_fingerprint_never_matches():
    """Listings older than the head_tail_xxh3 column: retention keeps the file (the safe side)."""
    why = ReadAs(10, None, 100.0).change(local())
    assert why == "not comparable: listed without head_tail_xxh3 (a run before it was recorded)"


def test_an_s3_object_is_compared_by_size_and_etag_alone():
    s3 = StoredObject("raw", "f.jsonl", "s3://b/in/f.jsonl", 10, 200.0, etag="e1")
    assert ReadAs(10, "e1", None).matches(s3)
    assert ReadAs(10, "e0", None).change(s3) == "changed since read: ETag e0 -> e1"
    assert ReadAs(10, None, None).matches(s3)  # a record without ETag: by path and size


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's /proc/self/io")
def test_the_local_listing_reads_two_64_kib_ends_of_a_large_file(tmp_path):
    (tmp_path / "large.jsonl").write_bytes(b'{"text": "x"}\n' * (1 << 19))  # 7 MiB

    def bytes_read() -> int:
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])

    before = bytes_read()
    inputs, _ = list_inputs(Location.from_uri(str(tmp_path)), ["**"], [])
    read = bytes_read() - before
    assert inputs["head_tail_xxh3"].to_pylist() == [
        head_tail_xxh3(str(tmp_path / "large.jsonl"), 7 << 20)
    ]
    assert 2 * HEAD_TAIL_BYTES <= read < 4 * HEAD_TAIL_BYTES, read


def test_a_local_units_id_follows_its_fingerprint():
    """A run reads a rewritten file again rather than reuse the reading of its old content under
    a record that names the new one."""

    def unit_ids(head_tail):
        row = {"path": "a.jsonl", "size": 10, "etag": None, "mtime": 100.0, "format": "jsonl",
               "compression": "none", "head_tail_xxh3": head_tail}  # fmt: skip
        return cut_units(pa.Table.from_pylist([row], schema=INPUTS_SCHEMA), 1 << 20)["unit_id"]

    assert unit_ids("aa" * 16) == unit_ids("aa" * 16) != unit_ids("bb" * 16)

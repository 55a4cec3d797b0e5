"""The fast path of a .warc.gz piece (fastwarc's GzipReader over the file, web_archive's
_own_members) reads exactly what the member path reads (a zlib stream and a fastwarc iterator
per gzip member): the same documents, rows, quarantine rows and record kinds, on intact files
and on files damaged every way a crawl can be (cut, corrupt, junk, a member of many records),
whatever the unit size."""

from __future__ import annotations

import functools
import gzip
import random
from collections import Counter
from pathlib import Path

import pytest
from support.warc import members, page, request, warcinfo, whole_stream_gzip

from pipeline.core.storage import Location
from pipeline.ingest import web_archive
from pipeline.ingest.listing import cut_units, list_inputs
from pipeline.ingest.readers import read_piece

SAMPLE = Path(__file__).resolve().parents[2] / "sample" / "crawl" / "warc"


def read_all(folder: Path, unit_bytes: int) -> tuple[list, list, dict]:
    root = Location.from_uri(str(folder))
    units = cut_units(list_inputs(root, ["**"], [])[0], unit_bytes)
    docs, bad, kinds = [], [], Counter()
    for piece in units.to_pylist():
        for d, b in read_piece(root, piece, "text", "id", batch_docs=7, keep_fields=("url",),
                               records=kinds):  # fmt: skip
            docs += d.to_pylist()
            bad += b.to_pylist()
    return docs, bad, dict(kinds)


def both_paths(monkeypatch, folder: Path, unit_bytes: int):
    fast = read_all(folder, unit_bytes)
    with monkeypatch.context() as m:
        m.setattr(web_archive, "_gzip_members",
                  functools.partial(web_archive._gzip_members, fast=False))  # fmt: skip
        slow = read_all(folder, unit_bytes)
    return fast, slow


def parts() -> list[bytes]:
    records = [warcinfo()]
    for i in range(12):
        records += [request(f"http://example.com/{i}"), page(i, words=40 + 30 * i)]
    return members(records)


def damaged(rng: random.Random, chunks: list[bytes]) -> bytes:
    """The members with one to three kinds of damage at random places."""
    chunks = list(chunks)
    for _ in range(rng.randint(1, 3)):
        kind, i = rng.choice(["flip", "junk", "garbage", "many", "crc"]), rng.randrange(
            1, len(chunks))  # fmt: skip
        if kind == "flip":
            c = chunks[i]
            at = rng.randrange(len(c))
            n = rng.randint(1, 30)
            chunks[i] = c[:at] + bytes(b ^ 0x5A for b in c[at : at + n]) + c[at + n :]
        elif kind == "junk":
            chunks.insert(i, gzip.compress(b"no WARC record in this member\r\n\r\n"))
        elif kind == "garbage":
            chunks.insert(i, rng.randbytes(rng.randint(1, 40)))
        elif kind == "many":  # a member holding several records
            chunks.insert(i, whole_stream_gzip([page(100 + i), request(), page(200 + i)]))
        else:  # the member's CRC32 changed
            c = chunks[i]
            chunks[i] = c[:-8] + bytes([c[-8] ^ 1]) + c[-7:]
    data = b"".join(chunks)
    if rng.random() < 0.4:  # cut anywhere
        data = data[: rng.randrange(len(data) // 2, len(data))]
    return data


@pytest.mark.parametrize("seed", range(40))
def test_damaged_files_read_the_same_on_both_paths(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    data = damaged(rng, parts())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.warc.gz").write_bytes(data)
    for unit_bytes in (1 << 20, 2000, 700):
        fast, slow = both_paths(monkeypatch, tmp_path / "in", unit_bytes)
        assert fast == slow, (seed, unit_bytes)


@pytest.mark.parametrize("unit_bytes", [64 << 20, 50_000, 3000])
def test_the_crawl_sample_reads_the_same_on_both_paths(monkeypatch, unit_bytes):
    fast, slow = both_paths(monkeypatch, SAMPLE, unit_bytes)
    assert fast == slow
    assert fast[0] and len(fast[2]) > 3  # documents, and records of other kinds


def test_the_fast_path_reads_most_records(tmp_path, monkeypatch):
    """Not a fallback to the member path for every record: all but the last member's."""
    chunks = parts()
    (tmp_path / "a.warc.gz").write_bytes(b"".join(chunks))
    calls = Counter()
    original = web_archive._records

    def counted(stream, base, out, parser=None, skip=0):
        calls["members"] += 1
        calls["skipped"] += skip
        return original(stream, base, out, parser, skip)

    monkeypatch.setattr(web_archive, "_records", counted)
    docs, bad, kinds = read_all(tmp_path, 1 << 20)
    assert bad == [] and len(docs) == 12
    assert kinds == {"warcinfo": 1, "request": 12, "documents": 12}
    assert calls == {"members": 1, "skipped": 1}  # the file's end, checked by the member path

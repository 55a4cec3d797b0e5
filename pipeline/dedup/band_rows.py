"""Near dedup's band rows as a section holds them (pure core): the one codec of the read pass's
band objects (run/near_signing.py) and the band exchange's pass-1 objects (run/neardup.py).

A band partition is a range of band hashes (`partition_of`: the hash's top bits scaled to P), so
a partition's n rows sorted by hash are about 2^64 / (P·n) apart: a section stores that gap, not
the hash, byte plane by byte plane, and zstd drops the planes above it (the partition's bits are
implied by the section). No per-section schema: a section is one zstd frame, ~10 bytes of
framing where an Arrow stream spends ~470, at 10 TB a few hundred rows a section.

    band section: one zstd frame (level 1, content size in its header) of a kind byte, then
      kind 0 (keys as they are)       gaps (8·n), keys (8·n)
      kind 1 (keys by dictionary)     d uint32, gaps (8·n), indexes (4·n), keys (8·d)
        gaps     plane-major: byte 0 (least significant) of every gap, then byte 1, ... byte 7;
                 gap_0 = hash_0, gap_i = hash_i - hash_(i-1) (mod 2^64)
        keys     int64, plane-major: kind 0 each row's, kind 1 the d distinct keys, ascending (a
                 document id, unit << 32 | position, has zero planes zstd drops)
        indexes  kind 1: each row's key's position among those d, uint32 plane-major
      rows sorted by (band_hash, key); kind 1 where the rows hold at most half as many keys
      (few partitions: a document's 32 band rows meet in a section; at 10 TB kind 0)
    key section: the keys, int64 little-endian, 8·n bytes (random: nothing to compress)

Contract: decoded(encoded(rows)) holds the same rows sorted by (band_hash, key), whatever order
they came in: a partition's row order carries no meaning (edges.star_edges sorts them itself),
so a section's bytes depend only on its set of rows. Lossless: the candidates are unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import zstandard

BAND_SCHEMA = pa.schema([("band_hash", pa.uint64()), ("key", pa.int64())])
FORMAT = "pos1"  # in band_key and the pass-1 folder: a format change never reuses older objects
LEVEL = 1  # the planes of random bits are as big at any level, level 1 the fastest


def partition_of(hashes: np.ndarray, n: int) -> np.ndarray:
    """The band partition (0..n-1) of each band hash: floor(hash · n / 2^64), from its top 32
    bits (exact for n < 2^32), so that a partition is one range of hashes."""
    top = np.asarray(hashes, dtype=np.uint64) >> np.uint64(32)
    return ((top * np.uint64(n)) >> np.uint64(32)).astype(np.int64)


def encoded(rows: pa.Table) -> bytes:
    """A band section (module docstring) of band rows (BAND_SCHEMA); no rows, no bytes."""
    if rows.num_rows == 0:
        return b""
    return arrays_encoded(rows["band_hash"].to_numpy(), rows["key"].to_numpy())


def arrays_encoded(hashes: np.ndarray, keys: np.ndarray) -> bytes:
    """`encoded` of the rows (hashes[i], keys[i]), in any order."""
    hashes = np.asarray(hashes).astype(np.uint64, copy=False)
    keys = np.asarray(keys).astype(np.int64, copy=False)
    order = row_order(hashes, keys)
    return encoded_sorted(hashes[order], keys[order])


def row_order(hashes: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The order of rows by (band_hash, key), np.lexsort's: an unstable sort by hash (~5x
    faster than lexsort), then the few runs of equal hashes (a band that documents share)
    put in key order."""
    order = np.argsort(hashes)
    sorted_hashes = hashes[order]
    equal = sorted_hashes[1:] == sorted_hashes[:-1]
    if equal.any():
        tied = np.zeros(len(order), bool)
        tied[1:] |= equal
        tied[:-1] |= equal
        at = np.flatnonzero(tied)  # runs of equal hashes, each in one stretch of `at`
        rows = order[at]  # by key, then as given (lexsort is stable)
        order[at] = rows[np.lexsort((rows, keys[rows], sorted_hashes[at]))]
    return order


def encoded_sorted(hashes: np.ndarray, keys: np.ndarray) -> bytes:
    """`encoded` of rows given as their hashes (uint64) and keys (int64), already in
    row_order."""
    if not len(hashes):
        return b""
    gaps = _planes(np.diff(hashes, prepend=np.uint64(0)).astype("<u8"))  # wraps, as cumsum
    distinct, index = np.unique(keys, return_inverse=True)
    if 2 * len(distinct) <= len(keys):
        head = bytes([1]) + np.uint32(len(distinct)).astype("<u4").tobytes()
        body = gaps + _planes(index.astype("<u4")) + _planes(distinct.astype("<i8"))
    else:
        head, body = bytes([0]), gaps + _planes(keys.astype("<i8"))
    return zstandard.ZstdCompressor(level=LEVEL).compress(head + body)


def _planes(values: np.ndarray) -> bytes:
    """Fixed-width little-endian values byte plane by byte plane (least significant first)."""
    width = values.dtype.itemsize
    return np.ascontiguousarray(values.view(np.uint8).reshape(-1, width).T).tobytes()


def _unplaned(data: np.ndarray, n: int, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(data[: width * n].reshape(width, n).T).view(dtype).reshape(-1)


def decoded(data: bytes | memoryview) -> pa.Table:
    """The band rows (BAND_SCHEMA) of one band section."""
    hashes, keys = arrays_decoded(data)
    return pa.table(
        {"band_hash": pa.array(hashes, pa.uint64()), "key": pa.array(keys, pa.int64())},
        BAND_SCHEMA,
    )


def arrays_decoded(data: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """`decoded`'s rows as arrays: (band hashes uint64, keys int64), sorted by (hash, key)."""
    if not len(data):
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    raw = np.frombuffer(zstandard.ZstdDecompressor().decompress(data), dtype=np.uint8)
    if raw[0] == 0:
        n = (len(raw) - 1) // 16
        gaps = _unplaned(raw[1:], n, "<u8")
        keys = _unplaned(raw[1 + 8 * n :], n, "<i8")
    else:
        d = int(raw[1:5].view("<u4")[0])
        n = (len(raw) - 5 - 8 * d) // 12
        gaps = _unplaned(raw[5:], n, "<u8")
        index = _unplaned(raw[5 + 8 * n :], n, "<u4")
        keys = _unplaned(raw[5 + 12 * n :], d, "<i8")[index]
    return np.cumsum(gaps, dtype=np.uint64), keys.astype(np.int64)


def section_bytes(rows: float, partitions: int, bands: int = 1, ids: float = 2**64) -> float:
    """The model of a band section's size (report/dry_run_stages.py, and the band exchange's cut in
    run/dedup_stage.py): `rows` rows of one of `partitions` partitions, of documents of `bands`
    band rows each (bands / hit rows a document where its bands hit a partition), named by ids
    of `ids` possible values (a unit's positions; a group's unit << 32 | position). A row: its
    gap's entropy (rows 2^64 / (P·n) apart on average: log2 of that plus 1.44 bits, exponential
    gaps), half a byte of what zstd leaves, and its id: log2(ids) bits (kind 0), or log2(d)
    bits of index and the d distinct ids (kind 1, a document's rows meeting in a section); plus
    the frame's ~25 bytes. Within ~6 % of `encoded` where ids are those of 10 TB's sections,
    ~10 % elsewhere (tests/unit/test_band_rows.py)."""
    if rows <= 0:
        return 0.0
    gap_bits = max(0.0, 64 - np.log2(partitions * rows)) + 1.44
    hit = partitions * (1 - (1 - 1 / partitions) ** bands)  # partitions a document's bands hit
    repeats, id_bytes = bands / hit, math.log2(max(2.0, ids)) / 8
    if repeats >= 2:  # kind 1
        key = id_bytes / repeats + np.log2(max(2.0, rows / repeats)) / 8
    else:
        key = id_bytes + 0.1
    return rows * (0.5 + gap_bits / 8 + key) + 25


def exchange_bytes(docs: int, bands: int, writers: int, partitions: int) -> int:
    """The band rows' bytes in the writers' sections, `docs` documents in `writers` units (each
    row naming its document by position): what the band exchange is cut from
    (exchange/plan.exchange_plan)."""
    unit_docs = docs / max(1, writers)
    per_section = unit_docs * bands / max(1, partitions)
    return int(section_bytes(per_section, partitions, bands, unit_docs) * writers * partitions)


def keys_encoded(keys: np.ndarray) -> bytes:
    """A key section: the keys as they are, int64 little-endian."""
    return np.asarray(keys, dtype="<i8").tobytes()


def keys_decoded(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(data, dtype="<i8").astype(np.int64)

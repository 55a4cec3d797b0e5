"""Near dedup's band rows as a section holds them (pure core): the one codec of the read pass's
band objects (run/near_signing.py) and the band exchange's pass-1 objects (run/neardup.py).

A band partition is a range of band hashes (`partition_of`: the hash's top bits scaled to P), so
a partition's n rows sorted by hash are about 2^64 / (P·n) apart: a section stores that gap, not
the hash, byte plane by byte plane, and zstd drops the planes above it (the partition's bits are
implied by the section). No per-section schema: a section is one zstd frame, ~10 bytes of
framing where an Arrow stream spends ~470, at 10 TB a few hundred rows a section.

    band section: one zstd frame (level 1, content size in its header) of 16·n bytes:
        gaps  8·n bytes, plane-major: byte 0 (least significant) of every gap, then byte 1, ...
              byte 7; gap_0 = hash_0, gap_i = hash_i - hash_(i-1) (mod 2^64)
        keys  8·n bytes, int64 little-endian
      rows sorted by (band_hash, key)
    key section: the keys, int64 little-endian, 8·n bytes (random: nothing to compress)

Contract: decoded(encoded(rows)) holds the same rows sorted by (band_hash, key), whatever order
they came in: a partition's row order carries no meaning (minhash.star_edges sorts them itself),
so a section's bytes depend only on its set of rows. Lossless: the candidates are unchanged.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import zstandard

BAND_SCHEMA = pa.schema([("band_hash", pa.uint64()), ("key", pa.int64())])
FORMAT = "gaps1"  # in band_key and the pass-1 folder: a format change never reuses older objects
LEVEL = 1  # as sections.ROWS_COMPRESSION: the planes of random bits are as big at any level


def partition_of(hashes: np.ndarray, n: int) -> np.ndarray:
    """The band partition (0..n-1) of each band hash: floor(hash · n / 2^64), from its top 32
    bits (exact for n < 2^32), so that a partition is one range of hashes."""
    top = np.asarray(hashes, dtype=np.uint64) >> np.uint64(32)
    return ((top * np.uint64(n)) >> np.uint64(32)).astype(np.int64)


def encoded(rows: pa.Table) -> bytes:
    """A band section (module docstring) of band rows (BAND_SCHEMA); no rows, no bytes."""
    if rows.num_rows == 0:
        return b""
    hashes = rows["band_hash"].to_numpy().astype(np.uint64, copy=False)
    keys = rows["key"].to_numpy().astype(np.int64, copy=False)
    order = np.lexsort((keys, hashes))
    gaps = np.diff(hashes[order], prepend=np.uint64(0))  # uint64: wraps, as the cumsum does
    planes = gaps.astype("<u8").view(np.uint8).reshape(-1, 8).T
    raw = np.ascontiguousarray(planes).tobytes() + keys[order].astype("<i8").tobytes()
    return zstandard.ZstdCompressor(level=LEVEL).compress(raw)


def decoded(data: bytes | memoryview) -> pa.Table:
    """The band rows (BAND_SCHEMA) of one band section."""
    if not len(data):
        return BAND_SCHEMA.empty_table()
    raw = np.frombuffer(zstandard.ZstdDecompressor().decompress(data), dtype=np.uint8)
    n = len(raw) // 16
    gaps = np.ascontiguousarray(raw[: 8 * n].reshape(8, n).T).view("<u8").reshape(-1)
    keys = raw[8 * n :].view("<i8")
    return pa.table(
        {
            "band_hash": pa.array(np.cumsum(gaps, dtype=np.uint64), pa.uint64()),
            "key": pa.array(keys.astype(np.int64), pa.int64()),
        },
        BAND_SCHEMA,
    )


def section_bytes(rows: float, partitions: int, bands: int = 1) -> float:
    """The model of a band section's size (report/dry_run.py, and the band exchange's cut in
    run/dedup_stage.py): `rows` rows of one of `partitions` partitions, of documents of `bands`
    band rows each. A row: its gap's entropy (rows 2^64 / (P·n) apart on average: log2 of that
    plus 1.44 bits, exponential gaps), its key (8 bytes; a document has bands / hit rows where
    its bands hit a partition, and a repeat that zstd level 1 finds costs ~2.2: all of them in
    up to 256 KiB of section, fewer past it), half a byte of what zstd leaves; plus the frame's
    16 bytes. Within ~6 % of `encoded` from 100 to 200k rows of distinct keys, ~10 % where keys
    repeat (few partitions); tests/unit/test_band_rows.py."""
    if rows <= 0:
        return 0.0
    gap_bits = max(0.0, 64 - np.log2(partitions * rows)) + 1.44
    hit = partitions * (1 - (1 - 1 / partitions) ** bands)  # partitions a document's bands hit
    repeats, found = bands / hit, min(1.0, 2**18 / (16 * rows))
    key = 8 / repeats + (1 - 1 / repeats) * (found * 2.2 + (1 - found) * 8)
    return rows * (0.5 + gap_bits / 8 + key) + 16


def exchange_bytes(docs: int, bands: int, writers: int, partitions: int) -> int:
    """The band rows' bytes in the writers' sections, `docs` documents in `writers` units: what
    the band exchange is cut from (exchange/plan.exchange_plan)."""
    per_section = docs * bands / max(1, writers * partitions)
    return int(section_bytes(per_section, partitions, bands) * writers * partitions)


def keys_encoded(keys: np.ndarray) -> bytes:
    """A key section: the keys as they are, int64 little-endian."""
    return np.asarray(keys, dtype="<i8").tobytes()


def keys_decoded(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(data, dtype="<i8").astype(np.int64)

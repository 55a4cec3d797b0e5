"""Exact deduplication across the whole corpus (pure core): content hashes, hash-partitioned
rows, and the one copy each partition keeps.

Contract: every copy of a text meets in the same partition whatever unit or file it came from;
the copy kept is a property of the documents and the config (first-listed source, then the
smallest doc_id, source, row), never of task completion order. The rule: docs/dedup.md,
"Exact"; the hash-row and removal schemas and the request counts: docs/formats.md,
"Exact dedup: hash rows and removals".
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.text import content_hash
from pipeline.dedup.nfc import NormalForm

HASH_SCHEMA = pa.schema(
    [
        ("hash", pa.binary(16)),
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("row", pa.int64()),
        ("unit_id", pa.string()),
        ("origin", pa.string()),
        ("origin_rank", pa.int32()),
    ]
)

REMOVED_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("row", pa.int64()),
        ("unit_id", pa.string()),
        ("rule", pa.string()),
        ("kept_id", pa.string()),
        ("kept_source", pa.string()),
        ("kept_row", pa.int64()),
        ("similarity", pa.float64()),
        ("origin", pa.string()),
        ("kept_origin", pa.string()),
    ]
)


# the audit (removed.parquet) and the read pass's removals: why, where a rule says (curation)
AUDIT_SCHEMA = pa.schema([*REMOVED_SCHEMA, ("detail", pa.string())])


def hash_rows(
    docs: pa.Table, unit_id: str, origin: str = "", rank: int = 0, known: NormalForm | None = None
) -> pa.Table:
    """Content hashes of a batch of documents (doc_id, source, row, text) of one unit, whose
    source is `origin`, listed `rank`-th in the config (its dedup priority). `known`:
    nfc.normal_form of its texts, where the caller has it."""
    from pipeline.dedup import text_kernel  # here: importing numba costs ~1 s, only workers pay

    texts = docs.column("text")
    if text_kernel.available():  # the same hashes, normalised in a compiled loop
        hashes = text_kernel.content_hashes(texts, known=known)
    else:
        hashes = [content_hash(t) for t in texts.to_pylist()]
    return pa.table(
        {
            "hash": pa.array(hashes, pa.binary(16)),
            "doc_id": docs.column("doc_id"),
            "source": docs.column("source"),
            "row": docs.column("row"),
            "unit_id": pa.array([unit_id] * docs.num_rows, pa.string()),
            "origin": pa.array([origin] * docs.num_rows, pa.string()),
            "origin_rank": pa.array([rank] * docs.num_rows, pa.int32()),
        },
        schema=HASH_SCHEMA,
    )


def _hash_words(hashes: pa.Array) -> np.ndarray:
    """The 16-byte hashes as an (n, 2) array of little-endian uint64 words (no copy)."""
    data = pc.cast(hashes, pa.binary(16))
    if len(data) == 0:
        return np.empty((0, 2), dtype="<u8")
    raw = np.frombuffer(data.buffers()[1], dtype="<u8")
    return raw[2 * data.offset : 2 * (data.offset + len(data))].reshape(-1, 2)


def hash_partition(hashes: pa.Array, partitions: int) -> np.ndarray:
    """Partition index of each 16-byte hash (its first 8 bytes, little-endian, modulo P)."""
    return (_hash_words(hashes)[:, 0] % np.uint64(partitions)).astype(np.int64)


def exact_removals(rows: pa.Table) -> pa.Table:
    """Every row whose hash also belongs to a smaller (origin_rank, doc_id, source, row) is
    removed: the first-listed source's copy is kept, then the smallest id."""
    if rows.num_rows == 0:
        return REMOVED_SCHEMA.empty_table()
    ordered = rows.sort_by(
        [
            ("hash", "ascending"),
            ("origin_rank", "ascending"),
            ("doc_id", "ascending"),
            ("source", "ascending"),
            ("row", "ascending"),
        ]
    )
    words = _hash_words(ordered.column("hash").combine_chunks())
    first = np.ones(len(words), dtype=bool)
    first[1:] = (words[1:] != words[:-1]).any(axis=1)
    keeper_index = np.maximum.accumulate(np.where(first, np.arange(len(words)), 0))
    removed = np.flatnonzero(~first)
    keepers = pa.array(keeper_index[removed])
    dropped = ordered.take(pa.array(removed))
    kept = ordered.take(keepers)
    n = dropped.num_rows
    return pa.table(
        {
            "doc_id": dropped.column("doc_id"),
            "source": dropped.column("source"),
            "row": dropped.column("row"),
            "unit_id": dropped.column("unit_id"),
            "rule": pa.array(["exact"] * n, pa.string()),
            "kept_id": kept.column("doc_id"),
            "kept_source": kept.column("source"),
            "kept_row": kept.column("row"),
            "similarity": pa.array(np.ones(n), pa.float64()),
            "origin": dropped.column("origin"),
            "kept_origin": kept.column("origin"),
        },
        schema=REMOVED_SCHEMA,
    )


def drop_removed(rows: pa.Table, removed: pa.Table) -> pa.Table:
    """`rows` less those whose (source, row) is in `removed`, in (source, row) order: what a
    unit keeps after dedup, for every stage that reads a unit's rows after the audit."""
    if not removed.num_rows:
        return rows
    gone = removed.select(["source", "row"])
    kept = rows.join(gone, keys=["source", "row"], join_type="left anti")
    return kept.sort_by([("source", "ascending"), ("row", "ascending")])

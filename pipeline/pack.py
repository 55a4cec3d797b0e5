"""Global seeded shuffle and packing into shards (pure core).

Order: every kept document has a shuffle key = xxh3-64(doc_id, seed) (text.shuffle_key); the
dataset is all documents sorted by (key, doc_id, source, row). That order depends only on the
documents and the seed, never on how many workers ran or which unit a document came from.

Shards: with T token bytes in all, S = ceil(T / shard_bytes) shards cut the 64-bit key space into
S equal ranges; shard k holds the documents whose key falls in range k. Keys are uniform hashes, so
shards come out close to T / S bytes (<= the target on average) and no document is ever split.
A shard is built from each unit's key-sorted token file with one range read per unit, so memory per
pack task is bounded by the shard size, not the corpus.

Token file of a unit (tokens/<unit>.bin + tokens/<unit>.parquet): the .bin holds the unit's kept
documents' tokens (EOS appended) concatenated in shuffle order; the .parquet has one row per
document in the same order: doc_id, source, row, key uint64, length int64 (tokens).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

TOKEN_INDEX_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("row", pa.int64()),
        ("key", pa.uint64()),
        ("length", pa.int64()),
    ]
)
SORT_KEYS = [
    ("key", "ascending"),
    ("doc_id", "ascending"),
    ("source", "ascending"),
    ("row", "ascending"),
]
_KEY_SPACE = 2**64


def shard_count(total_token_bytes: int, shard_bytes: int) -> int:
    return max(1, math.ceil(total_token_bytes / shard_bytes))


def key_range(shard: int, shards: int) -> tuple[int, int]:
    """Half-open key range [lo, hi) of one shard (hi may be 2**64)."""
    width = -(-_KEY_SPACE // shards)
    return shard * width, min((shard + 1) * width, _KEY_SPACE)


def rows_in_range(sorted_keys: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Index range [i0, i1) of keys in [lo, hi) within an ascending uint64 array."""
    i0 = int(np.searchsorted(sorted_keys, np.uint64(lo), side="left"))
    i1 = (
        len(sorted_keys)
        if hi >= _KEY_SPACE
        else int(np.searchsorted(sorted_keys, np.uint64(hi), side="left"))
    )
    return i0, i1


def gather_segments(tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate tokens[starts[i] : starts[i] + lengths[i]] for all i, vectorised."""
    if len(lengths) == 0:
        return tokens[:0]
    # Documents that follow each other in `tokens` are copied as one run: a shard built from one
    # unit is a single slice, and the merge of many units costs one slice per run, not per token.
    breaks = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
    run_first = np.concatenate([[0], breaks])
    run_last = np.concatenate([breaks, [len(lengths)]]) - 1
    run_starts = starts[run_first]
    run_ends = starts[run_last] + lengths[run_last]
    return np.concatenate([tokens[a:b] for a, b in zip(run_starts, run_ends, strict=True)])

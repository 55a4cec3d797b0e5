"""The held-out validation split (pure core).

A document is in the validation set when xxh3-64 of its stable doc id, under a fixed salt
(VALID_SALT, distinct from any shuffle seed), falls below ``split.valid_fraction`` x 2^64. The
decision is a property of the id alone: the same whatever the workers, unit sizes or sources'
order, and disjoint from training by construction (every kept document is in exactly one
split). It is drawn where documents are packed (tokens/pack.py: each pack pass-1 task keeps the
rows of its split), after dedup, so a validation document never has a copy in training that
exact or near dedup would have removed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import xxhash

from pipeline.core.layout import SPLITS  # noqa: F401 - the splits, as the layout names them

VALID_SALT = 0x76616C6964  # "valid": never a shuffle seed's role


def valid_threshold(fraction: float) -> int:
    return int(fraction * 2.0**64)


def in_valid(doc_ids: pa.Array | pa.ChunkedArray | list[str], fraction: float) -> np.ndarray:
    """A bool per document: True when it belongs to the validation set."""
    ids = doc_ids.to_pylist() if hasattr(doc_ids, "to_pylist") else list(doc_ids)
    if fraction <= 0:
        return np.zeros(len(ids), dtype=bool)
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(d.encode("utf-8"), seed=VALID_SALT) for d in ids),
        dtype=np.uint64,
        count=len(ids),
    )
    return hashes < np.uint64(min(valid_threshold(fraction), 2**64 - 1))


def split_mask(doc_ids, split: str, fraction: float) -> np.ndarray:
    """A bool per document: True when it belongs to `split` ("train" or "valid")."""
    valid = in_valid(doc_ids, fraction)
    if split == "valid":
        return valid
    if split == "train":
        return ~valid
    raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")

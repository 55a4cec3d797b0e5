"""`python` curation steps for tests (importable on Ray workers, unlike a test module): one that
behaves, and one for each way a step's function can misbehave (curate/user.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def keep_long(batch: pa.Table) -> np.ndarray:
    """A filter returning a NumPy bool array: documents of 30 characters or more."""
    return pc.greater_equal(pc.utf8_length(batch["text"]), 30).to_numpy(zero_copy_only=False)


def raises(batch: pa.Table) -> list[bool]:
    raise ValueError("no column 'lang'\nsecond line of the message")


def one_value(batch: pa.Table) -> list[bool]:
    return [True]


def ints(batch: pa.Table) -> list[int]:
    return [1] * batch.num_rows


def strings(batch: pa.Table) -> list[str]:
    return ["yes"] * batch.num_rows


def nothing(batch: pa.Table) -> None:
    return None


def two_arguments(batch: pa.Table, threshold: float) -> list[bool]:
    return [True] * batch.num_rows


NOT_A_FUNCTION = 3

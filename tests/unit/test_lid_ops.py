"""A word n-gram's bucket without a division (curate/lid_ops.py's _remainder: Barrett's estimate
and at most two corrections, as selects) is h % bucket for every uint64 h."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from pipeline.curate import lid_kernel, lid_ops

pytestmark = pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")


@numba.njit
def remainders(hs, d, m):
    out = np.empty_like(hs)
    for k in range(hs.shape[0]):
        out[k] = lid_ops._remainder(hs[k], d, m)
    return out


@pytest.mark.parametrize("bucket", [1, 2, 3, 10, 2_000_000, 1_000_000, 2**31 - 1, 2**32 + 15])
def test_remainder_is_the_division_remainder(bucket):
    rng = np.random.default_rng(bucket)
    hs = rng.integers(0, 2**64, 100_000, np.uint64, endpoint=False)
    top = np.uint64(2**64 - 1)
    edges = np.array([0, 1, bucket - 1, bucket, bucket + 1, 2**63, top, top - np.uint64(bucket)],
                     np.uint64)  # fmt: skip
    hs = np.concatenate([hs, edges, (hs // np.uint64(bucket)) * np.uint64(bucket) - np.uint64(1)])
    got = remainders(hs, np.uint64(bucket), np.uint64((2**64 - 1) // bucket))
    assert (got == hs % np.uint64(bucket)).all()

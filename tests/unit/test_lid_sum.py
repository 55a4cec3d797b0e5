"""Rows summed with the sum held in registers (curate/lid_sum.py) give the scalar loop's float32
sums bit for bit, whatever the width (16-lane vectors in groups of four, single ones, the last
columns one by one), the rows' order and repeats, and how far ahead rows are asked for."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.curate import lid_kernel, lid_sum

pytestmark = pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")


def scalar(x: np.ndarray, rows: np.ndarray, ids: np.ndarray, a: int, b: int) -> np.ndarray:
    x = x.copy()
    for r in range(a, b):
        x += rows[ids[r]]  # float32 + float32, lane by lane, row after row
    return x


@pytest.mark.parametrize("dim", [1, 10, 16, 20, 48, 64, 100, 128, 130])
def test_sums_equal_the_scalar_loops(dim):
    rng = np.random.default_rng(dim)
    # magnitudes far apart: a different order of additions would give other bits
    rows = (rng.standard_normal((500, dim)) * 10.0 ** rng.integers(-6, 6, (500, dim)))
    rows = rows.astype(np.float32)
    for case in range(20):
        ids = rng.integers(0, 500, rng.integers(0, 300)).astype(np.int64 if case % 2 else np.int32)
        a = int(rng.integers(0, len(ids) + 1))
        b = int(rng.integers(a, len(ids) + 1))
        x = (rng.standard_normal(dim) * 1e3).astype(np.float32)
        want = scalar(x, rows, ids, a, b)
        for ahead, far in ((0, 0), (1, 0), (16, 0), (2, 5), (16, 48)):
            got = x.copy()
            lid_sum._add_rows(got, rows, ids, a, b, ahead, far)
            assert got.tobytes() == want.tobytes(), (dim, case, ahead, far)

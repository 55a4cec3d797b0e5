"""The compiled predict's large tables lie on transparent huge pages where the kernel grants them
(our own MADV_HUGEPAGE advice, 2 MiB-aligned, whatever NumPy's own setting), and where the
platform has no such advice they are plain arrays: the same values, the same predictions."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.curate import huge_pages, lid_kernel
from pipeline.curate.language import _utf8, model_path

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
GRANTED = THP.exists() and "[never]" not in THP.read_text()
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Le renard brun saute, ça va très bien",
         "Быстрая коричневая лиса", "", "a </s> b", "naïvetés-über-straße " * 40]  # fmt: skip


@pytest.fixture
def numpy_advice_off():
    """NumPy advises its own large arrays MADV_HUGEPAGE by default: off here, so that only our
    advice can give the pages."""
    multiarray = getattr(np, "_core", None) or np.core  # NumPy 2, NumPy 1
    setting = multiarray.multiarray._get_madvise_hugepage()
    multiarray.multiarray._set_madvise_hugepage(False)
    yield
    multiarray.multiarray._set_madvise_hugepage(setting)


def mapped(array: np.ndarray) -> bool:
    """Whether the array lies in an mmap of ours (anonymous memory advised for huge pages)."""
    while array is not None and not isinstance(array, mmap.mmap):
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return array is not None


def predictions(predictor: lid_kernel.Predictor) -> list:
    arr = pa.array(TEXTS * 3)
    return [a.tolist() for a in predictor.score_texts(*_utf8(arr), -1, lid_kernel.TEXT, 0)]


@pytest.mark.skipif(not GRANTED, reason="this kernel grants no transparent huge pages")
@pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")
def test_the_large_tables_are_on_huge_pages(numpy_advice_off):
    predictor = lid_kernel.Predictor(str(model_path()))
    rows, slots = predictor._net[0], predictor._cache[1]
    for table in (rows, slots):
        assert table.nbytes >= huge_pages.HUGE
        assert table.ctypes.data % huge_pages.HUGE == 0
        assert huge_pages.huge_kb(table) >= 1024 * (table.nbytes // huge_pages.HUGE * 2 - 2)
    plain = np.zeros(rows.nbytes // 4, np.float32)  # NumPy's own, advice off: no huge page
    assert huge_pages.huge_kb(plain) == 0


@pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")
def test_without_the_advice_the_tables_are_plain_and_predict_the_same(monkeypatch):
    advised = lid_kernel.Predictor(str(model_path()))
    monkeypatch.delattr(mmap, "MADV_HUGEPAGE", raising=False)  # a platform without it
    array = huge_pages.zeros((3 << 20,), np.uint8)
    assert array.ctypes.data % huge_pages.LINE == 0 and not array.any() and not mapped(array)
    plain = lid_kernel.Predictor(str(model_path()))
    assert mapped(advised._net[0]) and not mapped(plain._net[0])
    tables = zip(advised._net[:2] + advised._words[:7], plain._net[:2] + plain._words[:7],
                 strict=True)  # fmt: skip
    for ours, theirs in tables:
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    assert predictions(plain) == predictions(advised)


def test_a_small_array_starts_on_a_line_and_a_copy_equals_its_source():
    for shape, dtype in (((5, 3), np.float32), ((0,), np.int64), ((1 << 19,), np.int64)):
        source = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        copied = huge_pages.copy(source)
        assert copied.flags.c_contiguous and copied.flags.writeable
        assert copied.ctypes.data % huge_pages.LINE == 0 or not copied.size
        assert copied.dtype == source.dtype and np.array_equal(copied, source)

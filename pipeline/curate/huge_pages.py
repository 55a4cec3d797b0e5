"""Arrays on transparent huge pages, for the compiled predict's large tables (curate/lid_kernel.py:
the model's input and output rows, the dictionary, the word cache). A row of a 256 MB table read
at random misses the TLB on nearly every read with 4 KiB pages; with 2 MiB pages the whole table
is a few hundred TLB entries (measured: the bench's warm predict ~13 % faster).

An array of at least HUGE bytes is placed in anonymous private memory advised MADV_HUGEPAGE
before it is first written (Linux's THP in `madvise` or `always` mode then backs it with 2 MiB
pages), starting on a 2 MiB boundary. NumPy advises its own large arrays the same way by
default, but not where a user turned it off, nor 2 MiB-aligned. Where the platform has no such
advice (another OS, THP built out, `never`), or for a smaller array, the array is a plain one
that starts on a 64-byte cache line: the same values, only slower.
"""

from __future__ import annotations

import math
import mmap
import re
from typing import Any

import numpy as np

HUGE = 2 << 20  # bytes: one huge page; a smaller array is not worth one
LINE = 64  # bytes: a cache line


def zeros(shape: tuple[int, ...], dtype: Any, huge: bool = True) -> np.ndarray:
    """A zeroed C array: on huge pages where it is at least HUGE bytes (and `huge`) and the
    platform advises them, else starting on a cache line. Its pages are written here (mapped
    now, not one by one in a compiled loop)."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    raw = _advised(size) if huge and size >= HUGE else None
    if raw is None:
        raw = np.empty(size + LINE, np.uint8)
        start = -raw.ctypes.data % LINE
    else:
        start = -raw.ctypes.data % HUGE
    out = raw[start : start + size]
    out[:] = 0
    return out.view(dtype).reshape(shape)


def copy(array: np.ndarray, huge: bool = True) -> np.ndarray:
    """A C-contiguous copy of `array`, placed as `zeros` places it."""
    out = zeros(array.shape, array.dtype, huge)
    out[...] = array
    return out


def _advised(size: int) -> np.ndarray | None:
    """size + HUGE bytes of anonymous private memory advised MADV_HUGEPAGE (unwritten), or None
    where the platform has no such advice."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if advice is None or None in flags:
        return None
    try:
        memory = mmap.mmap(-1, size + HUGE, flags=flags[0] | flags[1])
        memory.madvise(advice)
    except (OSError, ValueError):  # THP built out of the kernel: EINVAL
        return None
    return np.frombuffer(memory, np.uint8)  # the array keeps the mapping


def huge_kb(array: np.ndarray) -> int:
    """The KiB of `array`'s mapping that the kernel backs with huge pages now (Linux's
    /proc/self/smaps AnonHugePages; 0 where it cannot tell)."""
    try:
        with open("/proc/self/smaps") as f:
            text = f.read()
    except OSError:
        return 0
    at = array.ctypes.data
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        span = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", block)
        if span and int(span[1], 16) <= at < int(span[2], 16):
            found = re.search(r"\nAnonHugePages:\s+(\d+) kB", block)
            return int(found[1]) if found else 0
    return 0

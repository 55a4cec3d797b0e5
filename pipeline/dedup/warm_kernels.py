"""`python -m pipeline.dedup.warm_kernels [--beside]`: compile (or load) every dedup kernel into
kernel_cache's shared folder under its lock, and mark the machine ready. Started by
kernel_cache.warm_in_background when a run starts; exit 0 when the kernels are usable, 1 when
they are not (no numba, or they do not compile: the Python paths run). `--beside`: compile only
the loops the locked run compiles last (text_kernel.compile_late), without the lock, at the
same time on another core; the locked run then loads them from the cache."""

from __future__ import annotations

import os
import sys

from pipeline.dedup import kernel_cache, minhash_kernel, text_kernel


def warm() -> bool:
    with kernel_cache.compiling():
        usable = minhash_kernel.available()  # text_kernel's loops too
        if usable:
            kernel_cache.mark_ready()
    return usable


def warm_beside() -> bool:
    try:
        text_kernel.compile_late()
    except Exception:  # noqa: BLE001 - the locked run compiles them, or finds they do not compile
        return False
    return True


if __name__ == "__main__":
    os.nice(10)  # spare cycles only: Ray's start, running beside it, has a deadline
    sys.exit(0 if (warm_beside() if "--beside" in sys.argv[1:] else warm()) else 1)

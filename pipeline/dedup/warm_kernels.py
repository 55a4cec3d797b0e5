"""`python -m pipeline.dedup.warm_kernels`: compile (or load) every dedup kernel into
kernel_cache's shared folder under its lock, and mark the machine ready. Started by
kernel_cache.warm_in_background when a run starts; exit 0 when the kernels are usable, 1 when
they are not (no numba, or they do not compile: the Python paths run)."""

from __future__ import annotations

import os
import sys

from pipeline.dedup import kernel_cache, minhash_kernel


def warm() -> bool:
    with kernel_cache.compiling():
        usable = minhash_kernel.available()  # text_kernel's loops too
        if usable:
            kernel_cache.mark_ready()
    return usable


if __name__ == "__main__":
    os.nice(10)  # spare cycles only: Ray's start, running beside it, has a deadline
    sys.exit(0 if warm() else 1)

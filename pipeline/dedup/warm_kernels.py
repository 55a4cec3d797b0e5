"""Compile (or load) every dedup kernel, and those of curation steps (curate/warm.py), into
kernel_cache's shared folder under its lock, and mark the machine ready for them.

Two callers: `python -m pipeline warm [STEP ...]` (cli/tool_commands.py), once after install or
on a cluster node's image, so that no run compiles (every built-in step when none is named); and
kernel_cache.warm_in_background, which starts `python -m pipeline.dedup.warm_kernels STEP ...`
at nice 10 beside Ray's start when a run finds its kernels not yet compiled. Exit 0 when the
kernels are usable, 1 when they are not (no numba, or they do not compile: the Python paths run).
"""

from __future__ import annotations

import os
import sys
import time

from pipeline.dedup import kernel_cache


def warm(steps: tuple[str, ...] = ()) -> list[str] | None:
    """The curation steps warmed (those built from defaults alone), or None where the kernels
    are not usable."""
    from pipeline.dedup import minhash_kernel

    with kernel_cache.compiling():
        if not minhash_kernel.available():  # text_kernel's loops too
            return None
        from pipeline.curate import warm as curate_warm

        warmed = curate_warm.warm(steps)
        kernel_cache.mark_ready(steps)
    return warmed


def main(steps: tuple[str, ...] = ()) -> int:
    """The `warm` command: every built-in step when `steps` is empty; one line of what was
    done, where, and in how many seconds. An unknown step: one line, exit 2, nothing done."""
    from pipeline.curate import chain

    if unknown := [s for s in steps if s not in chain.REGISTRY]:
        print(f"warm: unknown step {unknown[0]!r}; steps: {sorted(chain.REGISTRY)}",
              file=sys.stderr)  # fmt: skip
        return 2
    steps = steps or tuple(chain.REGISTRY)
    if kernel_cache.ready(steps):
        print(f"kernels already compiled in {kernel_cache.numba_dir()}")
        return 0
    start = time.perf_counter()
    warmed = warm(steps)
    if warmed is None:
        print("kernels not compiled (numba missing or failing here): the Python paths run")
        return 1
    print(f"kernels compiled (or loaded) in {time.perf_counter() - start:.1f} s into"
          f" {kernel_cache.numba_dir()}: dedup, {', '.join(warmed)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    os.nice(10)  # spare cycles only: Ray's start, running beside it, has a deadline
    sys.exit(0 if warm(tuple(sys.argv[1:])) is not None else 1)

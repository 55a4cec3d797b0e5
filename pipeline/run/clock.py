"""Where a run's wall time goes, phase by phase (the summary's `time` line and the startup
benchmark): Ray start, worker start, stages, commit, report, and what no phase claims."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

PHASES = ("ray start", "worker start", "stages", "commit", "report")


class PhaseClock:
    """Seconds per phase, from its creation; a phase timed twice adds up."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def split(self) -> dict[str, float]:
        """Each phase's seconds (PHASES first), `other` (the rest) and `total`, rounded to ms."""
        total = time.perf_counter() - self.start
        named = {p: self.seconds[p] for p in PHASES if p in self.seconds}
        named |= {p: s for p, s in self.seconds.items() if p not in named}
        split = named | {"other": max(0.0, total - sum(named.values())), "total": total}
        return {k: round(v, 3) for k, v in split.items()}


def timing_line(split: dict[str, float], note: str = "") -> str:
    """`time  12.3 s: ray start 4.1, worker start 1.2, ...` (the summary's line)."""
    parts = ", ".join(f"{k} {v:.1f}" for k, v in split.items() if k != "total")
    return f"time              {split['total']:>10.1f} s  ({parts}){note}"

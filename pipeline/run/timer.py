"""What each task reports about itself: wall time, storage I/O and its own peak memory."""

from __future__ import annotations

import resource
import time
from typing import Any

from pipeline.core.storage import IO


class TaskTimer:
    """Time, storage I/O and peak memory of one task, reported in its summary."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.io = IO.snapshot()
        reset_peak_rss()

    def summary(self, **fields: Any) -> dict[str, Any]:
        fields["seconds"] = time.perf_counter() - self.start
        fields["io"] = IO.delta(IO.snapshot(), self.io)
        fields["peak_rss_mb"] = peak_rss_mb()
        return fields


def reset_peak_rss() -> None:
    """Start the process's peak-RSS count afresh (Linux), so that a task reports its own peak,
    not that of an earlier task the same Ray worker ran; elsewhere the peak stays cumulative."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """Peak resident memory of this worker since its task started (see reset_peak_rss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

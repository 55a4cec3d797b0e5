"""What each task reports about itself: wall time, storage I/O, its own peak memory and the node
it ran on."""

from __future__ import annotations

import resource
import time
from typing import TypeVar

import ray

from pipeline.core.io_counters import IO
from pipeline.run.results import TaskResult

R = TypeVar("R", bound=TaskResult)


class TaskTimer:
    """Time, storage I/O and peak memory of one task, reported in its result."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.io = IO.snapshot()
        reset_peak_rss()

    def result(self, kind: type[R], **fields) -> R:
        """The task's result of type `kind`: its own fields plus the time, I/O and peak so far."""
        return kind(
            **fields,
            seconds=time.perf_counter() - self.start,
            io=self.io_delta(),
            peak_rss_mb=peak_rss_mb(),
            node=node_ip(),
        )


    def io_delta(self) -> dict[str, int]:
        """The task's storage I/O so far."""
        return IO.delta(IO.snapshot(), self.io)


def node_ip() -> str:
    """The IP address of the Ray node this process belongs to; "" when Ray is not running here
    (a task called inline by a test)."""
    return ray.util.get_node_ip_address() if ray.is_initialized() else ""


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

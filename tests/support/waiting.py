"""Waiting for a state, not for a time: a test that needs the code to reach some state (a
request held, a buffer full, a process gone) polls for that state. The guard only turns a hang
into a failure; it is far beyond what any machine, fast, slow or loaded, needs."""

from __future__ import annotations

import time
from collections.abc import Callable

HANG_GUARD_S = 600.0


def wait_until(reached: Callable[[], object], what: str, guard_s: float = HANG_GUARD_S) -> None:
    """Return once `reached()` is true; fail naming `what` if it is not after `guard_s`."""
    deadline = time.monotonic() + guard_s
    while not reached():
        assert time.monotonic() < deadline, f"not reached after {guard_s:g} s: {what}"
        time.sleep(0.01)

"""What a run starts before its driver's own imports, so that they overlap: the kernels' compile
child (dedup/kernel_cache.py, on a machine that has not compiled them yet) and, for a local
run, Ray (run/ray_env.ensure_ray) in a thread. The thread mostly waits on the processes Ray
spawns; the driver imports its stages (~1-2 s) meanwhile.

`EarlyStart.begin(cfg)` starts both and the phase clock; `wait_for_ray()` (the `ray start`
phase: from the thread's start until Ray is up, whatever the driver did meanwhile) re-raises
what ray.init raised; `finish_compile()` ends the compile child once the workers hold the
kernels; `settle()`, in a `finally`, waits for ray.init to return and ends the child on any
path, so nothing outlives the command half-started. The thread outlives ray.init, parked, for
as long as the process runs: Ray's processes are killed when the thread that spawned them
ends. A cluster run (an address) starts nothing early: ray.init only connects there, and its
workers compile for themselves.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from pipeline.config import Config
from pipeline.dedup import kernel_cache
from pipeline.run import ray_env
from pipeline.run.clock import PhaseClock


class EarlyStart:
    def __init__(self, cfg: Config, clock: PhaseClock) -> None:
        self.cfg, self.clock = cfg, clock
        self.compile_child: subprocess.Popen | None = None
        self.compiled_kernels = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._up = threading.Event()  # ray.init returned (or raised)
        self._t0 = time.perf_counter()

    @classmethod
    def begin(cls, cfg: Config, clock: PhaseClock | None = None) -> EarlyStart:
        early = cls(cfg, clock or PhaseClock())
        if ray_env.is_local(cfg) and (cfg.dedup.exact or cfg.dedup.near.enabled):
            early.compile_child = kernel_cache.warm_in_background()
            early.compiled_kernels = early.compile_child is not None
        if ray_env.is_local(cfg) and not ray_env.ray_is_up():
            _sigterm_exits()  # what ray.init does in the main thread, which the thread cannot
            early._thread = threading.Thread(target=early._start_ray, name="ray-start", daemon=True)
            early._t0 = time.perf_counter()
            early._thread.start()
        return early

    def _start_ray(self) -> None:
        try:
            ray_env.ensure_ray(self.cfg)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread by wait_for_ray
            self._error = e
        finally:
            self._up.set()
        # Ray's processes die with the *thread* that spawned them (PR_SET_PDEATHSIG is per
        # thread on Linux): this one stays, parked, until the process exits (a daemon thread).
        threading.Event().wait()

    def wait_for_ray(self) -> None:
        if self._thread is None:
            with self.clock.phase("ray start"):
                ray_env.ensure_ray(self.cfg)
        else:
            self._wait_for_thread()
        kernel_cache.hurry(self.compile_child)

    def _wait_for_thread(self) -> None:
        self._up.wait()
        self.clock.seconds["ray start"] = time.perf_counter() - self._t0
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def finish_compile(self) -> None:
        kernel_cache.finish(self.compile_child)
        self.compile_child = None

    def settle(self) -> None:
        if self._thread is not None:
            self._up.wait()
            self._thread = None
        self.finish_compile()


def _sigterm_exits() -> None:
    """ray.init, in the main thread, makes SIGTERM exit the interpreter (so that its atexit
    shutdown runs); from another thread it cannot, and says so. Done here instead."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))

"""A Ray worker killed with SIGKILL in the middle of a unit (issue 7): no byte changes.

The sample in a SeaweedFS bucket (the session's s3_sample_run, also the reference run) is read
through pipeline.testing.fault_proxy, which holds the first GET of one input object for a while,
so one `read_unit` task is reliably mid-unit. The test finds the worker process owning the held
connection and kills it. Ray retries the task on a fresh worker (a worker death is retried,
max_retries defaults to 3); should the run fail instead, the same run again must resume. Either
way the committed shards must equal an uninterrupted run's.
"""

from __future__ import annotations

import importlib
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import ray
from support import s3_config

from pipeline.core.storage import Location
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import comparable
from pipeline.run.driver import run_pipeline
from pipeline.run.results import RunResult
from pipeline.testing.fault_proxy import FaultPlan, FaultProxy, Hold

# Ray ships psutil in ray/thirdparty_files, which `import ray` puts on sys.path.
psutil = importlib.import_module("psutil")

HELD_KEY = r"/raw/web/part-0000\.jsonl$"  # the largest input object: a unit of its own
# The held GET waits for the kill: its hold ends when the killed worker's connection closes
# (the proxy then forwards nothing). The hold's own limit and the client's read timeout are far
# beyond any machine's speed, so neither can end the hold first; the deadline only stops a hang.
DEADLINE_SECONDS = 600.0
HOLD_SECONDS = DEADLINE_SECONDS
READ_TIMEOUT = f"storage.read_timeout={2 * DEADLINE_SECONDS:g}"


def shards(version: Location) -> dict[str, bytes]:
    return {n: (version / n).read_bytes() for n in version.ls_names() if n.startswith("shard")}


def title(process) -> str:
    """A Ray worker's process title, e.g. 'ray::read_unit' while it runs that task."""
    return " ".join(process.cmdline()).strip()


def ray_worker_with_socket(address: tuple[str, int]):
    """The Ray worker process that has a TCP socket bound at `address`, or None."""
    for process in psutil.process_iter():
        try:
            if not title(process).startswith("ray::"):
                continue
            if any(c.laddr[:2] == address for c in process.net_connections(kind="tcp")):
                return process
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return None


def kill_the_held_worker(proxy: FaultProxy, run: Future):
    """SIGKILL the worker whose GET the proxy holds, as soon as there is one; return it."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        if run.done():
            run.result()  # raises the run's own error, if it had one
            pytest.fail("the run finished before any task reached the held GET")
        assert time.monotonic() < deadline, f"no held request after {DEADLINE_SECONDS} s"
        for client in list(proxy.holding):
            worker = ray_worker_with_socket(client)
            if worker is not None:
                name = title(worker)
                assert name.startswith("ray::read_unit"), f"the held GET came from {name!r}"
                worker.send_signal(signal.SIGKILL)
                return worker
        time.sleep(0.05)


def wait_gone(process) -> None:
    """Wait until the killed worker no longer exists (reaped by its raylet, pid-reuse safe)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while process.is_running():
        assert time.monotonic() < deadline, f"pid {process.pid} still exists after SIGKILL"
        time.sleep(0.05)


def test_worker_killed_mid_unit_then_commit_is_byte_identical(
    ray_local, s3_server, s3_sample_run, s3_storage, capsys
):
    reference, s3_bucket = s3_sample_run, s3_sample_run.bucket
    reference_seconds = reference.seconds

    plan = FaultPlan(holds=(Hold(HELD_KEY, HOLD_SECONDS),))
    with FaultProxy(s3_server, plan) as proxy, ThreadPoolExecutor(1) as pool:
        cfg = s3_config(s3_bucket, proxy.endpoint, "crash", READ_TIMEOUT)
        started = time.perf_counter()
        run = pool.submit(run_pipeline, cfg, show_progress=False)
        victim = kill_the_held_worker(proxy, run)
        killed_at = time.perf_counter() - started
        try:
            result: RunResult = run.result(timeout=DEADLINE_SECONDS)
            how = "Ray retried the task"
        except ray.exceptions.RayError as e:  # retries exhausted: the run failed, run it again
            how = f"the run failed ({type(e).__name__}), the rerun resumed"
            result = run_pipeline(cfg, show_progress=False)
        crash_seconds = time.perf_counter() - started
        counts = proxy.snapshot()
    with capsys.disabled():
        print(
            f"\nreference {reference_seconds:.1f} s; killed pid {victim.pid} at {killed_at:.1f} s;"
            f" {how}; committed at {crash_seconds:.1f} s; proxy {counts}"
        )

    wait_gone(victim)
    assert counts["held"] == 1
    version = Location.from_uri(result.version.uri, s3_storage)  # read back without the proxy
    verify_version(version)
    assert shards(version) == shards(reference.version)
    assert comparable(result.manifest) == comparable(reference.manifest)

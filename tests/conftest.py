"""Shared fixtures: a real S3 endpoint (SeaweedFS's `weed server` in a subprocess, on loopback),
a local Ray and two sample runs, each started once per session and shared; and the markers
(pyproject.toml) that follow from them."""

from __future__ import annotations

import atexit
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray
import s3fs
from support import SAMPLE, SOURCES_CONFIG, s3_config

from pipeline.config.loader import load_config
from pipeline.config.sections import StorageConfig
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.run.driver import run_pipeline
from pipeline.run.ray_env import shutdown_ray
from pipeline.run.results import RunResult
from pipeline.testing.s3 import dummy_aws_env, seaweedfs_server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Endpoint URL of a SeaweedFS S3 server started once per session and stopped by its pid."""
    with dummy_aws_env(), seaweedfs_server() as endpoint:
        yield endpoint
    # Cached s3fs instances hold connections to the server that is now gone.
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_storage(s3_server: str) -> StorageConfig:
    return StorageConfig(endpoint_url=s3_server)


@pytest.fixture
def s3_bucket(s3_storage: StorageConfig) -> str:
    """A fresh, empty bucket for one test (unique names, so no reset between tests)."""
    name = f"test-{uuid.uuid4().hex[:16]}"
    fs = Location.from_uri(f"s3://{name}", s3_storage).fs
    fs.mkdir(name)
    fs.invalidate_cache()
    return name


@pytest.fixture
def s3_upload(s3_bucket: str, s3_storage: StorageConfig) -> Callable[[dict[str, bytes]], Location]:
    """put(files) writes {relative path: content} into the test's bucket and returns its root.

    The listing cache is dropped afterwards, so a later find() sees the objects just written."""

    def put(files: dict[str, bytes]) -> Location:
        root = Location.from_uri(f"s3://{s3_bucket}", s3_storage)
        root.fs.pipe({f"{s3_bucket}/{rel}": data for rel, data in files.items()})
        root.fs.invalidate_cache()
        return root

    return put


@pytest.fixture(scope="session")
def _shared_ray(s3_server) -> Iterator[dict[str, str | None]]:
    """The node id of the shared local Ray (None until one is started); that Ray, if still
    running, is shut down at the end of the session."""
    started: dict[str, str | None] = {"node": None}
    yield started
    if _running_node() == started["node"] is not None:
        shutdown_ray()


def _running_node() -> str | None:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


@pytest.fixture(scope="module")
def ray_local(_shared_ray):
    """A local Ray shared by the modules that ask for it: started once per session (after the
    S3 fixture, so that its workers inherit the dummy AWS environment), and started again only
    where a Ray of another origin is running or none is (a test with its own Ray, `own_ray`,
    shut it down); address="local" never joins another process's cluster."""
    _start_shared_ray(_shared_ray)
    yield


def _start_shared_ray(started: dict[str, str | None]) -> None:
    if _running_node() is None or _running_node() != started["node"]:
        shutdown_ray()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        started["node"] = _running_node()


@pytest.fixture(scope="session")
def _session_runs() -> dict[str, RunResult]:
    """The shared runs that completed. A run that failed is tried again by the next module that
    asks for it (a failed session-scoped fixture would fail every later test that uses it)."""
    return {}


@pytest.fixture(scope="module")
def sources_sample_run(_shared_ray, _session_runs, tmp_path_factory) -> RunResult:
    """configs/sample.yaml (two named sources, a 5 % validation split) run once per session on
    the shared Ray; its config as `.cfg`, its layout as `.layout`. Read-only: a test that
    changes it works on a copy."""
    if "sources" in _session_runs:
        return _session_runs["sources"]
    _start_shared_ray(_shared_ray)
    out = tmp_path_factory.mktemp("sources-sample") / "out"
    cfg = load_config(SOURCES_CONFIG, output_uri=str(out))
    result = run_pipeline(cfg, show_progress=False)
    result.cfg = cfg
    result.layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    _session_runs["sources"] = result
    return result


@pytest.fixture(scope="module")
def s3_sample_run(_shared_ray, _session_runs, s3_server) -> RunResult:
    """The shipped sample put under raw/ of a bucket of its own, and configs/single-sample.yaml
    run once per session from there into out-prefix `ref`; `.bucket` names the bucket,
    `.seconds` the run's wall time. Read-only: a test writes its own runs under other prefixes."""
    if "s3" in _session_runs:
        return _session_runs["s3"]
    _start_shared_ray(_shared_ray)
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    fs = Location.from_uri(f"s3://{bucket}", StorageConfig(endpoint_url=s3_server)).fs
    fs.mkdir(bucket)
    fs.put(str(SAMPLE) + "/", f"{bucket}/raw/", recursive=True)
    fs.invalidate_cache()
    started = time.perf_counter()
    result = run_pipeline(s3_config(bucket, s3_server, "ref"), show_progress=False)
    result.seconds = time.perf_counter() - started
    result.bucket = bucket
    _session_runs["s3"] = result
    return result


@pytest.fixture
def own_ray() -> None:
    """For a test that starts a Ray of its own in this process: the shared one is stopped first
    (ray.init refuses a second), and ray_local starts it again where a later module needs it."""
    shutdown_ray()


# A test using one of these fixtures needs the S3 server: marked `s3`.
S3_FIXTURES = {"s3_server", "s3_storage", "s3_bucket", "s3_upload"}
# A test using one of these starts Ray: marked `slow` (test modules that run the pipeline as a
# command, or start a cluster, say so themselves with `pytestmark`).
RAY_FIXTURES = {"ray_local", "ray_fault", "own_ray", "sources_sample_run", "s3_sample_run"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    _mark(items)
    _longest_first(items)


def _mark(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        servers = used & (S3_FIXTURES | RAY_FIXTURES)
        if item.path.parent.name == "unit" and servers:
            # tests/unit/ means no subprocess, no server, no Ray: such a test is integration's
            raise pytest.UsageError(
                f"{item.nodeid} uses {sorted(servers)}: it is an integration test"
            )
        if used & S3_FIXTURES:
            item.add_marker(pytest.mark.s3)
        if used & RAY_FIXTURES or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.slow)


def _longest_first(items: list[pytest.Item]) -> None:
    """The cluster modules first, then the others by their number of Ray tests, most first:
    pytest-xdist (`-n`, `--dist loadscope`) hands out modules in this order, so the long ones
    overlap with the many short ones instead of ending the run alone."""
    ray_tests: dict[str, int] = {}
    for item in items:
        scope = _scope(item.nodeid)
        marks = {mark.name for mark in item.iter_markers()}
        weight = 10_000 if "cluster" in marks else 1 if "slow" in marks else 0
        ray_tests[scope] = ray_tests.get(scope, 0) + weight
    items.sort(key=lambda item: -ray_tests[_scope(item.nodeid)])


def _scope(nodeid: str) -> str:
    """What one xdist worker runs together: a module, except that the cluster modules (each
    starts Ray nodes of its own and runs for minutes) share one worker, one after the other."""
    module = nodeid.split("::")[0]
    return "cluster" if Path(module).name.startswith("test_cluster") else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndTheClusterTests(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ModulesAndTheClusterTests(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A cluster test starts Ray nodes of its own, whose dashboard agents need the port that a
    running local Ray's agent holds (52365: jobs are submitted through it): the shared Ray is
    stopped first, and ray_local starts it again where a later module needs it."""
    if item.get_closest_marker("cluster"):
        shutdown_ray()


_SESSION = pytest.StashKey[pytest.Session]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SESSION] = session


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process once every report is written, before the native libraries' own
    teardown. Full runs of this suite (Ray's gRPC threads, Arrow's and fastokens' thread pools
    and torch all loaded in one process) died with SIGSEGV after "614 passed" in 2 of 4 tries,
    CI's once: after Python's faulthandler had been switched off, so in the C-level exit, while
    those libraries' threads were still running. Python's own exit handlers still run here; only
    the C teardown is skipped. PIPELINE_TESTS_NATIVE_EXIT=1 keeps the normal exit, to look at it.
    """
    session = config.stash.get(_SESSION, None)
    if session is None or os.environ.get("PIPELINE_TESTS_NATIVE_EXIT") == "1":
        return
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(session.exitstatus))

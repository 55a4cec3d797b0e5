"""Shared fixtures: a real S3 endpoint (SeaweedFS's `weed server` in a subprocess, on loopback)
and a local Ray; and the markers (pyproject.toml) that follow from them."""

from __future__ import annotations

import atexit
import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
import ray
import s3fs

from pipeline.config_sections import StorageConfig
from pipeline.core.storage import Location
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


@pytest.fixture(scope="module")
def ray_local(s3_server):
    """A local Ray per test module, started after the S3 fixture so that its workers inherit
    the dummy AWS environment; address="local" never joins another process's cluster."""
    ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


# A test using one of these fixtures needs the S3 server: marked `s3`.
S3_FIXTURES = {"s3_server", "s3_storage", "s3_bucket", "s3_upload"}
# A test using one of these starts Ray: marked `slow` (test modules that run the pipeline as a
# command, or start a cluster, say so themselves with `pytestmark`).
RAY_FIXTURES = {"ray_local", "ray_fault"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
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

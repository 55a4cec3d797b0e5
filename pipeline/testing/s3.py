"""Real S3 endpoints on loopback for tests and benchmarks.

`seaweedfs_server` (pipeline.testing.seaweedfs): a production object store, started as a
subprocess and stopped by its pid. `moto_server` (moto, a Python imitation of S3) only where a
test needs what SeaweedFS lacks (storage classes, lifecycle transitions).
Dummy credentials keep botocore from looking for real ones.
`recorded_requests` puts the project's own proxy in front of a server and records every request
that crosses it (what a test counts is what crossed the wire, not a server's internals).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from pipeline.testing.fault_proxy import FaultPlan, FaultProxy
from pipeline.testing.seaweedfs import seaweedfs_server, stop_process

__all__ = ["seaweedfs_server"]

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dummy_aws_env() -> Iterator[None]:
    """Set dummy AWS credentials in this process's environment; restore the old values after."""
    saved = {key: os.environ.get(key) for key in DUMMY_AWS_ENV}
    os.environ.update(DUMMY_AWS_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def moto_server(startup_timeout: float = 60.0) -> Iterator[str]:
    """Start ``python -m moto.server`` on a free loopback port; yield its endpoint URL.

    Only for what SeaweedFS refuses: storage classes (a CopyObject onto itself with a new
    StorageClass is InvalidRequest) and lifecycle rules with Transitions (NotImplemented)."""
    if importlib.util.find_spec("moto") is None:  # moto is in the test extra only
        raise SystemExit(
            "this needs moto, which `pip install -e .` does not install:"
            " run `pip install -e '.[test]'` first"
        )
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, **DUMMY_AWS_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_up(endpoint, proc, startup_timeout)
        yield endpoint
    finally:
        stop_process(proc, grace=10)


def _wait_until_up(endpoint: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with code {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise TimeoutError(f"moto server at {endpoint} did not answer within {timeout} s")


@contextlib.contextmanager
def recorded_requests(upstream: str) -> Iterator[FaultProxy]:
    """A proxy in front of `upstream` that records every request sent through it.

    Point the client at `proxy.endpoint`; `proxy.requests` holds (method, target) of each
    request, target being the path and query as sent (e.g. `/bucket?delete`)."""
    with FaultProxy(upstream, FaultPlan()) as proxy:
        yield proxy

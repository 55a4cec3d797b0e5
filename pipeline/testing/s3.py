"""Real S3 endpoints on loopback for tests and benchmarks.

`seaweedfs_server` (pipeline.testing.seaweedfs): a production object store, started as a
subprocess and stopped by its pid. Dummy credentials keep botocore from looking for real ones.
`recorded_requests` puts the project's own proxy in front of a server and records every request
that crosses it (what a test counts is what crossed the wire, not a server's internals).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

from pipeline.testing.fault_proxy import FaultPlan, FaultProxy
from pipeline.testing.seaweedfs import seaweedfs_server

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
def recorded_requests(upstream: str) -> Iterator[FaultProxy]:
    """A proxy in front of `upstream` that records every request sent through it.

    Point the client at `proxy.endpoint`; `proxy.requests` holds (method, target) of each
    request, target being the path and query as sent (e.g. `/bucket?delete`)."""
    with FaultProxy(upstream, FaultPlan()) as proxy:
        yield proxy

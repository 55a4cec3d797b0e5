"""A real S3 endpoint on loopback for tests and benchmarks: moto's standalone server.

moto runs as a subprocess (as in s3fs's own test suite), so its requests go through a real HTTP
stack and it is stopped by its pid. Dummy credentials keep botocore from looking for real ones.
moto's recorder (``/moto-api/recorder/*``) lets a test see which requests the server received.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

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
    """Start ``python -m moto.server`` on a free loopback port; yield its endpoint URL."""
    if importlib.util.find_spec("moto") is None:  # moto is in the test extra only
        raise SystemExit(
            "this needs the local S3 test server (moto), which `pip install -e .` does not"
            " install: run `pip install -e '.[test]'` first"
        )
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="moto-") as tmp:
        env = {
            **os.environ,
            **DUMMY_AWS_ENV,
            "MOTO_RECORDER_FILEPATH": os.path.join(tmp, "recording.jsonl"),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_until_up(endpoint, proc, startup_timeout)
            yield endpoint
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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


def _moto_api(endpoint: str, action: str) -> bytes:
    method = "GET" if action == "download-recording" else "POST"
    request = urllib.request.Request(f"{endpoint}/moto-api/recorder/{action}", method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


@contextlib.contextmanager
def recorded_requests(endpoint: str) -> Iterator[list[tuple[str, str]]]:
    """Collect (method, url) of every request the moto server receives inside the block.

    The list is filled when the block exits (the server's own record, independent of the client).
    """
    requests: list[tuple[str, str]] = []
    _moto_api(endpoint, "reset-recording")
    _moto_api(endpoint, "start-recording")
    try:
        yield requests
    finally:
        _moto_api(endpoint, "stop-recording")
        for line in _moto_api(endpoint, "download-recording").decode().splitlines():
            if line.strip():
                entry = json.loads(line)
                requests.append((entry["method"], entry["url"]))

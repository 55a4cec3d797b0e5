"""The cluster helpers (a real Ray head, stopped by its pid) and a job's log stream cut mid-job.
A job run, verified and leaving nothing behind: test_cluster_readme.py (the documented
commands); nodes that share nothing but S3: test_cluster_share_nothing.py.

The tests start Ray processes of their own and stop them by pid (never `ray stop`, which would
stop every Ray on the machine, other users' included). Ray's temp dir (sessions, sockets and the
"current cluster" address file that a bare `ray.init()` reads) is private to each test through
RAY_TMPDIR, so no other Ray on the machine can be joined by mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient
from support import REPO

from pipeline.testing.s3 import free_port

pytestmark = pytest.mark.cluster  # a Ray cluster of its own (`ray start`): slow too (conftest.py)
VENV_BIN = Path(sys.executable).parent
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


@pytest.fixture
def ray_tmpdir() -> Iterator[str]:
    # Short, under /tmp: Ray's Unix socket paths must stay under ~107 characters.
    path = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def live_processes(marker: str | None = None, session: int | None = None) -> list[str]:
    """Running (not zombie) processes whose command line names `marker` or whose session id is
    `session`: what a stopped Ray must not leave behind. Read-only: it signals nothing."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, sid = fields[0], int(fields[3])
        if state != "Z" and ((marker is not None and marker in cmd) or sid == session):
            found.append(f"{pid} {cmd[:160]}")
    return found


def ray_env(tmpdir: str) -> dict[str, str]:
    env = {
        **os.environ,
        "RAY_TMPDIR": tmpdir,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        # A loopback test cluster: no token (a real cluster keeps Ray's token auth, jobs/README)
        "RAY_AUTH_MODE": "disabled",
        # The job's `python` is the cluster's python: this venv's.
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("RAY_ADDRESS", None)
    return env


@contextlib.contextmanager
def ray_head(tmpdir: str, num_cpus: int = 2) -> Iterator[tuple[str, dict, subprocess.Popen]]:
    """`ray start --head --block` in a session of its own; yields (dashboard URL, env, process).

    Every port is a free one (two Ray heads on one machine collide on the fixed defaults). On exit
    the head gets SIGTERM (with --block it stops all its processes), then its process group gets
    SIGKILL if anything of it is still running."""
    env = ray_env(tmpdir)
    dashboard = free_port()
    ports = {
        "port": free_port(),
        "dashboard-port": dashboard,
        "ray-client-server-port": free_port(),
        "dashboard-agent-listen-port": free_port(),
        "dashboard-agent-grpc-port": free_port(),
        "runtime-env-agent-port": free_port(),
        "metrics-export-port": free_port(),
    }
    log = open(os.path.join(tmpdir, "head.log"), "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "ray"),
            "start",
            "--head",
            "--block",
            f"--num-cpus={num_cpus}",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--temp-dir={tmpdir}",
            "--disable-usage-stats",
            *(f"--{name}={port}" for name, port in ports.items()),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_for_dashboard(url, proc, tmpdir, timeout=90)
        yield url, env, proc
    finally:
        _stop_head(proc)
        log.close()


def _wait_for_dashboard(url: str, proc: subprocess.Popen, tmpdir: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = Path(tmpdir, "head.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers (an auth error is an answer)
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise TimeoutError(f"the Ray dashboard at {url} did not answer within {timeout} s")


def _stop_head(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while live_processes(session=proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if live_processes(session=proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group we started, by its id
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _uploaded_copies(tmpdir: str, name: str) -> list[Path]:
    return list(Path(tmpdir).glob(f"session_*/runtime_resources/working_dir_files/*/{name}"))


class _Cut(Exception):
    """The relay cut a log stream on purpose."""


class DroppingRelay:
    """A TCP relay to the Ray dashboard that cuts the first `drops` log-tail WebSockets once
    they have relayed the job's line `line N` (N from `at_lines`, one per drop), as a flaky
    network or a restarted proxy does: the client sees the abnormal closure (1006) of
    ray-project/ray#57002 while the job goes on. The cut follows what the stream carried, not a
    time, so it lands mid-job however fast the job or the client runs (a stream reopened after
    the job has printed the line carries it again, and is cut again)."""

    def __init__(self, upstream_port: int, at_lines: tuple[int, ...] = (5, 15)) -> None:
        self.upstream_port, self.at_lines = upstream_port, at_lines
        self.arm(drops=2)

    def arm(self, drops: int) -> None:
        """Cut the next `drops` log-tail streams; `dropped` counts the cuts made."""
        self.drops, self.armed, self.dropped = drops, 0, 0

    def __enter__(self) -> DroppingRelay:
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        assert started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        started.set()
        self._loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        first = await reader.read(65536)
        up_writer.write(first)
        cut_at = None
        if b"/logs/tail" in first.split(b"\r\n", 1)[0] and self.armed < self.drops:
            cut_at = f"line {self.at_lines[self.armed]}\n".encode()
            self.armed += 1
        pipes = [
            asyncio.ensure_future(self._pipe(reader, up_writer)),
            asyncio.ensure_future(self._pipe(up_reader, writer, cut_at)),
        ]
        try:
            await asyncio.gather(*pipes)
        except _Cut:
            self.dropped += 1
        except Exception:  # noqa: BLE001 - either side closing abruptly ends the relay
            pass
        for pipe in pipes:
            pipe.cancel()
        for w in (writer, up_writer):
            w.transport.abort()  # no WebSocket close frame: an abnormal closure

    @staticmethod
    async def _pipe(
        src: asyncio.StreamReader, dst: asyncio.StreamWriter, cut_at: bytes | None = None
    ) -> None:
        """Copy src to dst; with `cut_at`, stop (raise) once those bytes have passed (a
        WebSocket's text frames are not compressed by Ray's client: the bytes are the log's)."""
        tail = b""
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
            if cut_at is not None:
                if cut_at in tail + data:
                    raise _Cut(cut_at)
                tail = (tail + data)[-len(cut_at) :]
        dst.write_eof()


SLOW_JOB = "import time; [(print('line', i, flush=True), time.sleep(0.25)) for i in range(30)]"


def test_submit_survives_a_dropped_log_stream_and_exits_with_the_jobs_code(ray_tmpdir):
    submit = [sys.executable, str(REPO / "jobs/submit.py"), "--address"]
    with (
        ray_head(ray_tmpdir) as (url, env, head),
        DroppingRelay(int(url.rsplit(":", 1)[1])) as relay,
    ):
        client = JobSubmissionClient(url)
        # `ray job submit` through the same network: the job succeeds, the CLI fails.
        relay.arm(drops=1)
        cli = subprocess.run(
            [str(VENV_BIN / "ray"), "job", "submit", "--address", relay.url, "--"]
            + ["python", "-c", SLOW_JOB],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert relay.dropped == 1
        print(f"ray job submit: exit {cli.returncode}: {cli.stderr.strip().splitlines()[-1:]}")
        assert cli.returncode != 0 and "1006" in cli.stdout + cli.stderr
        (job,) = client.list_jobs()
        while client.get_job_status(job.submission_id) not in TERMINAL:
            time.sleep(0.5)
        assert client.get_job_status(job.submission_id) == JobStatus.SUCCEEDED

        # jobs/submit.py: the stream dropped twice, every line printed once, the job's exit code.
        relay.arm(drops=2)
        ok = subprocess.run(
            [*submit, relay.url, "--", "python", "-c", SLOW_JOB],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        print(ok.stderr)
        assert relay.dropped == 2 and ok.stderr.count("log stream dropped") == 2
        assert ok.returncode == 0, ok.stdout + ok.stderr
        printed = [line for line in ok.stdout.splitlines() if line.startswith("line ")]
        assert printed == [f"line {i}" for i in range(30)], ok.stdout  # each once, in order
        failed = subprocess.run(
            [*submit, relay.url, "--", "python", "-c", "import sys; print('bye'); sys.exit(7)"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert failed.returncode == 7 and "bye" in failed.stdout, failed.stderr
        assert "failed; exit 7" in failed.stderr
    assert live_processes(ray_tmpdir, session=head.pid) == []

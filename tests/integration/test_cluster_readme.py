"""The cluster commands (docs/cluster.md), run as written against a real head and S3 server.

The commands are read from docs/cluster.md's ```sh block, and only the head's address (HEAD and its
two ports) and ENDPOINT (the SeaweedFS S3 server) are filled in. The head is started the documented
way, so Ray's default token authentication is on; its token lands in a private HOME
(~/.ray/auth_token of this test only). To share the machine with other Ray clusters, the head
command gets flags the document leaves to their defaults: free ports for every other Ray port, a
private temp dir, --block (so that it is stopped by its pid, never `ray stop`), 127.0.0.1,
two CPUs. Takes ~1-2 minutes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap
import time

import pyarrow.parquet as pq
import pytest
from test_cluster import (  # the cluster helpers: private Ray temp dir, stop by pid
    REPO,
    _stop_head,
    _uploaded_copies,
    _wait_for_dashboard,
    live_processes,
    ray_env,
    ray_tmpdir,  # noqa: F401 - a fixture
)

from pipeline.config.sections import StorageConfig
from pipeline.core.storage import Location
from pipeline.testing.s3 import free_port, recorded_requests

pytestmark = pytest.mark.cluster  # runs the README's cluster commands: slow too (conftest.py)
WRITES = {"PUT", "POST", "DELETE"}


def readme_cluster_block(language: str) -> str:
    """The first ```language block of docs/cluster.md (the README's cluster link), dedented."""
    section = (REPO / "docs" / "cluster.md").read_text()
    block = re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)
    return textwrap.dedent(block)


def readme_cluster_commands() -> list[str]:
    """The command lines of docs/cluster.md, in order."""
    return [line for line in readme_cluster_block("sh").splitlines() if line.strip()]


def fill_in(line: str, head: str, ports: dict[str, int], endpoint: str) -> str:
    line = line.replace("HEAD", head).replace("ENDPOINT", endpoint)
    return line.replace("6379", str(ports["gcs"])).replace("8265", str(ports["dashboard"]))


def bucket_state(storage: StorageConfig, bucket: str) -> dict[str, tuple[int, str]]:
    fs = Location.from_uri(f"s3://{bucket}", storage).fs
    fs.invalidate_cache()
    return {k: (v["size"], v.get("ETag", "")) for k, v in fs.find(bucket, detail=True).items()}


def test_readme_cluster_commands_run_as_written(s3_server, ray_tmpdir, tmp_path):  # noqa: F811
    storage = StorageConfig(endpoint_url=s3_server)
    fs = Location.from_uri("s3://raw-bucket", storage).fs
    for bucket in ("raw-bucket", "datasets-bucket"):
        if not fs.exists(bucket):
            fs.mkdir(bucket)
    # The whole sample folder, its README.md included: configs/s3.yaml must not read it.
    fs.put(str(REPO / "sample") + "/", "raw-bucket/corpus/", recursive=True)
    fs.invalidate_cache()

    ports = {"gcs": free_port(), "dashboard": free_port()}
    dashboard = f"http://127.0.0.1:{ports['dashboard']}"
    cmds = [fill_in(line, "127.0.0.1", ports, s3_server) for line in readme_cluster_commands()]
    exports = [c for c in cmds if c.startswith("export ")]
    (start,) = [c for c in cmds if c.startswith("ray start --head")]
    steps = [c for c in cmds if c not in exports and c != start]
    assert "--runtime-env jobs/runtime_env.yaml" in steps[0] and len(steps) == 4

    home = tmp_path / "home"
    home.mkdir()
    env = {**ray_env(ray_tmpdir), "HOME": str(home)}
    env.pop("RAY_AUTH_MODE")  # Ray's default: the documented way
    extra = [
        "--block",
        "--num-cpus=2",
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={ray_tmpdir}",
        "--disable-usage-stats",
        *(
            f"--{name}={free_port()}"
            for name in (
                "ray-client-server-port",
                "dashboard-agent-listen-port",
                "dashboard-agent-grpc-port",
                "runtime-env-agent-port",
                "metrics-export-port",
            )
        ),
    ]
    log = open(os.path.join(ray_tmpdir, "head.log"), "wb")  # noqa: SIM115 - closed below
    head = subprocess.Popen(  # bash exec's the head: its pid is the head's
        ["bash", "-c", "\n".join([*exports, f"exec {start} {shlex.join(extra)}"])],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def sh(command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        script = "\n".join([*exports, command])
        return subprocess.run(
            ["bash", "-c", script],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    try:
        _wait_for_dashboard(f"http://127.0.0.1:{ports['dashboard']}", head, ray_tmpdir, 90)
        assert (home / ".ray" / "auth_token").exists()  # the document's first line made it
        # The head requires the token: without the documented exports the submission is refused.
        denied = subprocess.run(
            ["bash", "-c", steps[0]], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
        )
        print(f"$ {steps[0]}  # without the exports\n{denied.stderr.strip().splitlines()[-1]}")
        assert denied.returncode != 0
        assert "authentication" in (denied.stdout + denied.stderr).lower()

        results = {}
        for command, name in zip(steps, ("run", "verify", "retain", "report"), strict=True):
            started = time.monotonic()
            results[name] = sh(command)
            out = results[name].stdout + results[name].stderr
            seconds = time.monotonic() - started
            print(f"$ {command}\n{results[name].stdout[-6000:]}\n(exit {results[name].returncode},"
                  f" {seconds:.1f} s)")
            assert results[name].returncode == 0, out[-4000:]
        run_out = results["run"].stdout + results["run"].stderr
        assert "succeeded" in run_out and "1 nodes, 2 CPUs" in run_out
        # the job's driver ran from the uploaded working dir, not from this checkout
        assert _uploaded_copies(ray_tmpdir, "jobs/run.py")
        assert "Failed to merge" not in run_out
        assert "verify OK: corpus" in results["verify"].stdout
        assert "retention" in results["retain"].stdout.lower()
        assert "$" in results["report"].stdout

        # The document's StreamReader example, with its endpoint filled in, reads the version.
        example = readme_cluster_block("python").replace("http://10.0.0.5:9000", s3_server)
        assert s3_server in example
        namespace: dict = {}
        exec(compile(example, "docs/cluster.md", "exec"), namespace)
        assert namespace["reader"].manifest["name"] == "corpus"
        assert len(namespace["window"]) == 2049 and namespace["reader"].remaining() == 0

        # configs/s3.yaml lists the sample's README.md as excluded instead of reading it
        work = Location.from_uri("s3://datasets-bucket/tokenized/corpus/_work/runs", storage)
        (skipped_file,) = work.fs.glob(f"{work.path}/*/skipped.parquet")
        with work.fs.open(skipped_file) as f:
            skipped = {r["path"]: r["reason"] for r in pq.read_table(f).to_pylist()}
        assert skipped.get("README.md") == "excluded", skipped

        # Air-gapped form: the same submission with the image's runtime env; a committed run
        # writes nothing (every request the job sends crosses the recording proxy: none writes).
        before = bucket_state(storage, "datasets-bucket")
        image = steps[0].replace("jobs/runtime_env.yaml", "jobs/runtime_env.image.yaml")
        with recorded_requests(s3_server) as proxy:
            again = sh(image.replace(s3_server, proxy.endpoint))
        requests = proxy.requests
        assert requests, "the job sent nothing through the proxy: the check would be vacuous"
        out = again.stdout + again.stderr
        print(f"$ {image}\n{again.stdout[-2000:]}\n(exit {again.returncode})")
        assert again.returncode == 0, out[-4000:]
        assert "succeeded" in out
        writes = [(m, u) for m, u in requests if m in WRITES and "datasets-bucket" in u]
        assert writes == []
        assert bucket_state(storage, "datasets-bucket") == before

        # Success is each job's status, read through Ray's SDK (with the documented token).
        statuses = sh(
            "python -c 'from ray.job_submission import JobSubmissionClient as C;"
            f" print(*sorted(j.status.value for j in C(\"{dashboard}\").list_jobs()))'"
        )
        assert statuses.stdout.split() == ["SUCCEEDED"] * 4, statuses.stdout + statuses.stderr
    finally:
        _stop_head(head)
        log.close()
    assert live_processes(ray_tmpdir, session=head.pid) == []

"""How commands find their storage, and what they say when it is not there.

- A job's runtime env (the shipped jobs/runtime_env*.yaml) merges with the run's worker env by
  Ray's own merge rule, which refuses a key set in both.
- Every storage command takes the endpoint the same way (--config + --set, --endpoint-url).
- A stopped endpoint fails each of them at once (the reach check, before any request: nothing
  retried), one line naming the endpoint and the object, exit 5 (not 1, "verify found a
  mismatch").
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml
from ray.runtime_env import RuntimeEnv
from ray.runtime_env.runtime_env import _merge_runtime_env
from support import REPO

from pipeline.cli import main as cli
from pipeline.config.sections import StorageConfig
from pipeline.core.io_counters import IO
from pipeline.core.storage import Location
from pipeline.core.storage_errors import StorageUnreachable
from pipeline.run.ray_env import WORKER_ENV, worker_runtime_env
from pipeline.stream.reader import StreamReader
from pipeline.testing.s3 import seaweedfs_server

S3_CONFIG = str(REPO / "configs" / "s3.yaml")


def no_request_sent(before: dict[str, int]) -> bool:
    """No S3 request was sent (or retried, each attempt counts) in this process since `before`:
    how "fails fast" is checked, whatever the machine's speed."""
    sent = IO.delta(IO.snapshot(), before)
    return not any(v for k, v in sent.items() if k.endswith("_requests"))


@pytest.mark.slow  # runs the pipeline
@pytest.mark.parametrize("name", ["runtime_env.yaml", "runtime_env.image.yaml"])
def test_shipped_job_runtime_env_merges_with_the_worker_env(name, monkeypatch):
    job_env = yaml.safe_load((REPO / "jobs" / name).read_text())
    parsed = RuntimeEnv(**job_env)  # Ray's own validation of the file
    assert ("pip" in parsed) == (name == "runtime_env.yaml")
    # What Ray hands a job's driver (ray.init merges the job's runtime env with its own).
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": job_env}))
    merged = _merge_runtime_env(job_env, worker_runtime_env())
    assert merged is not None, "Ray would refuse the job: a key set by both"
    assert {k: merged["env_vars"][k] for k in WORKER_ENV} == WORKER_ENV
    # The whole WORKER_ENV, as ray.init used to pass it, is what Ray refuses.
    assert _merge_runtime_env(job_env, {"env_vars": WORKER_ENV}) is None


def test_worker_env_outside_a_job_and_when_the_job_sets_every_key(monkeypatch):
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    assert worker_runtime_env() == {"env_vars": WORKER_ENV}
    job = {"runtime_env": {"env_vars": {**WORKER_ENV, "RAYON_NUM_THREADS": "2"}}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    assert worker_runtime_env() is None  # the job's own values win


@pytest.fixture(scope="module")
def stopped_endpoint() -> str:
    """The URL of an S3 server that was started and then stopped."""
    with seaweedfs_server() as endpoint:
        pass
    return endpoint


def test_verify_against_a_stopped_endpoint_is_one_line_and_exit_5(stopped_endpoint):
    uri = "s3://datasets-bucket/tokenized/corpus"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", uri, "--endpoint-url", stopped_endpoint],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    print(f"{elapsed:.2f} s, exit {done.returncode}: {done.stderr.strip()}")
    assert done.returncode == 5 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert stopped_endpoint in line and uri in line and "unreachable" in line
    assert "cannot connect to" in line  # the reach check's answer: before any request or retry


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--config", S3_CONFIG, "--quiet"],
        ["retain", "--config", S3_CONFIG],
        ["report", "--config", S3_CONFIG],
        ["verify", "s3://datasets-bucket/tokenized/corpus", "--config", S3_CONFIG],
        ["plan", "--probe", "s3://datasets-bucket/tokenized/corpus"],
    ],
    ids=lambda argv: argv[0],
)
@pytest.mark.parametrize("how", ["--set", "--endpoint-url"])
def test_every_storage_command_takes_the_endpoint_and_fails_fast(
    argv, how, stopped_endpoint, capsys
):
    endpoint = (
        ["--set", f"storage.endpoint_url={stopped_endpoint}"]
        if how == "--set"
        else ["--endpoint-url", stopped_endpoint]
    )
    before = IO.snapshot()
    assert cli.main([*argv, *endpoint]) == StorageUnreachable.exit_code
    assert no_request_sent(before)  # failed fast: no request, so no retry and no backoff
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: storage unreachable: cannot connect to")
    assert stopped_endpoint in line
    assert "s3://" in line


def test_stream_reader_against_a_stopped_endpoint(stopped_endpoint):
    before = IO.snapshot()
    with pytest.raises(StorageUnreachable, match=stopped_endpoint):
        StreamReader(
            "s3://datasets-bucket/tokenized/corpus",
            seq_len=8,
            storage=StorageConfig(endpoint_url=stopped_endpoint),
        )
    assert no_request_sent(before)


def test_verify_takes_storage_from_config_and_set(s3_bucket, s3_storage, capsys):
    # A live endpoint and no version there: "found no committed version" is exit 1 (a verify
    # failure), which shows the endpoint came from the options (AWS is not reachable here).
    uri = f"s3://{s3_bucket}/nothing"
    endpoint = s3_storage.endpoint_url
    for options in (
        ["--config", S3_CONFIG, "--set", f"storage.endpoint_url={endpoint}"],
        ["--set", f"storage.endpoint_url={endpoint}"],
        ["--endpoint-url", endpoint],
    ):
        assert cli.main(["verify", uri, *options]) == 1, options
        assert "verify FAILED" in capsys.readouterr().err
    # without a config only storage.* keys make sense
    assert cli.main(["verify", uri, "--set", "pack.seed=1"]) == 2


def test_reachable_endpoint_is_checked_once_per_process(s3_storage):
    from pipeline.core.reachability import _REACHABLE, check_reachable

    loc = Location.from_uri("s3://any-bucket/x", s3_storage)
    check_reachable(loc)
    assert any(str(port) in s3_storage.endpoint_url for _, port in _REACHABLE)

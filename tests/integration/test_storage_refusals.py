"""Found item 6: the store refusing (no credentials, access denied, a missing bucket) is one
line naming the URI and the cause, exit 6, on every command; never a traceback. Against real
S3 servers on loopback (moto; one with IAM checks on, for a real AccessDenied)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest
from botocore.exceptions import ClientError, NoCredentialsError
from support import REPO, SAMPLE_CONFIG, own_ray_env
from support.cli import call  # the command line in this process

from pipeline.core.storage_errors import StorageRefused, refusal_cause, refusals_named
from pipeline.testing.s3 import moto_server


def command(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=REPO, env=env
    )
    noise = ("WARNING", "INFO")  # Ray's own start-up lines
    proc.lines = [line for line in proc.stderr.splitlines() if not any(n in line for n in noise)]
    return proc


def commands(endpoint: str, raw: str, out: str) -> dict[str, list[str]]:
    config = ["--config", str(SAMPLE_CONFIG), "--input", raw, "--output", out]
    return {
        "run": ["run", *config, "--endpoint-url", endpoint, "--quiet"],
        "verify": ["verify", f"{out}/sample", "--endpoint-url", endpoint],
        "retain": ["retain", *config, "--endpoint-url", endpoint],
        "report": ["report", *config, "--endpoint-url", endpoint],
        "plan --probe": ["plan", "--probe", f"{out}/sample", "--endpoint-url", endpoint],
    }


def assert_refused(proc, uri_part: str, cause: str) -> None:
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.lines) == 1, proc.stderr
    assert proc.lines[0].startswith(f"error: storage refused: {uri_part}"), proc.lines[0]
    assert cause in proc.lines[0], proc.lines[0]


@pytest.mark.parametrize("name", ["run", "verify", "retain", "report", "plan --probe"])
def test_a_missing_bucket(ray_local, s3_server, s3_upload, name):
    """In this process (the session's AWS environment is right here): `run` on the shared Ray."""
    root = s3_upload({"raw/a.jsonl": b'{"id": 1, "text": "hello world"}\n'})
    have = root.uri.rstrip("/")
    raw, out = (f"s3://nobucket-{os.getpid()}/raw", f"{have}/out")
    if name != "run":  # the output's bucket is missing; run: the input's
        raw, out = f"{have}/raw", f"s3://nobucket-{os.getpid()}/out"
    code, _, err = call(commands(s3_server, raw, out)[name])
    proc = SimpleNamespace(returncode=code, stderr=err, lines=err.splitlines())
    assert_refused(proc, f"s3://nobucket-{os.getpid()}/", "no such bucket (NoSuchBucket")


@pytest.mark.slow  # one command process per case (`run` starts Ray)
@pytest.mark.parametrize("name", ["run", "verify", "retain", "plan --probe"])
def test_no_credentials(s3_server, s3_upload, tmp_path, name):
    root = s3_upload({"raw/a.jsonl": b'{"id": 1, "text": "hello world"}\n'})
    have = root.uri.rstrip("/")
    (tmp_path / "empty").write_text("")
    env = {k: v for k, v in own_ray_env().items() if not k.startswith("AWS_")}
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "empty"),
        "AWS_CONFIG_FILE": str(tmp_path / "empty"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    proc = command(commands(s3_server, f"{have}/raw", f"{have}/out")[name], env)
    assert_refused(proc, have, "no AWS credentials found")


@pytest.fixture(scope="module")
def locked_bucket(s3_server) -> tuple[str, dict[str, str]]:
    """A moto server that checks IAM: a bucket with data and a user who may only GetObject."""
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"  # the four set-up calls below
    try:
        with moto_server() as endpoint:
            s3 = boto3.client("s3", endpoint_url=endpoint)
            iam = boto3.client("iam", endpoint_url=endpoint)
            s3.create_bucket(Bucket="locked")
            iam.create_user(UserName="reader")
            key = iam.create_access_key(UserName="reader")["AccessKey"]
            statement = {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"}
            policy = {"Version": "2012-10-17", "Statement": [statement]}
            iam.put_user_policy(
                UserName="reader", PolicyName="get-only", PolicyDocument=json.dumps(policy)
            )
            env = own_ray_env() | {
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            }
            yield endpoint, env
    finally:
        del os.environ["INITIAL_NO_AUTH_ACTION_COUNT"]


@pytest.mark.slow  # one command process per case (`run` starts Ray)
@pytest.mark.parametrize("name", ["run", "verify", "retain"])
def test_access_denied(locked_bucket, name):
    """One cause for every command, whichever request it sends first: `run` LISTs (an answer
    with the code AccessDenied), verify and retain HEAD the manifest (an answer with no body)."""
    endpoint, env = locked_bucket
    proc = command(commands(endpoint, "s3://locked/raw", "s3://locked/out")[name], env)
    assert_refused(proc, "s3://locked/", "access denied (HTTP 403, in ")


@pytest.mark.slow  # a pipeline run
def test_an_unknown_access_key(locked_bucket):
    endpoint, env = locked_bucket
    env = env | {"AWS_ACCESS_KEY_ID": "AKIAUNKNOWN000000000"}
    runs = commands(endpoint, "s3://locked/raw", "s3://locked/out")
    proc = command(runs["run"], env)  # a LIST's answer names the cause
    assert_refused(proc, "s3://locked/raw", "the access key is not known to the store")
    proc = command(runs["verify"], env)  # a HEAD's answer has no body: 403 alone
    assert_refused(proc, "s3://locked/out/sample", "access denied (HTTP 403, in HeadObject)")


def test_the_classification_of_botocore_errors():
    def client_error(code: str, op: str = "GetObject") -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": code}}, op)

    def translated(error: Exception) -> OSError:  # as s3fs raises them: `raise ... from err`
        try:
            raise PermissionError("Forbidden") from error
        except PermissionError as e:
            return e

    # a denial reads the same whatever the request: a GET's answer names AccessDenied, a HEAD's
    # has no body (botocore's code is then the status)
    denied_get = client_error("AccessDenied")
    head_answer = {"Code": "403", "Message": "Forbidden"}
    denied_head = ClientError(
        {"Error": head_answer, "ResponseMetadata": {"HTTPStatusCode": 403}}, "HeadObject"
    )
    assert refusal_cause(denied_get) == "access denied (HTTP 403, in GetObject)"
    assert refusal_cause(translated(denied_head)) == "access denied (HTTP 403, in HeadObject)"
    assert refusal_cause(translated(client_error("SignatureDoesNotMatch"))).startswith(
        "the secret key does not match"
    )
    assert refusal_cause(NoCredentialsError()).startswith("no AWS credentials found")
    for transient in ("NoSuchKey", "SlowDown", "InternalError", "PreconditionFailed"):
        assert refusal_cause(translated(client_error(transient))) is None
    assert refusal_cause(FileNotFoundError("x")) is None
    refused = pytest.raises(StorageRefused, match=r"^storage refused: s3://b/k: access denied")
    with refused, refusals_named("s3://b/k"):
        raise translated(client_error("AccessDenied"))
    with pytest.raises(FileNotFoundError), refusals_named("s3://b/k"):  # not a refusal
        raise FileNotFoundError("s3://b/k")


def test_the_readme_documents_exit_6():
    assert "6 the store refused" in Path(REPO / "README.md").read_text()

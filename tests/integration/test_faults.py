"""S3 faults between the pipeline and a real S3 server (SeaweedFS), injected by
pipeline.testing.fault_proxy.

Policy under test:
- transient faults (503 SlowDown, connection reset, a stall past the read timeout) are retried
  with backoff by botocore ("standard" mode, storage.retries attempts) and s3fs; the run completes
  with the same bytes as a run without faults;
- a permanent error on an INPUT object (403) quarantines that object as `unreadable`, naming it
  and the error; the other objects are processed and the run commits (within max_error_rate);
- a permanent error on an OUTPUT write fails the task and the run, naming the object; nothing is
  committed.
"""

from __future__ import annotations

import json
import time

import pytest
from support import s3_config

from pipeline.core.storage import Location
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import committed_versions, comparable
from pipeline.run.driver import run_pipeline
from pipeline.testing.fault_proxy import FaultPlan, FaultProxy, PermanentFault


def shard_bytes(version: Location, manifest: dict) -> list[bytes]:
    return [(version / s[k]).read_bytes() for s in manifest["shards"] for k in ("bin", "idx")]


def small_input(s3_upload) -> None:
    files = {}
    for i in range(3):
        lines = [
            json.dumps({"id": f"{i}-{j}", "text": f"document {j} of file {i} " * 20})
            for j in range(50)
        ]
        files[f"raw/part-{i}.jsonl"] = ("\n".join(lines) + "\n").encode()
    s3_upload(files)


def test_plan_schedules_faults_by_request_number():
    plan = FaultPlan(
        slowdown_every=3, reset_every=5, stall_every=7, permanent=(PermanentFault(r"bad\.jsonl$"),)
    )
    kinds = [plan.fault_for(n, "GET", "/b/k") for n in range(1, 16)]
    assert kinds == [
        None,
        None,
        "slowdown",
        None,
        "reset",
        "slowdown",
        "stall",
        None,
        "slowdown",
        "reset",
        None,
        "slowdown",
        None,
        "stall",
        "slowdown",
    ]
    assert plan.fault_for(1, "GET", "/b/raw/bad.jsonl").code == "AccessDenied"
    assert plan.fault_for(1, "PUT", "/b/raw/bad.jsonl") is None  # the rule names GET/HEAD
    assert plan.fault_for(3, "POST", "/moto-api/reset") is None


def test_transient_faults_are_retried_and_change_no_byte(
    ray_local, s3_server, s3_sample_run, s3_storage, capsys
):
    clean, s3_bucket = s3_sample_run, s3_sample_run.bucket

    plan = FaultPlan(slowdown_every=53, reset_every=97, stall_every=199, stall_seconds=4)
    with FaultProxy(s3_server, plan) as proxy:
        started = time.perf_counter()
        faulty = run_pipeline(
            s3_config(s3_bucket, proxy.endpoint, "faulty", "storage.read_timeout=2"),
            show_progress=False,
        )
        counts = proxy.snapshot()
    with capsys.disabled():
        print(f"\nfault proxy: {counts}; run {time.perf_counter() - started:.1f} s")
    assert counts["slowdown"] and counts["reset"] and counts["stall"]
    # every faulted request was answered by a retry, and the run still committed
    faults = counts["slowdown"] + counts["reset"] + counts["stall"]
    assert counts["requests"] == counts["forwarded"] + faults
    version = Location.from_uri(faulty.version.uri, s3_storage)  # read back without the proxy
    verify_version(version)
    assert shard_bytes(version, faulty.manifest) == shard_bytes(clean.version, clean.manifest)
    assert comparable(faulty.manifest) == comparable(clean.manifest)


def test_permanent_error_on_an_input_object_quarantines_it(
    ray_local, s3_server, s3_bucket, s3_storage, s3_upload
):
    small_input(s3_upload)
    denied = PermanentFault(r"/raw/part-1\.jsonl$")  # GET and HEAD: 403 AccessDenied
    with FaultProxy(s3_server, FaultPlan(permanent=(denied,))) as proxy:
        cfg = s3_config(s3_bucket, proxy.endpoint, "out", "ingest.max_error_rate=0.5")
        result = run_pipeline(cfg, show_progress=False)
        counts = proxy.snapshot()
    assert 1 <= counts["permanent"] <= 2  # a 403 is not retried (retries: >= storage.retries)
    c = result.manifest["counts"]
    assert c["quarantined_by_reason"] == {"unreadable": 1} and c["docs_out"] == 100
    version = Location.from_uri(result.version.uri, s3_storage)  # read back without the proxy
    dataset = Location(version.fs, version.path.rsplit("/", 1)[0])
    [bad] = (dataset / result.manifest["lineage"]["quarantine"]).read_parquet().to_pylist()
    assert bad["source"] == "part-1.jsonl" and bad["reason"] == "unreadable"
    assert "PermissionError" in bad["detail"]
    verify_version(version)


def test_permanent_error_on_an_output_write_fails_the_run(
    ray_local, s3_server, s3_bucket, s3_storage, s3_upload
):
    small_input(s3_upload)
    denied = PermanentFault(r"/shard-00000\.bin$", methods=("PUT",))
    with FaultProxy(s3_server, FaultPlan(permanent=(denied,))) as proxy:
        cfg = s3_config(s3_bucket, proxy.endpoint, "out")
        with pytest.raises(PermissionError, match=r"writing s3://\S+/shard-00000\.bin failed"):
            run_pipeline(cfg, show_progress=False)
        assert proxy.snapshot()["permanent"] >= 1
    dataset = Location.from_uri(f"s3://{s3_bucket}/out/sample", s3_storage)
    assert committed_versions(dataset) == []

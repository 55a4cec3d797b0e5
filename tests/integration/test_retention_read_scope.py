"""Raw retention acts only on the object a run read: same path, size and ETag (local: mtime).
A file appended to, rewritten or deleted and re-created after the run is kept and shown in the
plan; the exported raw lifecycle rule is limited to objects tagged as read (`retain --tag-read`),
which an overwrite drops. Local files, and a real SeaweedFS S3 server (it implements object
tagging and tag-filtered lifecycle rules; moto would accept them too, but SeaweedFS is a second,
independent implementation of the S3 API and checks the exported JSON for real)."""

from __future__ import annotations

import os
import time
import uuid
from functools import partial

import boto3
import support
from support import SAMPLE_CONFIG

from pipeline.config.loader import load_config
from pipeline.config.sections import StorageConfig
from pipeline.core.storage import Location
from pipeline.retention.apply import apply_plan
from pipeline.retention.decide import DAY
from pipeline.retention.lifecycle import export_lifecycle
from pipeline.retention.plan import format_plan, plan_retention
from pipeline.retention.tagging import tag_read
from pipeline.run.driver import run_pipeline

RAW_0 = "retention.rules.raw.delete_after_days=0"
TAG = {"pipeline-read/sample": "true"}


jsonl = partial(support.jsonl, n=40, words="text number", repeat=20)


FILES = {n: jsonl(n) for n in ("appended", "rewritten", "recreated", "untouched")}
LATE_RECORD = b'{"id": "late", "text": "appended after the run: never read"}\n'


def config(input_uri: str, output_uri: str, *sets: str):
    return load_config(
        SAMPLE_CONFIG, input_uri=input_uri, output_uri=output_uri, overrides=list(sets)
    )


def raw_deletes(plan) -> set[str]:
    return {d.obj.key for d in plan.actions if d.obj.root == "raw" and d.action == "delete"}


def test_changed_local_files_are_kept(ray_local, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    for name, blob in FILES.items():
        (data / f"{name}.jsonl").write_bytes(blob)
    cfg = config(str(data), str(tmp_path / "out"), RAW_0)
    run_pipeline(cfg, show_progress=False)
    listed = len(FILES["appended"])
    with open(data / "appended.jsonl", "ab") as f:  # records the run never read
        f.write(LATE_RECORD)
    rewritten = data / "rewritten.jsonl"  # same size, other bytes, a later mtime
    mtime = rewritten.stat().st_mtime
    rewritten.write_bytes(FILES["rewritten"].replace(b"number 1 ", b"NUMBER 1 "))
    os.utime(rewritten, (mtime + 5, mtime + 5))
    recreated = data / "recreated.jsonl"  # deleted, then a new file of the same name and bytes
    mtime = recreated.stat().st_mtime
    recreated.unlink()
    recreated.write_bytes(FILES["recreated"])
    os.utime(recreated, (mtime + 7, mtime + 7))

    plan = plan_retention(cfg, now=time.time() + DAY)
    assert raw_deletes(plan) == {"untouched.jsonl"}
    changed = plan.raw_roots[0].changed
    now = listed + len(LATE_RECORD)
    assert changed["appended.jsonl"] == f"changed since read: size {listed:,} -> {now:,}"
    assert changed["rewritten.jsonl"].startswith("changed since read: mtime ")
    assert changed["recreated.jsonl"].startswith("changed since read: mtime ")
    printed = format_plan(plan)
    assert f"raw:appended.jsonl: changed since read: size {listed:,} -> {now:,}" in printed
    assert "kept 3 raw files a run read that changed since" in printed
    apply_plan(plan, cfg)
    assert sorted(p.name for p in data.iterdir()) == [
        "appended.jsonl",
        "recreated.jsonl",
        "rewritten.jsonl",
    ]


# -- S3 (the suite's SeaweedFS server, tests/conftest.py) --------------------------------------
def test_changed_s3_objects_are_kept_and_lifecycle_rule_is_tag_scoped(ray_local, s3_server):
    seaweed = s3_server
    b = f"t20-{uuid.uuid4().hex[:12]}"
    storage = StorageConfig(endpoint_url=seaweed)
    client = boto3.client("s3", endpoint_url=seaweed)
    client.create_bucket(Bucket=b)
    names = ("appended", "rewritten", "untouched")
    for name in names:
        client.put_object(Bucket=b, Key=f"corpus/{name}.jsonl", Body=FILES[name])
    sets = (f"storage.endpoint_url={seaweed}", "retention.rules.raw.delete_after_days=30")
    cfg = config(f"s3://{b}/corpus", f"s3://{b}/out", *sets)
    run_pipeline(cfg, show_progress=False)
    later = time.time() + 60 * DAY

    # the runs' objects get the read tag; the raw rule filters by prefix and that tag
    plan = plan_retention(cfg, now=later)
    assert raw_deletes(plan) == {f"{n}.jsonl" for n in names}
    tagged = tag_read(plan)
    assert (tagged.tagged, tagged.already, tagged.replaced) == (3, 0, [])
    exported = export_lifecycle(plan, cfg.retention.rules)
    [raw_rule] = [r for r in exported["buckets"][b]["Rules"] if r["ID"].startswith("raw:")]
    assert raw_rule["Filter"] == {
        "And": {"Prefix": "corpus/", "Tags": [{"Key": "pipeline-read/sample", "Value": "true"}]}
    }
    assert any("retain --tag-read" in note for note in exported["notes"])
    client.put_bucket_lifecycle_configuration(
        Bucket=b, LifecycleConfiguration=exported["buckets"][b]
    )
    stored = client.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
    assert [r["Filter"] for r in stored if r["ID"] == raw_rule["ID"]] == [raw_rule["Filter"]]

    # after the run: an append (a new, longer object), a same-size rewrite, a new object
    client.put_object(Bucket=b, Key="corpus/appended.jsonl", Body=FILES["appended"] + LATE_RECORD)
    rewritten = FILES["rewritten"].replace(b"number 1 ", b"NUMBER 1 ")
    assert len(rewritten) == len(FILES["rewritten"])
    client.put_object(Bucket=b, Key="corpus/rewritten.jsonl", Body=rewritten)
    client.put_object(Bucket=b, Key="corpus/late.jsonl", Body=jsonl("late"))
    raw = Location.from_uri(f"s3://{b}/corpus", storage)

    def tags(name: str) -> dict[str, str]:
        return (raw / f"{name}.jsonl").get_tags()

    # what the tag-filtered rule would reach: only the object still as read
    assert [tags(n) for n in ("appended", "rewritten", "late", "untouched")] == [{}, {}, {}, TAG]

    plan = plan_retention(cfg, now=later)
    assert raw_deletes(plan) == {"untouched.jsonl"}
    changed = plan.raw_roots[0].changed
    size = len(FILES["appended"])
    assert changed["appended.jsonl"] == (
        f"changed since read: size {size:,} -> {size + len(LATE_RECORD):,}"
    )
    assert changed["rewritten.jsonl"].startswith("changed since read: ETag ")
    again = tag_read(plan)
    assert (again.tagged, again.already) == (0, 1)
    assert tags("appended") == {} and tags("rewritten") == {}
    apply_plan(plan, cfg)
    raw.fs.invalidate_cache()
    assert sorted(raw.ls_names()) == ["appended.jsonl", "late.jsonl", "rewritten.jsonl"]

"""Cases 2 and 7 of "nothing wrong committed": retention touches only what the pipeline owns and
read, a lifecycle rule is exported only when its prefix covers nothing else, and retention never
deletes its own memory (the live run's committed.json, the audit logs). Local and SeaweedFS S3."""

from __future__ import annotations

import os
import time

import boto3
from support import SAMPLE_CONFIG, jsonl

from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import committed_versions
from pipeline.retention.apply import apply_plan
from pipeline.retention.decide import DAY
from pipeline.retention.lifecycle import export_lifecycle, rule_prefix
from pipeline.retention.plan import dataset_location, plan_retention
from pipeline.run.driver import run_pipeline

RAW_30 = "retention.rules.raw.delete_after_days=30"


# What a careless input folder holds beside the data: none of it is read, so none of it is the
# raw rule's to delete (README.md is excluded by the sample config).
BESIDE = {
    "README.md": b"# about\n",
    "_planted.json": b'{"planted": true}\n',
    ".DS_Store": b"\x00\x01",
    "notes.bin": b"not a supported format",
}
READ = {"a.jsonl": jsonl("a", 30), "sub/b.jsonl": jsonl("b", 30)}


def config(input_uri: str, output_uri: str, *sets: str):
    return load_config(
        SAMPLE_CONFIG, input_uri=input_uri, output_uri=output_uri, overrides=list(sets)
    )


def raw_deletes(plan) -> set[str]:
    return {d.obj.key for d in plan.actions if d.obj.root == "raw" and d.action == "delete"}


# -- case 2 ----------------------------------------------------------------------------------
def test_raw_rule_deletes_only_files_this_dataset_read_local(ray_local, tmp_path):
    data = tmp_path / "in"
    for rel, blob in {**READ, **BESIDE}.items():
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes(blob)
    old = time.time() - 60 * DAY  # old when read: a later utime would be a change (mtime)
    for path in data.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))
    out = str(data / ".out")  # the output sits in a hidden folder under the input
    other = run_pipeline(config(str(data), out, "name=other"), show_progress=False)
    run_pipeline(config(str(data), out), show_progress=False)
    cfg = config(str(data), out, RAW_30)
    plan = plan_retention(cfg)
    assert raw_deletes(plan) == set(READ)
    assert set(BESIDE) <= set(plan.raw_foreign)
    assert any(k.startswith(".out/other/") for k in plan.raw_foreign)
    apply_plan(plan, cfg)
    assert all((data / rel).exists() for rel in BESIDE)
    assert not any((data / rel).exists() for rel in READ)
    verify_version(Location.from_uri(other.version.uri))  # the other dataset is whole


def test_raw_scope_and_lifecycle_prefixes_on_s3(
    ray_local, s3_server, s3_bucket, s3_storage, s3_upload
):
    sets = (f"storage.endpoint_url={s3_server}", RAW_30)
    b = s3_bucket
    s3_upload({f"corpus/{k}": v for k, v in {**READ, **BESIDE}.items()})
    # 1. the output under the input prefix: a rule on corpus/ would expire the live versions
    other = run_pipeline(
        config(f"s3://{b}/corpus", f"s3://{b}/corpus/.out", "name=other", *sets),
        show_progress=False,
    )
    cfg = config(f"s3://{b}/corpus", f"s3://{b}/corpus/.out", *sets)
    run_pipeline(cfg, show_progress=False)
    plan = plan_retention(cfg, now=time.time() + 60 * DAY)
    assert raw_deletes(plan) == set(READ)
    exported = export_lifecycle(plan, cfg.retention.rules)
    prefixes = [rule_prefix(r) for r in exported["buckets"][b]["Rules"]]
    assert "corpus/" not in prefixes and "" not in prefixes
    [refused] = [m for m in exported["not_expressible"] if m["class"] == "raw"]
    assert "covers this dataset's folder 'corpus/.out/sample/'" in refused["reason"]
    apply_plan(plan, cfg)
    root = Location.from_uri(f"s3://{b}/corpus", s3_storage)
    root.fs.invalidate_cache()
    assert all((root / rel).exists() for rel in BESIDE)
    assert not any((root / rel).exists() for rel in READ)
    verify_version(Location.from_uri(other.version.uri, s3_storage))
    # 2. the input at a bucket's root: a rule with prefix "" would cover the whole bucket
    fs = root.fs
    fs.mkdir(f"{b}-root")
    fs.pipe({f"{b}-root/{k}": v for k, v in READ.items()})
    cfg = config(f"s3://{b}-root", f"s3://{b}/out-root", *sets)
    run_pipeline(cfg, show_progress=False)
    exported = export_lifecycle(plan_retention(cfg), cfg.retention.rules)
    assert f"{b}-root" not in exported["buckets"]
    [refused] = [m for m in exported["not_expressible"] if m["class"] == "raw"]
    assert "root of bucket" in refused["reason"]
    # 3. files beside the data under the prefix (never read): refused, naming them
    s3_upload({f"mixed/{k}": v for k, v in {**READ, "README.md": b"x"}.items()})
    cfg = config(f"s3://{b}/mixed", f"s3://{b}/out-mixed", *sets)
    run_pipeline(cfg, show_progress=False)
    exported = export_lifecycle(plan_retention(cfg), cfg.retention.rules)
    [refused] = [m for m in exported["not_expressible"] if m["class"] == "raw"]
    assert "also covers 1 objects no run of this dataset read (e.g. README.md)" in refused["reason"]
    # 4. a prefix holding only what was read: exported, and S3 accepts it
    s3_upload({f"clean/{k}": v for k, v in READ.items()})
    cfg = config(f"s3://{b}/clean", f"s3://{b}/out-clean", *sets)
    run_pipeline(cfg, show_progress=False)
    exported = export_lifecycle(plan_retention(cfg), cfg.retention.rules)
    rules = exported["buckets"][b]["Rules"]
    [raw_rule] = [r for r in rules if r["ID"].startswith("raw:")]
    assert rule_prefix(raw_rule) == "clean/" and raw_rule["Expiration"] == {"Days": 30}
    assert raw_rule["Filter"]["And"]["Tags"] == [{"Key": "pipeline-read/sample", "Value": "true"}]
    client = boto3.client("s3", endpoint_url=s3_server)
    client.put_bucket_lifecycle_configuration(
        Bucket=b, LifecycleConfiguration=exported["buckets"][b]
    )


# -- case 7 ----------------------------------------------------------------------------------
FORGETFUL = (
    "retention.grace_days=0",
    "retention.rules.work_state.delete_after_days=0",
    "retention.rules.token_parts.delete_after_days=0",
    "retention.rules.reports.delete_after_days=0",
)


def _memory_survives(input_uri: str, output_uri: str, storage, *sets: str) -> None:
    cfg = config(input_uri, output_uri, *sets, *FORGETFUL)
    first = run_pipeline(cfg, show_progress=False)
    dataset = dataset_location(cfg)
    run_dir = dataset / f"_work/runs/{first.manifest['run']['run_id']}"
    audit1 = apply_plan(plan_retention(cfg), cfg)
    assert any(e["status"] == "done" for e in audit1)  # work state and token files did go
    dataset.fs.invalidate_cache()
    assert (run_dir / "committed.json").exists()
    again = run_pipeline(cfg, show_progress=False)
    assert again.already_committed and again.version.name == first.version.name
    assert committed_versions(dataset) == [first.version.name]
    logs = sorted(n for n in (dataset / "_audit").ls_names() if n.startswith("retention-"))
    assert len(logs) == 1
    first_log = (dataset / "_audit" / logs[0]).read_bytes()
    (dataset / "_reports/old.md").write_bytes(b"an old report")
    audit2 = apply_plan(plan_retention(cfg), cfg)
    assert [e["key"] for e in audit2 if e["status"] == "done"] == ["_reports/old.md"]
    dataset.fs.invalidate_cache()
    logs = sorted(n for n in (dataset / "_audit").ls_names() if n.startswith("retention-"))
    assert len(logs) == 2 and (dataset / "_audit" / logs[0]).read_bytes() == first_log
    plan = plan_retention(cfg)
    audit_decisions = [d for d in plan.decisions if d.obj.key.startswith("_audit/retention-")]
    assert audit_decisions and all(d.action == "keep" for d in audit_decisions)


def test_retention_keeps_committed_json_and_audit_logs_local(ray_local, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.jsonl").write_bytes(jsonl("a", 40))
    _memory_survives(str(data), str(tmp_path / "out"), None)


def test_retention_keeps_committed_json_and_audit_logs_s3(
    ray_local, s3_server, s3_bucket, s3_storage, s3_upload
):
    s3_upload({"raw/a.jsonl": jsonl("a", 40)})
    _memory_survives(
        f"s3://{s3_bucket}/raw",
        f"s3://{s3_bucket}/out",
        s3_storage,
        f"storage.endpoint_url={s3_server}",
    )

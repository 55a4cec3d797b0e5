"""Retention: the plan selects exactly what the rules say, --apply does exactly that and nothing a
live manifest references, reruns are no-ops; local storage and a moto S3 server
(storage classes: see s3_server below)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
import s3fs
from support import REPO

from pipeline.cli.main import main
from pipeline.config.model import Config
from pipeline.core.io_counters import IO
from pipeline.core.storage import Location
from pipeline.formats.manifest import FORMAT_V1, commit_manifest, load_manifest
from pipeline.formats.versions import committed_versions
from pipeline.ingest.listing import list_inputs
from pipeline.retention.apply import apply_plan
from pipeline.retention.decide import DAY
from pipeline.retention.lifecycle import export_lifecycle, rule_prefix
from pipeline.retention.plan import format_plan, plan_retention
from pipeline.testing.s3 import dummy_aws_env, moto_server, recorded_requests

NAME = "ds"
WORK_FILES = {  # key under the dataset -> bytes (core/layout.py)
    "_work/runs/r1/inputs.parquet": 11,
    "_work/runs/r1/units.parquet": 12,
    "_work/runs/r1/skipped.parquet": 10,
    "_work/runs/r1/removed.parquet": 13,
    "_work/runs/r1/quarantine.parquet": 14,
    "_work/runs/r1/stats.json": 9,
    "_work/runs/r1/committed.json": 8,
    "_work/runs/r1/exact/p0000.removed.parquet": 20,
    "_work/runs/r1/exact/removed.parquet": 21,
    "_work/runs/r1/near/sig/q0000/u0.parquet": 300,
    "_work/units/k1/u0.docs.parquet": 1000,
    "_work/units/k1/u0.quarantine.parquet": 15,
    "_work/units/k1/u0.p0000.parquet": 200,
    "_work/units/k1/u0.done.json": 16,
    "_work/units/k1/u1.docs.parquet": 1001,
    "_work/units/k1/u1.done.json": 17,
    "_work/tokens/t1/u0-aa.bin": 4000,
    "_work/tokens/t1/u0-aa.parquet": 40,
}
LINEAGE = (
    "inputs.parquet",
    "units.parquet",
    "removed.parquet",
    "quarantine.parquet",
    "stats.json",
    "skipped.parquet",
)
V = [f"2025010{i}T000000.000000Z-r1" for i in range(1, 7)]  # version ids, oldest first


def manifest(version: str, run: str) -> dict:
    counts = dict.fromkeys(
        ("docs_in", "docs_out", "removed_exact", "removed_near", "quarantined", "tokens"), 1
    )
    shard = {
        "bin": "shard-00000.bin",
        "idx": "shard-00000.idx",
        "bin_bytes": 64,
        "idx_bytes": 8,
        "tokens": 32,
        "documents": 1,
        "bin_xxh3_128": "0" * 32,
        "idx_xxh3_128": "0" * 32,
    }
    return {
        "format": FORMAT_V1,  # hand-written: no block checksums
        "name": NAME,
        "version": version,
        "counts": counts,
        "tokenizer": {"vocab_size": 8000, "dtype": "uint16"},
        "shards": [shard],
        "run": {"run_id": run},
        "lineage": {k.split(".")[0]: f"_work/runs/{run}/{k}" for k in LINEAGE}
        | {"input_manifest_xxh3_128": "abc"},
    }


class Dataset:
    """A small dataset in the layout; ages by mtime locally, by the plan's clock on S3."""

    def __init__(self, root: Location, now: float, raw: Location | None = None) -> None:
        self.root, self.now, self.raw = root, now, raw

    def put(self, key: str, size: int, days: float) -> None:
        loc = self.root / key
        if key.endswith("/inputs.parquet") and self.raw is not None:  # the raw rule's scope
            loc.write_parquet(list_inputs(self.raw, ["**"], [])[0])  # what a run records
        elif key.endswith("/inputs.parquet"):  # by path alone (S3: ETag not recorded)
            loc.write_parquet(pa.table({"path": ["a.jsonl", "sub/a.jsonl"]}))
        else:
            loc.write_bytes(b"x" * size)
        if loc.is_local:
            t = self.now - days * DAY
            os.utime(loc.path, (t, t))

    def work(self, days: float) -> None:
        for key, size in WORK_FILES.items():
            self.put(key, size, days)

    def version(self, version: str, days: float, committed: bool = True) -> None:
        self.put(f"{version}/shard-00000.bin", 64, days)
        self.put(f"{version}/shard-00000.idx", 8, days)
        if committed:
            commit_manifest(self.root / version, manifest(version, "r1"))
            if self.root.is_local:
                t = self.now - days * DAY
                os.utime((self.root / version / "manifest.json").path, (t, t))


def standard_dataset(root: Location, now: float, raw: Location | None = None) -> Dataset:
    """Work files of a run 30 days ago. V1, V2, V4 committed (40, 20, 10 days old); V3
    uncommitted, 9 days, older than the newest commit; V5: a commit in progress."""
    ds = Dataset(root, now, raw)
    ds.work(30)
    for v, days in ((V[0], 40), (V[1], 20), (V[3], 10)):
        ds.version(v, days)
    ds.version(V[2], 9, committed=False)
    ds.version(V[4], 9, committed=False)
    ds.put("_reports/cost-old.md", 5, 100)
    ds.put("notes.txt", 3, 100)  # no known class
    return ds


def make_config(raw: str, output: str, endpoint: str | None = None, **retention) -> Config:
    return Config.model_validate(
        {
            "name": NAME,
            "input": {"uri": raw},
            "output": {"uri": output},
            "storage": {"endpoint_url": endpoint},
            "tokenize": {"tokenizer": "unused.json"},
            "retention": retention,
        }
    )


@pytest.fixture
def local(tmp_path: Path):
    raw = tmp_path / "raw"
    (raw / "sub").mkdir(parents=True)
    (raw / "sub" / "a.jsonl").write_bytes(b"{}\n" * 10)
    old = time.time() - 400 * DAY
    os.utime(raw / "sub" / "a.jsonl", (old, old))
    root = Location.from_uri(str(tmp_path / "out")) / NAME
    now = time.time()
    standard_dataset(root, now, Location.from_uri(str(raw)))
    return raw, tmp_path / "out", root


def keys(root: Location) -> set[str]:
    base = root.path.rstrip("/") + "/"
    root.fs.invalidate_cache()
    return {p[len(base) :] for p in root.fs.find(root.path)}


def planned(plan, action: str = "delete") -> set[str]:
    return {
        ("raw:" if d.obj.root == "raw" else "") + d.obj.key
        for d in plan.decisions
        if d.action == action
    }


def expected_deletes() -> set[str]:
    work = {
        k
        for k in WORK_FILES
        if k.startswith(("_work/tokens/", "_work/runs/r1/exact/", "_work/runs/r1/near/"))
        or k.endswith((".docs.parquet", ".p0000.parquet", ".done.json"))
    }
    v1 = {f"{V[0]}/shard-00000.bin", f"{V[0]}/shard-00000.idx", f"{V[0]}/manifest.json"}
    v3 = {f"{V[2]}/shard-00000.bin", f"{V[2]}/shard-00000.idx"}
    return work | v1 | v3


def test_plan_lists_exactly_what_the_rules_select(local):
    raw, out, root = local
    before = keys(root)
    cfg = make_config(str(raw), str(out), rules={"versions": {"keep_newest": 2}})
    plan = plan_retention(cfg)
    assert planned(plan) == expected_deletes()
    assert planned(plan, "transition") == set()
    assert keys(root) == before, "planning must change nothing"
    why = {d.obj.key: d for d in plan.decisions}
    assert why["_work/units/k1/u0.done.json"].rule == "marker-follows-data"
    assert why["_work/units/k1/u0.quarantine.parquet"].action == "keep"
    assert why[f"{V[4]}/shard-00000.bin"].rule == "protected"  # commit in progress
    assert why["notes.txt"].action == "keep"
    text = format_plan(plan)
    assert "versions.keep_newest=2" in text and "dry run" in text
    assert f"{V[0]}/" in text and "_work/tokens/t1/" in text


def test_a_held_lease_freezes_work_files_and_is_never_deleted(local):
    raw, out, root = local
    ds = Dataset(root, time.time())
    ds.put("_work/lease.json", 50, 0.01)  # a run holds the dataset, renewed just now
    cfg = make_config(str(raw), str(out), rules={"work_state": {"delete_after_days": 1}})
    plan = plan_retention(cfg)
    assert not any(k.startswith("_work/") for k in planned(plan))
    assert f"{V[2]}/shard-00000.bin" in planned(plan)  # versions are not work files
    ds.put("_work/lease.json", 50, 30)  # a stale lease left by a crash
    plan = plan_retention(cfg)
    assert "_work/units/k1/u0.done.json" in planned(plan)
    assert "_work/runs/r1/committed.json" not in planned(plan)  # the live version's run's
    assert "_work/lease.json" not in planned(plan)


def test_apply_skips_work_files_while_a_run_holds_the_lease(local):
    raw, out, root = local
    cfg = make_config(str(raw), str(out))
    plan = plan_retention(cfg)
    assert any(k.startswith("_work/") for k in planned(plan))
    # a run starts between plan and apply: it holds a live lease
    holder = {
        "run_id": "other",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "acquired_at": time.time(),
        "expires_at": time.time() + 600,
    }
    (root / "_work/lease.json").write_bytes(json.dumps(holder).encode())
    audit = apply_plan(plan, cfg)
    work = [e for e in audit if e["key"].startswith("_work/")]
    assert work and all(e["status"].startswith("skipped") for e in work)
    assert all(os.path.exists((root / e["key"]).path) for e in work)
    assert {e["key"] for e in audit if e["status"] == "done"} == {
        k for k in expected_deletes() if not k.startswith("_work/")
    } - {f"{V[0]}/{n}" for n in ("shard-00000.bin", "shard-00000.idx", "manifest.json")}
    assert json.loads((root / "_work/lease.json").read_bytes())["run_id"] == "other"


def test_apply_deletes_exactly_the_plan_and_reruns_are_noops(local):
    raw, out, root = local
    cfg = make_config(str(raw), str(out), rules={"versions": {"keep_newest": 2}})
    before = keys(root)
    plan = plan_retention(cfg)
    audit = apply_plan(plan, cfg)
    assert {e["key"] for e in audit} == expected_deletes()
    assert all(e["status"] == "done" and e["rule"] for e in audit)
    after = keys(root)
    logs = {k for k in after if k.startswith("_audit/retention-")}
    assert len(logs) == 1
    assert after - logs - {"_audit/storage-classes.json"} == before - expected_deletes()
    log_lines = (root / logs.pop()).read_bytes().decode().splitlines()
    assert sorted(json.loads(x)["key"] for x in log_lines) == sorted(expected_deletes())
    # the newest K committed versions survive, whole and loadable, with their lineage
    assert committed_versions(root) == [V[1], V[3]]
    for v in (V[1], V[3]):
        load_manifest(root / v)
    assert all(f"_work/runs/r1/{k}" in after for k in LINEAGE)
    assert not os.path.exists((root / V[0]).path), "emptied version folder left behind"
    # again: nothing to do, and no second audit log
    assert apply_plan(plan, cfg) == []
    assert plan_retention(cfg).actions == []
    assert len([k for k in keys(root) if k.startswith("_audit/retention-")]) == 1


def test_lineage_of_live_versions_survives_class_rules(local):
    raw, out, root = local
    cfg = make_config(
        str(raw),
        str(out),
        rules={"work_state": {"delete_after_days": 1}, "quarantine": {"delete_after_days": 1}},
    )
    plan = plan_retention(cfg)
    deleted = planned(plan)
    for k in LINEAGE:
        assert f"_work/runs/r1/{k}" not in deleted
    assert "_work/units/k1/u0.quarantine.parquet" in deleted
    assert "_work/runs/r1/committed.json" not in deleted  # the live versions' run's
    assert "_work/runs/r1/exact/p0000.removed.parquet" in deleted
    # default versions rule keeps every committed version: nothing of them goes
    assert not any(k.startswith((V[0], V[1], V[3])) for k in deleted)


def test_uncommitted_version_never_counts_as_live(tmp_path):
    root = Location.from_uri(str(tmp_path / "out")) / NAME
    ds = Dataset(root, time.time())
    ds.version(V[0], 30)
    ds.version(V[1], 20)
    ds.version(V[2], 10, committed=False)  # newer, no manifest: being committed
    ds.version(V[3], 5)
    (root / V[3] / "manifest.json").write_bytes(b"{not json")  # committed but unreadable
    cfg = make_config(
        str(tmp_path / "none"), str(tmp_path / "out"), rules={"versions": {"keep_newest": 1}}
    )
    plan = plan_retention(cfg)
    # V[3] is unreadable, so V[1] is the newest live version; V[2] does not count either
    assert {k.split("/")[0] for k in planned(plan)} == {V[0]}
    reasons = {d.obj.key.split("/")[0]: d.reason for d in plan.decisions}
    assert "cannot be read" in reasons[V[3]]
    assert "being committed" in reasons[V[2]]


def test_raw_inputs_only_go_by_an_explicit_rule(local):
    raw, out, root = local
    everything = {
        name: {"delete_after_days": 0}
        for name in (
            "read_docs",
            "exact_hashes",
            "near_dedup",
            "token_parts",
            "work_state",
            "quarantine",
            "uncommitted_versions",
            "reports",
        )
    }
    plan = plan_retention(make_config(str(raw), str(out), rules=everything))
    assert not any(k.startswith("raw:") for k in planned(plan))
    rules = everything | {"raw": {"delete_after_days": 365}}
    plan = plan_retention(make_config(str(raw), str(out), rules=rules))
    assert {k for k in planned(plan) if k.startswith("raw:")} == {"raw:sub/a.jsonl"}


def test_local_transitions_go_to_the_ledger_and_restore_needing_classes_spare_live(local):
    raw, out, root = local
    cfg = make_config(
        str(raw),
        str(out),
        rules={
            "token_parts": {"transitions": [{"after_days": 7, "storage_class": "GLACIER"}]},
            "versions": {
                "transitions": [
                    {"after_days": 15, "storage_class": "STANDARD_IA"},
                    {"after_days": 30, "storage_class": "DEEP_ARCHIVE"},
                ]
            },
        },
    )
    plan = plan_retention(cfg)
    moved = {d.obj.key: d.target_class for d in plan.actions if d.action == "transition"}
    assert moved == {
        "_work/tokens/t1/u0-aa.bin": "GLACIER",
        "_work/tokens/t1/u0-aa.parquet": "GLACIER",
        **{
            f"{v}/{n}": "STANDARD_IA"
            for v in (V[0], V[1])
            for n in ("shard-00000.bin", "shard-00000.idx", "manifest.json")
        },
    }
    # V1 is 40 days old but live: not moved where a reader would need a restore
    v1 = next(d for d in plan.decisions if d.obj.key == f"{V[0]}/shard-00000.bin")
    assert "not to DEEP_ARCHIVE" in v1.reason
    audit = apply_plan(plan, cfg)
    assert len(audit) == len(plan.actions)
    again = plan_retention(cfg)
    assert again.actions == []
    classes = {d.obj.key: d.obj.storage_class for d in again.decisions}
    assert classes["_work/tokens/t1/u0-aa.bin"] == "GLACIER"
    assert classes[f"{V[1]}/manifest.json"] == "STANDARD_IA"
    # a rewritten object no longer matches its ledger entry: back to STANDARD
    (root / "_work/tokens/t1/u0-aa.bin").write_bytes(b"new")
    classes = {d.obj.key: d.obj.storage_class for d in plan_retention(cfg).decisions}
    assert classes["_work/tokens/t1/u0-aa.bin"] == "STANDARD"


def test_retain_command_prints_then_applies(local, capsys, tmp_path):
    raw, out, root = local
    config = tmp_path / "c.yaml"
    config.write_text(
        json.dumps(
            {
                "name": NAME,
                "input": {"uri": str(raw)},
                "output": {"uri": str(out)},
                "tokenize": {"tokenizer": str(REPO / "configs" / "tokenizer.json")},
                "retention": {"rules": {"versions": {"keep_newest": 2}}},
            }
        )
    )
    before = keys(root)
    export = tmp_path / "lifecycle.json"
    assert main(["retain", "--config", str(config), "--export-lifecycle", str(export)]) == 0
    printed = capsys.readouterr().out
    assert "dry run" in printed and "not expressible" in printed and keys(root) == before
    assert json.loads(export.read_text())["not_expressible"]
    assert main(["retain", "--config", str(config), "--apply"]) == 0
    assert f"applied: {len(expected_deletes())} actions" in capsys.readouterr().out
    assert main(["retain", "--config", str(config), "--apply"]) == 0
    assert "applied: 0 actions" in capsys.readouterr().out


# -- S3 (moto) ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_server():
    """moto, not SeaweedFS, for this module's S3 tests: they move objects to another storage class
    (CopyObject onto itself with a new StorageClass: SeaweedFS answers InvalidRequest, it has no
    storage classes) and put lifecycle rules with Transitions (SeaweedFS: NotImplemented)."""
    with dummy_aws_env(), moto_server() as endpoint:
        yield endpoint
    s3fs.S3FileSystem.clear_instance_cache()  # its instances point at the stopped server

def retention_config_s3(bucket: str, endpoint: str, **retention) -> Config:
    return make_config(f"s3://{bucket}/raw", f"s3://{bucket}/out", endpoint, **retention)


def s3_dataset(bucket: str, endpoint: str, storage) -> Location:
    root = Location.from_uri(f"s3://{bucket}/out", storage) / NAME
    (Location.from_uri(f"s3://{bucket}/raw", storage) / "a.jsonl").write_bytes(b"{}\n")
    ds = Dataset(root, time.time())  # S3 keeps its own LastModified: ages come from the clock
    ds.work(0)
    for v in (V[0], V[1], V[3]):
        ds.version(v, 0)
    ds.version(V[2], 0, committed=False)
    ds.version(V[4], 0, committed=False)
    return root


def test_s3_apply_deletes_plan_moves_classes_and_counts_real_requests(
    s3_bucket, s3_storage, s3_server
):
    root = s3_dataset(s3_bucket, s3_server, s3_storage)
    rules = {
        "versions": {
            "keep_newest": 2,
            "transitions": [{"after_days": 10, "storage_class": "STANDARD_IA"}],
        }
    }
    with recorded_requests(s3_server) as proxy:  # the plan holds the endpoint it was made with
        cfg = retention_config_s3(s3_bucket, proxy.endpoint, rules=rules)
        later = time.time() + 20 * DAY  # everything is 20 days old
        before = keys(root)
        plan = plan_retention(cfg, now=later)
        assert planned(plan) == expected_deletes()
        live = {
            f"{v}/{n}"
            for v in (V[1], V[3])
            for n in ("shard-00000.bin", "shard-00000.idx", "manifest.json")
        }
        assert planned(plan, "transition") == live
        assert keys(root) == before
        proxy.requests.clear()
        counts0 = IO.snapshot()
        audit = apply_plan(plan, cfg)
        counts = IO.delta(IO.snapshot(), counts0)
        requests = list(proxy.requests)
    assert sum(e["status"] == "done" for e in audit) == len(expected_deletes()) + len(live)
    after = keys(root)
    assert {k for k in before - after} == expected_deletes()
    assert committed_versions(root) == [V[1], V[3]]
    listing = root.fs.find(root.path, detail=True)
    for key in live:
        assert listing[f"{root.path}/{key}"]["StorageClass"] == "STANDARD_IA"
    # counters are what crossed the wire (the proxy's record), by type
    by_method = {m: sum(1 for x, _ in requests if x == m) for m in ("GET", "PUT", "DELETE")}
    bulk_deletes = sum(1 for x, url in requests if x == "POST" and url.endswith("?delete"))
    assert counts.get("copy_requests", 0) == len(live)
    assert counts.get("delete_requests", 0) == by_method["DELETE"] + bulk_deletes
    # one DELETE per object, and one for the lease that apply held while deleting work files
    assert counts["delete_requests"] == len(expected_deletes()) + 1
    assert counts.get("get_requests", 0) + counts.get("list_requests", 0) == by_method["GET"]
    # rerun: a no-op; the ledger keeps the age the copy reset
    again = plan_retention(retention_config_s3(s3_bucket, s3_server, rules=rules), now=later)
    assert again.actions == []
    moved = next(d for d in again.decisions if d.obj.key == f"{V[3]}/manifest.json")
    first = next(d for d in plan.decisions if d.obj.key == f"{V[3]}/manifest.json")
    assert moved.obj.storage_class == "STANDARD_IA" and moved.obj.born == first.obj.mtime


def test_s3_lifecycle_export_is_accepted_by_the_server(s3_bucket, s3_storage, s3_server):
    s3_dataset(s3_bucket, s3_server, s3_storage)
    cfg = retention_config_s3(
        s3_bucket,
        s3_server,
        rules={
            "versions": {
                "keep_newest": 3,
                "transitions": [{"after_days": 30, "storage_class": "STANDARD_IA"}],
            },
            "raw": {"transitions": [{"after_days": 60, "storage_class": "GLACIER"}]},
            "reports": {"delete_after_days": 90},
        },
    )
    exported = export_lifecycle(plan_retention(cfg), cfg.retention.rules)
    rules = exported["buckets"][s3_bucket]["Rules"]
    by_prefix = {rule_prefix(r): r for r in rules}
    assert by_prefix["out/ds/_work/tokens/"]["Expiration"] == {"Days": 14}
    assert by_prefix["out/ds/_work/runs/r1/near/"]["Expiration"] == {"Days": 14}
    assert by_prefix["raw/"]["Transitions"] == [{"Days": 60, "StorageClass": "GLACIER"}]
    assert by_prefix["out/ds/_reports/"]["Expiration"] == {"Days": 90}
    for v in (V[0], V[1], V[3]):
        assert by_prefix[f"out/ds/{v}/"]["Transitions"] == [
            {"Days": 30, "StorageClass": "STANDARD_IA"}
        ]
        assert "Expiration" not in by_prefix[f"out/ds/{v}/"]
    assert "AbortIncompleteMultipartUpload" in by_prefix["out/ds/"]
    missing = {m["class"] for m in exported["not_expressible"]}
    assert {"versions", "read_docs", "exact_hashes", "uncommitted_versions"} <= missing
    client = boto3.client("s3", endpoint_url=s3_server)
    client.put_bucket_lifecycle_configuration(
        Bucket=s3_bucket, LifecycleConfiguration=exported["buckets"][s3_bucket]
    )
    stored = client.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    assert len(stored) == len(rules)


def test_near_dedup_band_files_are_classed_with_the_signatures():
    from pipeline.retention.decide import classify

    for name in ("u0.sig-abc.parquet", "u0.bands-abc.bin"):
        assert classify("out", f"_work/units/k1/{name}")[0] == "near_dedup"  # recomputable
    assert classify("out", "_work/units/k1/u0.docs.parquet")[0] == "read_docs"

"""Retention with named sources (issue 14 follow-up, issue 16's guarantee for every source): the
raw rule reaches the files runs read from every source, under each source's own root (sources
sharing a folder share one root), never a file no run read; the lifecycle export has one raw
rule per distinct root, each refused on its own. Local and SeaweedFS S3."""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import boto3
import support
import yaml
from support import TOKENIZER

from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.formats.verify import verify_version
from pipeline.retention.apply import apply_plan
from pipeline.retention.decide import DAY
from pipeline.retention.lifecycle import export_lifecycle, rule_prefix
from pipeline.retention.plan import format_plan, plan_retention
from pipeline.run.driver import run_pipeline

RAW_30 = "retention.rules.raw.delete_after_days=30"


jsonl = partial(support.jsonl, words="words number", repeat=10)


def write_config(path: Path, sources: list[dict], output_uri: str, *sets: str):
    raw = {
        "name": "mix",
        "inputs": sources,
        "output": {"uri": output_uri},
        "ingest": {"unit_bytes": "64KiB"},
        "dedup": {"partitions": 2},
        "tokenize": {"tokenizer": str(TOKENIZER)},
        "pack": {"shard_bytes": "64KiB"},
    }
    path.write_text(yaml.safe_dump(raw))
    return load_config(path, overrides=list(sets))


def raw_deletes(plan) -> set[tuple[str, str]]:
    return {(d.obj.root, d.obj.key) for d in plan.actions if d.data_class == "raw"}


# Two roots of their own (alpha, beta) and one shared by two sources with different globs
# (gamma, delta). Each root also holds files no run reads, one of them with the same relative
# path as a file another source read under its own root.
READ = {
    "a": {"a.jsonl": jsonl("a", 30)},
    "b": {"b1.jsonl": jsonl("b", 30)},
    "s": {"g/1.jsonl": jsonl("g", 30), "d/1.jsonl": jsonl("d", 30)},
}
FOREIGN = {
    "a": {"README.md": b"# a\n", "b1.jsonl.bak/x.txt": b"kept"},
    "b": {"a.jsonl": jsonl("not-read", 5), "notes.txt": b"beta notes"},
    "s": {"x/1.jsonl": jsonl("x", 5), "g.txt": b"top level"},
}


def sources(roots: dict[str, str]) -> list[dict]:
    return [
        {"name": "alpha", "uri": roots["a"], "include": ["*.jsonl"]},
        {"name": "beta", "uri": roots["b"], "include": ["b*.jsonl"]},
        {"name": "gamma", "uri": roots["s"], "include": ["g/**"]},
        {"name": "delta", "uri": roots["s"], "include": ["d/**"]},
    ]


EXPECTED = {
    ("raw", "a.jsonl"),
    ("raw.1", "b1.jsonl"),
    ("raw.2", "g/1.jsonl"),
    ("raw.2", "d/1.jsonl"),
}


def test_raw_rule_reaches_every_source_and_only_what_was_read_local(ray_local, tmp_path):
    roots = {k: tmp_path / f"root-{k}" for k in READ}
    for k, root in roots.items():
        for rel, blob in {**READ[k], **FOREIGN[k]}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(blob)
    old = time.time() - 60 * DAY  # old when read: a later utime would be a change (mtime)
    for root in roots.values():
        for path in root.rglob("*"):
            if path.is_file():
                os.utime(path, (old, old))
    uris = {k: str(p) for k, p in roots.items()}
    out = str(tmp_path / "out")
    cfg = write_config(tmp_path / "mix.yaml", sources(uris), out)
    result = run_pipeline(cfg, show_progress=False)
    verify_version(result.version)
    cfg = write_config(tmp_path / "mix.yaml", sources(uris), out, RAW_30)

    plan = plan_retention(cfg)
    assert [(r.name, r.location.uri, r.sources) for r in plan.raw_roots] == [
        ("raw", uris["a"], ["alpha"]),
        ("raw.1", uris["b"], ["beta"]),
        ("raw.2", uris["s"], ["gamma", "delta"]),
    ]
    assert raw_deletes(plan) == EXPECTED
    foreign = {r.name: set(r.foreign) for r in plan.raw_roots}
    assert foreign == {
        "raw": set(FOREIGN["a"]),
        "raw.1": set(FOREIGN["b"]),
        "raw.2": set(FOREIGN["s"]),
    }
    text = format_plan(plan)
    assert "raw.1:b1.jsonl" in text and "raw roots: raw = " in text

    # an input manifest from before named sources (no `origin`): its rows are the first source's
    dataset = plan.dataset
    [inputs] = [
        d.obj.key
        for d in plan.decisions
        if d.obj.root == "dataset" and d.obj.key.endswith("/inputs.parquet")
    ]
    table = (dataset / inputs).read_parquet()
    (dataset / inputs).write_parquet(table.drop_columns(["origin", "root"]))
    try:
        assert raw_deletes(plan_retention(cfg)) == {("raw", "a.jsonl")}
    finally:
        (dataset / inputs).write_parquet(table)

    audit = apply_plan(plan, cfg)
    done = {
        (e["root"], e["key"]) for e in audit if e["status"] == "done" and e["data_class"] == "raw"
    }
    assert done == EXPECTED
    by_key = {(e["root"], e["key"]): e["uri"] for e in audit}
    assert by_key[("raw.2", "d/1.jsonl")] == f"{uris['s']}/d/1.jsonl"
    for k, root in roots.items():
        assert not any((root / rel).exists() for rel in READ[k]), k
        assert all((root / rel).exists() for rel in FOREIGN[k]), k
    verify_version(result.version)
    assert raw_deletes(plan_retention(cfg)) == set()  # applying again changes nothing


def test_lifecycle_export_has_one_raw_rule_per_root_on_s3(
    ray_local, s3_server, s3_bucket, s3_storage, s3_upload, tmp_path
):
    b = s3_bucket
    s3_upload({"src1/a.jsonl": jsonl("a", 30), "src2/b.jsonl": jsonl("b", 30)})
    srcs = [
        {"name": "one", "uri": f"s3://{b}/src1"},
        {"name": "two", "uri": f"s3://{b}/src2"},
    ]
    sets = (f"storage.endpoint_url={s3_server}", RAW_30)
    cfg = write_config(tmp_path / "s3.yaml", srcs, f"s3://{b}/out", *sets)
    result = run_pipeline(cfg, show_progress=False)
    plan = plan_retention(cfg, now=time.time() + 60 * DAY)
    assert raw_deletes(plan) == {("raw", "a.jsonl"), ("raw.1", "b.jsonl")}
    exported = export_lifecycle(plan, cfg.retention.rules)
    raw_rules = [r for r in exported["buckets"][b]["Rules"] if r["ID"].startswith("raw:")]
    assert sorted(rule_prefix(r) for r in raw_rules) == ["src1/", "src2/"]
    assert all(r["Expiration"] == {"Days": 30} for r in raw_rules)
    assert not [m for m in exported["not_expressible"] if m["class"] == "raw"]
    client = boto3.client("s3", endpoint_url=s3_server)
    client.put_bucket_lifecycle_configuration(
        Bucket=b, LifecycleConfiguration=exported["buckets"][b]
    )
    # a file no run read beside the second source's data: only that root's rule is refused
    s3_upload({"src2/README.md": b"x"})
    plan = plan_retention(cfg, now=time.time() + 60 * DAY)
    exported = export_lifecycle(plan, cfg.retention.rules)
    raw_rules = [r for r in exported["buckets"][b]["Rules"] if r["ID"].startswith("raw:")]
    assert [rule_prefix(r) for r in raw_rules] == ["src1/"]
    [refused] = [m for m in exported["not_expressible"] if m["class"] == "raw"]
    assert "prefix 'src2/' also covers 1 objects" in refused["reason"]
    assert "README.md" in refused["reason"]
    # and retain --apply deletes exactly the read files of both sources
    apply_plan(plan, cfg)
    root = Location.from_uri(f"s3://{b}", s3_storage)
    root.fs.invalidate_cache()
    assert not (root / "src1/a.jsonl").exists() and not (root / "src2/b.jsonl").exists()
    assert (root / "src2/README.md").exists()
    verify_version(Location.from_uri(result.version.uri, s3_storage))


def test_nested_roots_plan_each_object_once_under_the_root_it_was_read_from(ray_local, tmp_path):
    outer = tmp_path / "outer"
    files = {
        "keep/a.jsonl": jsonl("a", 20),  # read by `outer`
        "in/b.jsonl": jsonl("b", 20),  # read by `inner` (outer's globs leave it out)
        "in/notes.txt.bak": b"nobody reads this",  # unsupported: no source reads it
    }
    for rel, blob in files.items():
        (outer / rel).parent.mkdir(parents=True, exist_ok=True)
        (outer / rel).write_bytes(blob)
    srcs = [
        {"name": "outer", "uri": str(outer), "include": ["keep/*.jsonl"]},
        {"name": "inner", "uri": str(outer / "in")},
    ]
    out = str(tmp_path / "out")
    result = run_pipeline(write_config(tmp_path / "n.yaml", srcs, out), show_progress=False)
    cfg = write_config(tmp_path / "n.yaml", srcs, out, RAW_30)
    plan = plan_retention(cfg, now=time.time() + 60 * DAY)
    assert raw_deletes(plan) == {("raw", "keep/a.jsonl"), ("raw.1", "b.jsonl")}
    assert {r.name: r.foreign for r in plan.raw_roots} == {
        "raw": ["in/notes.txt.bak"],
        "raw.1": ["notes.txt.bak"],
    }
    apply_plan(plan, cfg)
    assert sorted(p.relative_to(outer).as_posix() for p in outer.rglob("*") if p.is_file()) == [
        "in/notes.txt.bak"
    ]
    verify_version(result.version)


def test_a_moved_source_never_makes_its_new_folder_deletable(ray_local, tmp_path):
    """A run read old/a.jsonl; the config now points the source at new/, which holds a file of
    the same name that no run read: the raw rule must not reach it."""
    old_root, new_root = tmp_path / "old", tmp_path / "new"
    for root in (old_root, new_root):
        root.mkdir()
        (root / "a.jsonl").write_bytes(jsonl(root.name, 20))
    old = time.time() - 60 * DAY  # old when read: a later utime would be a change (mtime)
    for root in (old_root, new_root):
        os.utime(root / "a.jsonl", (old, old))
    out = str(tmp_path / "out")
    cfg = write_config(tmp_path / "mix.yaml", [{"name": "web", "uri": str(old_root)}], out)
    verify_version(run_pipeline(cfg, show_progress=False).version)
    moved = write_config(
        tmp_path / "mix.yaml", [{"name": "web", "uri": str(new_root)}], out, RAW_30
    )
    plan = plan_retention(moved)
    assert raw_deletes(plan) == set()
    assert [r.foreign for r in plan.raw_roots] == [["a.jsonl"]]
    # pointed back at the folder it read, the rule reaches the file again
    back = write_config(
        tmp_path / "mix.yaml", [{"name": "web", "uri": str(old_root)}], out, RAW_30
    )
    assert raw_deletes(plan_retention(back)) == {("raw", "a.jsonl")}

"""Raw retention compares a local file's content where it can: a same-size rewrite given back its
old mtime (`cp -p`, `rsync -t`) is kept when it changed the first or last 64 KiB, and a change
only between them is not seen (docs/retention.md says so). A record from a listing without the
hash (an older run) keeps the file. The run's record is the run's own listing (list_units, as
the read stage writes it), so no pipeline run is needed to prove it."""

from __future__ import annotations

import os
import time
from functools import partial

import pyarrow.parquet as pq
import support
from support import SAMPLE_CONFIG

from pipeline.config.loader import load_config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.ingest.local_listing import HEAD_TAIL_BYTES
from pipeline.retention.apply import apply_plan
from pipeline.retention.decide import DAY
from pipeline.retention.plan import format_plan, plan_retention
from pipeline.run.read_tasks import list_units

jsonl = partial(support.jsonl, words="text number", repeat=20)
SMALL = {n: jsonl(n, n=40) for n in ("untouched", "restored")}  # each under 128 KiB
LARGE = {n: jsonl(n, n=1000) for n in ("middle", "tail")}  # each over 3 x 64 KiB


def rewrite_keeping_mtime(path, offset: int) -> None:
    """Same size, one word upper-cased at or after `offset`, the old mtime put back (cp -p)."""
    stat = path.stat()
    blob = path.read_bytes()
    at = blob.index(b"number", offset)
    path.write_bytes(blob[:at] + b"NUMBER" + blob[at + 6 :])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime == stat.st_mtime and path.stat().st_size == stat.st_size


def raw_deletes(plan) -> set[str]:
    return {d.obj.key for d in plan.actions if d.obj.root == "raw" and d.action == "delete"}


def test_rewrite_with_restored_mtime_is_kept(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    for name, blob in {**SMALL, **LARGE}.items():
        (data / f"{name}.jsonl").write_bytes(blob)
    assert min(len(b) for b in LARGE.values()) > 3 * HEAD_TAIL_BYTES
    cfg = load_config(
        SAMPLE_CONFIG,
        input_uri=str(data),
        output_uri=str(tmp_path / "out"),
        overrides=["retention.rules.raw.delete_after_days=0"],
    )
    inputs = RunLayout.for_config(cfg, "run-1").inputs  # what a run records before reading
    inputs.write_parquet(list_units(Location.from_uri(str(data)), cfg).inputs)
    rewrite_keeping_mtime(data / "restored.jsonl", 0)
    rewrite_keeping_mtime(data / "middle.jsonl", HEAD_TAIL_BYTES + 1)
    assert (data / "middle.jsonl").read_bytes().index(b"NUMBER") < 2 * HEAD_TAIL_BYTES
    rewrite_keeping_mtime(data / "tail.jsonl", len(LARGE["tail"]) - HEAD_TAIL_BYTES // 2)
    later = time.time() + DAY

    # a listing without the hash (a run before it was recorded): nothing is deleted
    recorded = inputs.read_bytes()
    pq.write_table(inputs.read_parquet().drop_columns(["head_tail_xxh3"]), inputs.path)
    old = plan_retention(cfg, now=later)
    assert raw_deletes(old) == set()
    assert old.raw_roots[0].changed["untouched.jsonl"] == (
        "not comparable: listed without head_tail_xxh3 (a run before it was recorded)"
    )
    inputs.write_bytes(recorded)

    plan = plan_retention(cfg, now=later)
    assert raw_deletes(plan) == {"untouched.jsonl", "middle.jsonl"}  # middle: documented miss
    changed = plan.raw_roots[0].changed
    assert sorted(changed) == ["restored.jsonl", "tail.jsonl"]
    content = "changed since read: first or last 64 KiB"
    assert all(why.startswith(content) for why in changed.values())
    printed = format_plan(plan)
    assert "raw:restored.jsonl: changed since read: first or last 64 KiB" in printed
    apply_plan(plan, cfg)
    assert sorted(p.name for p in data.iterdir()) == ["restored.jsonl", "tail.jsonl"]

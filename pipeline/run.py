"""The thin Ray layer: run each stage's tasks, show progress, check the accounting, commit.

The driver only moves metadata (the listing, work units, per-task counts); documents go from
storage to tasks and back to storage.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import ray
import xxhash
from tqdm import tqdm

from pipeline import stages
from pipeline.config import Config
from pipeline.layout import RunLayout, new_version_id
from pipeline.manifest import FORMAT, commit_manifest
from pipeline.pack import shard_count
from pipeline.storage import Location
from pipeline.tokenize import load_tokenizer


class RunError(Exception):
    """The run stopped on purpose (too many bad records, broken accounting); nothing committed."""

    exit_code = 3


@dataclass
class StageReport:
    name: str
    docs: int = 0
    bytes: int = 0
    seconds: float = 0.0
    tasks: int = 0


@dataclass
class RunResult:
    version: Location
    manifest: dict[str, Any]
    stages: list[StageReport] = field(default_factory=list)


def ensure_ray(cfg: Config) -> None:
    if ray.is_initialized():
        return
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=cfg.ray.num_cpus, include_dashboard=False,
                 logging_level=logging.WARNING, log_to_driver=True)


def _gather(name: str, futures: list, show: bool) -> list[dict]:
    """Wait for a stage's tasks with a progress bar; results keep the submission order."""
    results: dict = {}
    pending = list(futures)
    with tqdm(total=len(futures), desc=f"{name:>9}", unit="task", disable=not show,
              file=sys.stderr, leave=True) as bar:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            results[ready[0]] = ray.get(ready[0])
            bar.update(1)
    return [results[f] for f in futures]


def _table_digest(table: pa.Table) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(table.to_pylist(), sort_keys=True).encode())


def run_pipeline(cfg: Config, show_progress: bool = True) -> RunResult:
    ensure_ray(cfg)
    started = dt.datetime.now(dt.timezone.utc)
    remote = {name: ray.remote(getattr(stages, name)) for name in (
        "list_stage", "read_unit", "exact_partition", "merge_audit", "tokenize_unit",
        "pack_shard")}
    input_root = Location.from_uri(cfg.input.uri, cfg.storage)
    dataset = Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name
    reports: list[StageReport] = []

    t0 = time.perf_counter()
    inputs, units, listed = ray.get(remote["list_stage"].remote(input_root, cfg))
    input_digest = _table_digest(inputs)
    run_id = xxhash.xxh3_64_hexdigest(f"{cfg.output_hash()}:{input_digest}".encode())
    layout = RunLayout(dataset, run_id)
    layout.inputs.write_parquet(inputs)
    layout.units.write_parquet(units)
    reports.append(StageReport("list", listed["files"], listed["bytes"],
                               time.perf_counter() - t0, 1))

    unit_ids = sorted(set(units["unit_id"].to_pylist()))
    pieces: dict[str, list[dict]] = {u: [] for u in unit_ids}
    for piece in units.to_pylist():
        pieces[piece["unit_id"]].append(piece)

    t0 = time.perf_counter()
    read = _gather("read", [remote["read_unit"].remote(layout, input_root, u, pieces[u], cfg)
                            for u in unit_ids], show_progress)
    docs_in = sum(r["docs_in"] for r in read)
    quarantined = Counter()
    for r in read:
        quarantined.update(r["quarantined"])
    reports.append(StageReport("read+hash", docs_in, sum(r["io"].get("bytes_read", 0) for r in read),
                               time.perf_counter() - t0, len(read)))

    t0 = time.perf_counter()
    parts = cfg.dedup.partitions
    exact_results = _gather("exact", [remote["exact_partition"].remote(layout, p)
                                      for p in range(parts)], show_progress)
    audit = ray.get(remote["merge_audit"].remote(layout, parts, unit_ids))
    reports.append(StageReport("dedup", sum(r["rows"] for r in exact_results), 0,
                               time.perf_counter() - t0, len(exact_results) + 1))

    n_bad = sum(quarantined.values())
    if docs_in and n_bad / docs_in > cfg.ingest.max_error_rate:
        raise RunError(
            f"{n_bad} of {docs_in} records ({n_bad / docs_in:.2%}) were quarantined, more than"
            f" ingest.max_error_rate = {cfg.ingest.max_error_rate:.2%}; reasons:"
            f" {dict(quarantined)}; listing: {layout.quarantine.uri}. Nothing was committed.")

    t0 = time.perf_counter()
    tokenized = _gather("tokenize", [remote["tokenize_unit"].remote(layout, u, cfg)
                                     for u in unit_ids], show_progress)
    total_tokens = sum(r["tokens"] for r in tokenized)
    docs_out = sum(r["docs"] for r in tokenized)
    reports.append(StageReport("tokenize", docs_out, 0, time.perf_counter() - t0, len(tokenized)))

    _, tok_info = load_tokenizer(cfg.tokenize.tokenizer, cfg.tokenize.eos)
    itemsize = 2 if tok_info.dtype == "uint16" else 4
    shards = shard_count(total_tokens * itemsize, int(cfg.pack.shard_bytes))
    version_id = new_version_id(run_id)
    version = layout.version(version_id)
    live_units = [r["unit"] for r in tokenized if r["docs"]]
    t0 = time.perf_counter()
    packed = _gather("pack", [remote["pack_shard"].remote(layout, version, k, shards, live_units,
                                                          tok_info.dtype)
                              for k in range(shards)], show_progress)
    reports.append(StageReport("pack", sum(s["documents"] for s in packed),
                               sum(s["bin_bytes"] + s["idx_bytes"] for s in packed),
                               time.perf_counter() - t0, len(packed)))

    counts = {
        "docs_in": docs_in,
        "docs_out": sum(s["documents"] for s in packed),
        "removed_exact": audit["removed_exact"],
        "removed_near": audit["removed_near"],
        "quarantined": n_bad,
        "tokens": sum(s["tokens"] for s in packed),
        "quarantined_by_reason": dict(sorted(quarantined.items())),
    }
    accounted = (counts["docs_out"] + counts["removed_exact"] + counts["removed_near"]
                 + counts["quarantined"])
    if accounted != docs_in or counts["docs_out"] != docs_out:
        raise RunError(f"accounting does not balance: docs_in {docs_in} != out + removed +"
                       f" quarantined = {accounted}; nothing was committed")

    shard_keys = ("bin", "idx", "bin_bytes", "idx_bytes", "tokens", "documents",
                  "bin_xxh3_128", "idx_xxh3_128")
    manifest = {
        "format": FORMAT,
        "name": cfg.name,
        "version": version_id,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "config": cfg.model_dump(mode="json", exclude={"input": {"uri"}, "output": True,
                                                       "storage": True, "ray": True,
                                                       "tokenize": {"tokenizer"}}),
        "config_hash": cfg.output_hash(),
        "tokenizer": tok_info.as_dict(),
        "counts": counts,
        "lineage": {
            "input_manifest": layout.inputs.relative_to(dataset),
            "input_manifest_xxh3_128": input_digest,
            "units": layout.units.relative_to(dataset),
            "removed": layout.removed.relative_to(dataset),
            "quarantine": layout.quarantine.relative_to(dataset),
        },
        "shards": [{k: s[k] for k in shard_keys} for s in packed],
        "run": {"run_id": run_id, "input_uri": input_root.uri, "output_uri": dataset.uri,
                "started_at": started.isoformat(), "skipped_files": listed["skipped"]},
    }
    commit_manifest(version, manifest)
    return RunResult(version, manifest, reports)

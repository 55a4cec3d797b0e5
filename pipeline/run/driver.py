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

from pipeline.config import Config
from pipeline.core.layout import RunLayout, new_version_id
from pipeline.core.lease import held
from pipeline.core.storage import Location
from pipeline.dedup import components
from pipeline.formats.manifest import (
    ManifestError,
    build_manifest,
    commit_manifest,
    documents_accounted,
    load_manifest,
    table_digest,
)
from pipeline.run import neardup
from pipeline.run import tasks as stages
from pipeline.run.tokenize_stage import tokenize_stage
from pipeline.tokens.encode import load_tokenizer, token_id
from pipeline.tokens.pack import pack_plan, shard_sections


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
    reused: int = 0
    peak_rss_mb: float = 0.0


@dataclass
class RunResult:
    version: Location
    manifest: dict[str, Any]
    stages: list[StageReport] = field(default_factory=list)
    already_committed: bool = False
    retention_actions: int | None = None
    reports: list[str] = field(default_factory=list)


# Parallelism comes from tasks (one CPU each), so library thread pools inside a task stay at one
# thread; otherwise every tokenizer task would start a pool as wide as the machine.
WORKER_ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


class _LocalAuthNotice(logging.Filter):
    """Drops one Ray notice: that a new local instance turned token authentication on, which it
    does by default and a local user can do nothing about. Every other record of that logger
    (such as the warning that authentication is off) and of every other logger passes.

    (Setting RAY_AUTH_MODE=token instead would need Ray's cached config reloaded: ray is already
    imported, and a driver that sees the variable only later fails to reach its own GCS.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_AUTH_NOTICE)


_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"
_LOCAL_AUTH_NOTICE = _LocalAuthNotice()


def worker_runtime_env() -> dict | None:
    """The runtime env ray.init adds for the tasks: WORKER_ENV minus what the job already sets.

    Inside a Ray job (`ray job submit --runtime-env ...`) Ray merges the job's runtime env with
    ray.init's and refuses any env var key set in both, even with equal values; so keys the job
    sets are left to the job (its value wins) and only the others are added."""
    job_env: dict = {}
    # Ray hands a job's driver its JobConfig (runtime env included) in this variable.
    if job_json := os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        job_env = (json.loads(job_json).get("runtime_env") or {}).get("env_vars") or {}
    env_vars = {k: v for k, v in WORKER_ENV.items() if k not in job_env}
    return {"env_vars": env_vars} if env_vars else None


def ensure_ray(cfg: Config) -> None:
    if ray.is_initialized():
        return
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    runtime_env = worker_runtime_env()
    if address:
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=runtime_env)
    else:
        logging.getLogger(_AUTH_LOGGER).addFilter(_LOCAL_AUTH_NOTICE)
        ray.init(  # address="local": never join a cluster some other process started here
            address="local",
            num_cpus=cfg.ray.num_cpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=True,
            runtime_env=runtime_env,
        )


def _gather(name: str, futures: list, show: bool, tick=None) -> list[dict]:
    """Wait for a stage's tasks with a progress bar; results keep the submission order.

    `tick` is called at least every few seconds while waiting (the driver renews its lease)."""
    results: dict = {}
    pending = list(futures)
    with tqdm(
        total=len(futures),
        desc=f"{name:>9}",
        unit="task",
        disable=not show,
        file=sys.stderr,
        leave=True,
    ) as bar:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=5.0)
            if tick is not None:
                tick()
            for ref in ready:
                results[ref] = ray.get(ref)
                bar.update(1)
    return [results[f] for f in futures]


def _table_digest(table: pa.Table) -> str:
    return table_digest(table)  # verify recomputes it from the lineage


class _Driver:
    """One run: the stages in order, each a batch of Ray tasks, with its report."""

    def __init__(self, cfg: Config, show_progress: bool) -> None:
        self.cfg, self.show = cfg, show_progress
        self.remote = {
            name: ray.remote(getattr(module, name))
            for module, names in (
                (
                    stages,
                    (
                        "list_stage",
                        "read_unit",
                        "merge_quarantine",
                        "exact_partition",
                        "merge_exact",
                        "merge_audit",
                        "tokenize_probe",
                        "tokenize_unit_task",
                        "exchange_bucket",
                        "pack_shard",
                    ),
                ),
                (
                    neardup,
                    (
                        "near_signatures",
                        "near_buckets",
                        "near_attach",
                        "near_verify",
                        "star_task",
                        "members_task",
                        "near_keep",
                    ),
                ),
            )
            for name in names
        }
        self.reports: list[StageReport] = []
        self.task_stats: list[dict] = []
        self.lease = None  # held while stages run: renewed well before it expires

    def keep_lease(self) -> None:
        if self.lease is not None:
            self.lease.renew_if_due()

    def stage(self, name: str, futures: list, merge: bool = False) -> list[dict]:
        """Run one wave of tasks; with merge, count it into the previous report of that name."""
        t0 = time.perf_counter()
        results = _gather(name, futures, self.show, tick=self.keep_lease)
        io: Counter = Counter()
        for r in results:
            io.update(r.get("io", {}))
        if merge and self.reports and self.reports[-1].name == name:
            report, stats = self.reports[-1], self.task_stats[-1]
        else:
            report, stats = (
                StageReport(name),
                {"stage": name, "tasks": 0, "reused": 0, "seconds": 0.0, "io": {}},
            )
            self.reports.append(report)
            self.task_stats.append(stats)
        report.tasks += len(results)
        report.seconds += time.perf_counter() - t0
        report.reused += sum(1 for r in results if r.get("reused"))
        report.bytes += io.get("bytes_read", 0)
        report.peak_rss_mb = max(
            [report.peak_rss_mb] + [r.get("peak_rss_mb", 0.0) for r in results]
        )
        stats.update(
            tasks=report.tasks,
            reused=report.reused,
            seconds=report.seconds,
            io=dict(Counter(stats["io"]) + io),
            peak_rss_mb=report.peak_rss_mb,
        )
        return results


def run_pipeline(cfg: Config, show_progress: bool = True) -> RunResult:
    ensure_ray(cfg)
    started = dt.datetime.now(dt.timezone.utc)
    drv = _Driver(cfg, show_progress)
    input_root = Location.from_uri(cfg.input.uri, cfg.storage)

    [listed] = drv.stage("list", [drv.remote["list_stage"].remote(input_root, cfg)])
    inputs, units = listed["inputs"], listed["units"]
    cfg = drv.cfg = cfg.for_listing(listed["bytes"])  # partitions from the listed bytes
    drv.reports[-1].docs, drv.reports[-1].bytes = listed["files"], listed["bytes"]
    input_digest = _table_digest(inputs)
    run_id = xxhash.xxh3_64_hexdigest(f"{cfg.output_hash()}:{input_digest}".encode())
    layout = RunLayout.for_config(cfg, run_id)
    already = _already_committed(layout)
    if already is not None:
        return already
    with held(layout.lease, run_id) as lease:
        drv.lease = lease
        layout.inputs.write_parquet(inputs)
        layout.units.write_parquet(units)
        layout.skipped.write_parquet(listed["skipped"])
        result = _run_stages(drv, cfg, layout, input_root, units, listed, input_digest, started)
        layout.committed.write_bytes(json.dumps({"version": result.version.name}).encode())
    _after_commit(cfg, layout.dataset, result)
    return result


def _after_commit(cfg: Config, dataset: Location, result: RunResult) -> None:
    """Retention (when configured) and the cost report, once the version is committed and the
    lease released (retention takes the lease itself). A failure here is reported, not raised:
    the version is already complete."""
    from pipeline.report.build import build_report, write_report
    from pipeline.retention.apply import apply_plan, plan_retention

    try:
        plan = plan_retention(cfg)
        if cfg.retention.apply_after_run:
            result.retention_actions = len(apply_plan(plan, cfg))
            plan = plan_retention(cfg)
        result.reports = [loc.uri for loc in write_report(build_report(cfg, plan), dataset)]
    except Exception as e:  # noqa: BLE001 - the commit stands; say what failed
        print(f"warning: retention/cost report after the commit failed: {e!r}", file=sys.stderr)


def _near_dedup(drv: _Driver, cfg: Config, layout: RunLayout, unit_ids: list[str]) -> None:
    """MinHash LSH over the exact-deduplicated documents (see run/neardup.py for the steps)."""
    remote, n = drv.remote, cfg.dedup.partitions
    signed = drv.stage("near", [remote["near_signatures"].remote(layout, u, cfg) for u in unit_ids])
    drv.reports[-1].docs = sum(r["docs"] for r in signed)
    sig_units = {q: [r["unit"] for r in signed if q in r["sig_parts"]] for q in range(n)}
    band_units = {p: [r["unit"] for r in signed if p in r["band_parts"]] for p in range(n)}
    buckets = drv.stage(
        "near",
        [remote["near_buckets"].remote(layout, p, band_units[p], n) for p in range(n)],
        merge=True,
    )
    sources = {q: [r["part"] for r in buckets if q in r["parts"]] for q in range(n)}
    attached = drv.stage(
        "near",
        [remote["near_attach"].remote(layout, q, sources[q], sig_units[q], cfg) for q in range(n)],
        merge=True,
    )
    sources = {q: [r["part"] for r in attached if q in r["parts"]] for q in range(n)}
    verify = [
        remote["near_verify"]
        .options(num_returns=n + 1)
        .remote(layout, q, sources[q], sig_units[q], cfg)
        for q in range(n)
    ]
    drv.stage("near", [refs[0] for refs in verify], merge=True)
    # components: alternate large/small star rounds until a large round changes nothing; the
    # edge pieces go task to task through the object store, the driver sees fingerprints only
    inbox = [[refs[1 + p] for refs in verify] for p in range(n)]
    star, previous = remote["star_task"].options(num_returns=n + 1), None
    while True:
        large = [star.remote("large", n, *inbox[p]) for p in range(n)]
        current = components.combine_fingerprints(ray.get([refs[0] for refs in large]))
        if current == previous:
            break
        previous = current
        small = [star.remote("small", n, *[refs[1 + p] for refs in large]) for p in range(n)]
        inbox = [[refs[1 + p] for refs in small] for p in range(n)]
    members = drv.stage(
        "near",
        [remote["members_task"].remote(layout, q, sig_units[q], cfg, *inbox[q]) for q in range(n)],
        merge=True,
    )
    sources = {lp: [r["part"] for r in members if lp in r["parts"]] for lp in range(n)}
    drv.stage(
        "near",
        [remote["near_keep"].remote(layout, lp, sources[lp], cfg) for lp in range(n)],
        merge=True,
    )


def _already_committed(layout: RunLayout) -> RunResult | None:
    """The same input and config were committed before and that version still exists."""
    try:
        version_id = json.loads(layout.committed.read_bytes())["version"]
        manifest = load_manifest(layout.version(version_id))
    except (FileNotFoundError, ManifestError, KeyError, ValueError):
        return None
    return RunResult(layout.version(version_id), manifest, [], already_committed=True)


def _run_stages(
    drv: _Driver,
    cfg: Config,
    layout: RunLayout,
    input_root: Location,
    units: pa.Table,
    listed: dict,
    input_digest: str,
    started: dt.datetime,
) -> RunResult:
    remote = drv.remote
    unit_ids = sorted(set(units["unit_id"].to_pylist()))
    pieces: dict[str, list[dict]] = {u: [] for u in unit_ids}
    for piece in units.to_pylist():
        pieces[piece["unit_id"]].append(piece)

    read = drv.stage(
        "read+hash",
        [remote["read_unit"].remote(layout, input_root, u, pieces[u], cfg) for u in unit_ids],
    )
    docs_in = sum(r["docs_in"] for r in read)
    drv.reports[-1].docs = docs_in
    quarantined: Counter = Counter()
    writers: dict[int, list[str]] = {p: [] for p in range(cfg.dedup.partitions)}
    for r in read:
        quarantined.update(r["quarantined"])
        for p in r["partitions"]:
            writers[p].append(r["unit"])

    [_] = drv.stage("quarantine", [remote["merge_quarantine"].remote(layout, unit_ids)])
    n_bad = sum(quarantined.values())
    if docs_in and n_bad / docs_in > cfg.ingest.max_error_rate:
        raise RunError(
            f"{n_bad} of {docs_in} records ({n_bad / docs_in:.2%}) were quarantined, more than"
            f" ingest.max_error_rate = {cfg.ingest.max_error_rate:.2%}; reasons:"
            f" {dict(quarantined)}; listing: {layout.quarantine.uri}. Nothing was committed."
        )
    # files whose records could not be counted (forbidden, undecodable) count by their bytes
    bad_bytes, listed_bytes = sum(r.get("quarantined_bytes", 0) for r in read), listed["bytes"]
    if listed_bytes and bad_bytes / listed_bytes > cfg.ingest.max_error_rate:
        raise RunError(
            f"{bad_bytes} of {listed_bytes} listed bytes ({bad_bytes / listed_bytes:.2%}) are in"
            " files that could not be read and whose records could not be counted, more than"
            f" ingest.max_error_rate = {cfg.ingest.max_error_rate:.2%}; listing:"
            f" {layout.quarantine.uri}. Nothing was committed."
        )

    parts = cfg.dedup.partitions
    exact_results = drv.stage(
        "exact",
        [
            remote["exact_partition"].remote(layout, p, writers[p], cfg.dedup.exact)
            for p in range(parts)
        ],
    )
    drv.reports[-1].docs = sum(r["rows"] for r in exact_results)
    drv.stage("exact", [remote["merge_exact"].remote(layout, parts)], merge=True)
    if cfg.dedup.near.enabled:
        _near_dedup(drv, cfg, layout, unit_ids)
    [audit] = drv.stage(
        "audit", [remote["merge_audit"].remote(layout, cfg.dedup.near.enabled and parts or 0)]
    )

    tokenized, engine = tokenize_stage(drv, cfg, layout, unit_ids)
    total_tokens = sum(r["tokens"] for r in tokenized)
    drv.reports[-1].docs = docs_out = sum(r["docs"] for r in tokenized)

    tokenizer, tok_info = load_tokenizer(cfg.tokenize.tokenizer, cfg.tokenize.eos)
    tok_entry = {
        **tok_info.as_dict(),
        "special_tokens_in_text": cfg.tokenize.special_tokens_in_text,
        "bos": cfg.tokenize.bos,
        "bos_id": token_id(tokenizer, cfg.tokenize.bos),
        **engine,
    }
    itemsize = 2 if tok_info.dtype == "uint16" else 4
    version_id = new_version_id(layout.run_id)
    version = layout.version(version_id)
    live = [(r["unit"], r["removed"]) for r in tokenized if r["docs"]]
    plan = pack_plan(
        total_tokens * itemsize,
        len(live),
        int(cfg.pack.shard_bytes),
        int(cfg.pack.exchange_request_bytes),
    )
    groups = plan.unit_groups(live)
    exchanged = drv.stage(
        "pack",
        [
            remote["exchange_bucket"].remote(layout, plan, g, k, groups[g], tok_info.dtype)
            for g in range(plan.groups)
            for k in range(plan.buckets)
        ],
    )
    sections = shard_sections(plan, exchanged)
    packed = drv.stage(
        "pack",
        [
            remote["pack_shard"].remote(layout, version, plan, k, sections[k], tok_info.dtype)
            for k in range(plan.shards)
        ],
        merge=True,
    )
    drv.reports[-1].docs = sum(s["documents"] for s in packed)
    drv.reports[-1].bytes = sum(s["bin_bytes"] + s["idx_bytes"] for s in packed)

    counts = {
        "docs_in": docs_in,
        "docs_out": sum(s["documents"] for s in packed),
        "removed_exact": audit["removed_exact"],
        "removed_near": audit["removed_near"],
        "quarantined": n_bad,
        "tokens": sum(s["tokens"] for s in packed),
        "quarantined_by_reason": dict(sorted(quarantined.items())),
    }
    accounted = documents_accounted(counts)
    if accounted != docs_in or counts["docs_out"] != docs_out:
        raise RunError(
            f"accounting does not balance: docs_in {docs_in} != out + removed +"
            f" quarantined = {accounted}; nothing was committed"
        )

    manifest = build_manifest(
        cfg,
        layout,
        version_id,
        tok_entry,
        counts,
        packed,
        input_digest,
        run={
            "input_uri": cfg.input.uri,
            "started_at": started.isoformat(),
            "skipped_files": dict(Counter(listed["skipped"]["reason"].to_pylist())),
        },
    )
    layout.stats.write_bytes(
        json.dumps({"run_id": layout.run_id, "stages": drv.task_stats}, indent=1).encode()
    )
    if drv.lease is not None:
        drv.lease.renew()  # fenced: LeaseLost if another run took the dataset over meanwhile
    commit_manifest(version, manifest)
    return RunResult(version, manifest, drv.reports)

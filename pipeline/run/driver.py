"""The thin Ray layer: run each stage's tasks, show progress, check the accounting, commit.

The driver only moves metadata (the listing, work units, per-task counts); documents go from
storage to tasks and back to storage.
"""

from __future__ import annotations

import datetime as dt
import json
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
from pipeline.core.layout import RunLayout
from pipeline.core.lease import held
from pipeline.core.storage import IO, Location
from pipeline.exchange import regroup as exchange
from pipeline.formats import documents
from pipeline.formats.manifest import (
    ManifestError,
    blend_line,
    build_manifest,
    commit_manifest,
    load_manifest,
    table_digest,
)
from pipeline.formats.verify import VerifyError, verify_manifest
from pipeline.ingest.field_probe import probe_fields
from pipeline.ingest.records import SPECIAL_TOKEN_TEXT
from pipeline.run import input_guard, neardup, pack_tasks, tokenize_tasks
from pipeline.run import tasks as read_dedup_tasks  # list, read, exact dedup, audit
from pipeline.run.accounting import bytes_moved, run_counts, shard_entries, source_counts
from pipeline.run.dedup_stage import audit_stage, exact_dedup, near_dedup
from pipeline.run.pack_stage import pack_stage
from pipeline.run.ray_env import ensure_ray
from pipeline.run.results import (
    AuditResult,
    ListResult,
    PackResult,
    ReadResult,
    RunError,
    TaskResult,
    TokenizeResult,
)
from pipeline.run.tokenize_stage import tokenize_stage


@dataclass
class StageReport:
    name: str
    docs: int = 0
    files: int = 0  # input files (the listing's); documents are `docs`
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
    moved: dict[str, Any] = field(default_factory=dict)  # stats.json's bytes moved (accounting)


class StageBars:
    """One progress bar per stage: a stage's later waves (its steps) add their tasks to the
    bar the stage opened, which shows the step; the next stage closes it."""

    def __init__(self, show: bool) -> None:
        self.show = show
        self.bar: tqdm | None = None
        self.steps = 0

    def wave(self, name: str, tasks: int, new_stage: bool) -> tqdm:
        if new_stage or self.bar is None:
            self.close()
            self.bar = tqdm(
                total=tasks,
                desc=f"{name:>10}",
                unit="task",
                disable=not self.show,
                file=sys.stderr,
                leave=True,
            )
            self.steps = 0
        else:
            self.bar.total += tasks
        self.steps += 1
        self.bar.set_postfix_str(f"step {self.steps}", refresh=False)
        self.bar.refresh()
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _gather(futures: list, bar: tqdm, tick=None) -> list:
    """Wait for a wave's tasks, advancing the stage's bar; results keep the submission order.

    `tick` is called at least every few seconds while waiting (the driver renews its lease)."""
    results: dict = {}
    pending = list(futures)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=5.0)
        if tick is not None:
            tick()
        for ref in ready:
            results[ref] = ray.get(ref)
            bar.update(1)
    return [results[f] for f in futures]


_TASKS = (
    (
        read_dedup_tasks,
        (
            "list_units",
            "read_unit",
            "merge_quarantine",
            "exact_partition",
            "merge_exact",
            "merge_audit",
        ),
    ),
    (tokenize_tasks, ("tokenize_probe", "tokenize_unit_task")),
    (pack_tasks, ("exchange_bucket", "pack_shard")),
    (exchange, ("regroup",)),
    (
        neardup,
        (
            "near_band_group",
            "near_buckets",
            "near_fetch",
            "star_task",
            "members_task",
            "near_keep",
        ),
    ),
)


class _Driver:
    """One run: the stages in order, each a batch of Ray tasks, with its report. What the stages
    share (layout, units, the tasks' results the accounting needs) lives on the object."""

    def __init__(self, cfg: Config, show_progress: bool, allow_empty: bool = False) -> None:
        self.cfg, self.allow_empty = cfg, allow_empty
        self.remote = {
            name: ray.remote(getattr(module, name)) for module, names in _TASKS for name in names
        }
        self.reports: list[StageReport] = []
        self.bars = StageBars(show_progress)
        self.task_stats: list[dict] = []
        self.io_mark = IO.snapshot()  # the driver's own I/O is counted from here (own_io)
        self.lease = None  # held while stages run: renewed well before it expires
        self.wave_docs = 0  # documents of the last wave (a redo wave replaces them)
        self.started = dt.datetime.now(dt.timezone.utc)
        self.roots = {s.name: Location.from_uri(s.uri, cfg.storage) for s in cfg.sources}
        self.input_root = self.roots[cfg.sources[0].name]
        self.origin_of: dict[str, str] = {}  # unit id -> its source's name
        # set by the stages as they run
        self.listed: ListResult
        self.layout: RunLayout
        self.input_digest = ""
        self.unit_ids: list[str] = []
        self.read: list[ReadResult] = []
        self.quarantined: Counter = Counter()
        self.audit: AuditResult
        self.tokenized: list[TokenizeResult] = []
        self.engine: dict[str, Any] = {}
        self.packed: list[PackResult] = []
        self.parts: list[tuple[str, str, list[PackResult]]] = []  # (source, split, its shards)
        self.bounds: list[str] = []  # first unit of each removal bucket (sectioned.unit_bounds)
        self.exact_removed: list[list] = []  # per removal bucket: the ranges its merge reads
        self.near_removed: list[list] = []

    def keep_lease(self) -> None:
        if self.lease is not None:
            self.lease.renew_if_due()

    def stage(self, name: str, futures: list, merge: bool = False, redo: bool = False) -> list:
        """Run one wave of tasks; with merge, count it into the previous report of that name.
        Its report adds up the results' own documents and bytes (stage_docs, stage_bytes); a
        redo wave reruns the previous one's work, so its documents replace that wave's."""
        t0 = time.perf_counter()
        if self.task_stats:  # what the driver did after the previous wave belongs to that stage
            self.own_io(self.task_stats[-1])
        report, stats, new_stage = self._report(name, merge)
        bar = self.bars.wave(name, len(futures), new_stage)
        results: list[TaskResult] = _gather(futures, bar, tick=self.keep_lease)
        self.own_io(stats)  # lease renewals while it ran
        io: Counter = Counter()
        for r in results:
            io.update(r.io)
        docs = sum(r.stage_docs for r in results)
        report.docs += docs - (self.wave_docs if redo else 0)
        self.wave_docs = docs
        report.files += sum(r.stage_files for r in results)
        report.bytes += sum(r.stage_bytes for r in results)
        report.tasks += len(results)
        report.seconds += time.perf_counter() - t0
        report.reused += sum(1 for r in results if r.reused)
        report.peak_rss_mb = max([report.peak_rss_mb] + [r.peak_rss_mb for r in results])
        stats.update(
            tasks=report.tasks,
            reused=report.reused,
            seconds=report.seconds,
            io=dict(Counter(stats["io"]) + io),
            peak_rss_mb=report.peak_rss_mb,
        )
        return results

    def own_io(self, stats: dict) -> None:
        """Count the driver's own storage I/O since the last call into a stats.json entry: its
        `driver_io`, and its `io` with the tasks' (the listing records, field probe and lease
        under list; the document index and commit checks under commit)."""
        now = IO.snapshot()
        delta = Counter(IO.delta(now, self.io_mark))
        self.io_mark = now
        stats["driver_io"] = dict(Counter(stats.get("driver_io", {})) + delta)
        stats["io"] = dict(Counter(stats["io"]) + delta)

    def _report(self, name: str, merge: bool) -> tuple[StageReport, dict, bool]:
        """The report and stats.json entry a wave counts into: the last ones, or new ones
        (then True: the wave starts a stage)."""
        if merge and self.reports and self.reports[-1].name == name:
            return self.reports[-1], self.task_stats[-1], False
        report = StageReport(name)
        stats = {"stage": name, "tasks": 0, "reused": 0, "seconds": 0.0, "io": {}}
        self.reports.append(report)
        self.task_stats.append(stats)
        return report, stats, True

    @property
    def docs_in(self) -> int:
        return sum(r.docs_in for r in self.read)

    # -- the stages, in order --------------------------------------------------------------
    def list_inputs(self) -> RunLayout:
        """The listing and its units; the partitions follow the listed bytes, and the run's id
        (its layout) follows the config and the listing."""
        [listed] = self.stage("list", [self.remote["list_units"].remote(self.input_root, self.cfg)])
        self.listed = listed
        self.cfg = cfg = self.cfg.for_listing(listed.listed_bytes)
        self.input_digest = table_digest(listed.inputs)  # verify recomputes it from the lineage
        run_id = xxhash.xxh3_64_hexdigest(f"{cfg.output_hash()}:{self.input_digest}".encode())
        self.layout = RunLayout.for_config(cfg, run_id)
        return self.layout

    def run_stages(self) -> RunResult:
        """Every stage after the listing; commits the version (nothing, on a RunError)."""
        self.layout.inputs.write_parquet(self.listed.inputs)
        self.layout.units.write_parquet(self.listed.units)
        self.layout.skipped.write_parquet(self.listed.skipped)
        self.read_units()
        self.check_quarantine()
        if not self.allow_empty:
            input_guard.check_documents(self.cfg, sum(r.docs for r in self.read), self.docs_in)
        exact_dedup(self)
        if self.cfg.dedup.near.enabled:
            near_dedup(self)
        audit_stage(self)
        self.tokenized, self.engine = tokenize_stage(self, self.cfg, self.layout, self.unit_ids)
        self.quarantine_tokenized()
        version_id, tok_entry = pack_stage(self)
        return self.commit(version_id, tok_entry)

    def read_units(self) -> None:
        """read+hash: each unit read, signed and hashed by one task; quarantine counts."""
        units = self.listed.units
        self.unit_ids = sorted(set(units["unit_id"].to_pylist()))
        pieces: dict[str, list[dict]] = {u: [] for u in self.unit_ids}
        for piece in units.to_pylist():
            pieces[piece["unit_id"]].append(piece)
            self.origin_of[piece["unit_id"]] = piece["origin"]
        task, layout, roots = self.remote["read_unit"], self.layout, self.roots
        self.read = self.stage(
            "read+hash",
            [
                task.remote(layout, roots[self.origin_of[u]], u, pieces[u], self.cfg)
                for u in self.unit_ids
            ],
        )
        for r in self.read:
            self.quarantined.update(r.quarantined)

    def check_quarantine(self, tokenized: dict[str, str] | None = None) -> None:
        """The quarantine listing; RunError past ingest.max_error_rate of the records, or of the
        listed bytes for files whose records could not be counted (forbidden, undecodable).
        `tokenized`: the units whose documents tokenize quarantined (unit -> removals digest)."""
        layout, rate = self.layout, self.cfg.ingest.max_error_rate
        merge = self.remote["merge_quarantine"]
        origins = self.origin_of if self.cfg.named_sources else None  # rows name their source
        [_] = self.stage("quarantine", [merge.remote(layout, self.unit_ids, origins, tokenized)])
        docs_in, n_bad = self.docs_in, sum(self.quarantined.values())
        if docs_in and n_bad / docs_in > rate:
            raise RunError(
                f"{n_bad} of {docs_in} records ({n_bad / docs_in:.2%}) were quarantined, more than"
                f" ingest.max_error_rate = {rate:.2%}; reasons: {dict(self.quarantined)};"
                f" listing: {layout.quarantine.uri}. Nothing was committed."
            )
        bad, listed = sum(r.quarantined_bytes for r in self.read), self.listed.listed_bytes
        if listed and bad / listed > rate:
            raise RunError(
                f"{bad} of {listed} listed bytes ({bad / listed:.2%}) are in"
                " files that could not be read and whose records could not be counted, more than"
                f" ingest.max_error_rate = {rate:.2%}; listing:"
                f" {layout.quarantine.uri}. Nothing was committed."
            )

    def quarantine_tokenized(self) -> None:
        """Documents tokenize left out (special_token_text: the model made the EOS/BOS id from
        their text) join the quarantine listing and counts, under the same error rate."""
        bad = {r.unit: r.removed for r in self.tokenized if r.quarantined}
        if bad:
            self.quarantined[SPECIAL_TOKEN_TEXT] += sum(r.quarantined for r in self.tokenized)
            self.check_quarantine(bad)

    def _input_bytes(self) -> dict[str, int]:
        """Listed bytes per source."""
        by_origin = self.listed.inputs.group_by("origin").aggregate([("size", "sum")])
        names, sizes = by_origin["origin"].to_pylist(), by_origin["size_sum"].to_pylist()
        return dict(zip(names, sizes, strict=True))

    def commit(self, version_id: str, tok_entry: dict[str, Any]) -> RunResult:
        """The manifest and stats.json, then the commit (fenced by the lease)."""
        cfg, layout, version = self.cfg, self.layout, self.layout.version(version_id)
        splits = shard_entries(self.parts)
        weights = {s.name: s.weight for s in cfg.sources}
        manifest = build_manifest(
            cfg,
            layout,
            version_id,
            tok_entry,
            run_counts(self.docs_in, self.packed, self.audit, self.quarantined, self.tokenized),
            splits["train"],
            self.input_digest,
            run={
                "input_uri": cfg.sources[0].uri,
                "input_uris": {s.name: s.uri for s in cfg.sources},
                "started_at": self.started.isoformat(),
                "skipped_files": dict(Counter(self.listed.skipped["reason"].to_pylist())),
            },
            sources=source_counts(
                cfg,
                self.origin_of,
                self.read,
                self.audit,
                self.parts,
                self.tokenized,
                self._input_bytes(),
            ),
            splits=splits,
            blend={
                "train": blend_line(splits["train"], weights),
                "valid": blend_line(splits["valid"], {name: 1.0 for name in weights}),
            },
        )
        self.own_io(self.task_stats[-1])  # the last stage's, before the commit's own I/O
        fields = documents.read_fields(
            layout, self.origin_of, {src.name: src.keep_fields for src in cfg.sources}
        )
        manifest["documents"] = document_index(layout, version, splits, fields)  # before it
        try:  # `verify`'s own checks; the pack tasks checked each shard as they wrote it
            verify_manifest(version, manifest, shards_checked=True)
        except VerifyError as e:
            raise RunError(f"the version fails verify: {e}; nothing was committed") from None
        if self.lease is not None:
            self.lease.renew()  # fenced: LeaseLost if another run took the dataset over meanwhile
        # the commit's I/O: the document index, the checks, the lease; not this file itself,
        # nor the manifest written after it
        self.task_stats.append({"stage": "commit", "tasks": 0, "seconds": 0.0, "io": {}})
        self.own_io(self.task_stats[-1])
        moved = bytes_moved(self.task_stats, self.listed.listed_bytes)
        stats = {"run_id": layout.run_id, **moved, "stages": self.task_stats}
        layout.stats.write_bytes(json.dumps(stats, indent=1).encode())
        commit_manifest(version, manifest)
        return RunResult(version, manifest, self.reports, moved=moved)


def document_index(
    layout: RunLayout, version: Location, splits: dict, fields: pa.Table | None = None
) -> dict:
    """The version's documents.parquet (formats/documents.py) from the run's per-shard records,
    shards in manifest order, with the kept input fields' columns of `fields`
    (documents.with_fields) when given; returns the manifest's `documents` entry."""
    tables = []
    for split in ("train", "valid"):
        for shard in splits[split]:
            name = shard["bin"].removesuffix(".bin")
            docs = layout.shard_docs(name).read_parquet()
            tables.append(documents.shard_rows(docs, shard["source"], split, name))
    if fields is not None:
        index = pa.concat_tables(tables) if tables else documents.INDEX_SCHEMA.empty_table()
        tables = [documents.with_fields(index, fields)]
    return documents.write_index(version, tables)


def run_pipeline(cfg: Config, show_progress: bool = True, allow_empty: bool = False) -> RunResult:
    """allow_empty: publish even an empty or shrunken input (run/input_guard.py)."""
    ensure_ray(cfg)
    drv = _Driver(cfg, show_progress, allow_empty)
    try:
        layout = drv.list_inputs()
        already = _already_committed(layout)
        if already is not None:
            return already
        if not allow_empty:  # before anything is written
            input_guard.check_listing(drv.cfg, drv.listed, layout.dataset)
        for warning in probe_fields(drv.cfg, drv.listed.inputs, drv.roots):  # text_field: exit 2
            tqdm.write(f"warning: {warning}", file=sys.stderr)  # above the open stage bar
        with held(layout.lease, layout.run_id) as lease:
            drv.lease = lease
            result = drv.run_stages()
            layout.committed.write_bytes(json.dumps({"version": result.version.name}).encode())
    finally:
        drv.bars.close()
    _after_commit(drv.cfg, layout.dataset, result)
    return result


def _after_commit(cfg: Config, dataset: Location, result: RunResult) -> None:
    """Retention (when configured) and the cost report, once the version is committed and the
    lease released (retention takes the lease itself). A failure here is reported, not raised:
    the version is already complete."""
    from pipeline.report.build import build_report, write_report
    from pipeline.retention.apply import apply_plan
    from pipeline.retention.plan import plan_retention

    try:
        plan = plan_retention(cfg)
        if cfg.retention.apply_after_run:
            result.retention_actions = len(apply_plan(plan, cfg))
            plan = plan_retention(cfg)
        result.reports = [loc.uri for loc in write_report(build_report(cfg, plan), dataset)]
    except Exception as e:  # noqa: BLE001 - the commit stands; say what failed
        print(f"warning: retention/cost report after the commit failed: {e!r}", file=sys.stderr)


def _already_committed(layout: RunLayout) -> RunResult | None:
    """The same input and config were committed before and that version still exists."""
    try:
        version_id = json.loads(layout.committed.read_bytes())["version"]
        manifest = load_manifest(layout.version(version_id))
    except (FileNotFoundError, ManifestError, KeyError, ValueError):
        return None
    return RunResult(layout.version(version_id), manifest, [], already_committed=True)

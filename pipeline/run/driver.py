"""A run, top to bottom: each stage a function with typed inputs and a typed result, called in
order, its result passed on explicitly (the stages: run/*_stage.py; their Ray waves:
run/waves.py).

The driver only moves metadata (the listing, work units, per-task counts); documents go from
storage to tasks and back to storage.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys

from tqdm import tqdm

from pipeline.config.model import Config
from pipeline.core.lease import held
from pipeline.core.storage import Location
from pipeline.curate import warm as curate_warm
from pipeline.dedup import kernel_cache
from pipeline.ingest.field_probe import probe_fields
from pipeline.run import input_guard
from pipeline.run.clock import PhaseClock
from pipeline.run.commit_stage import Counted, already_committed, commit
from pipeline.run.dedup_stage import (
    audit_later,
    audit_result,
    by_bucket,
    exact_dedup,
    near_dedup,
)
from pipeline.run.pack_stage import pack_stage
from pipeline.run.ray_env import ensure_ray, start_workers
from pipeline.run.read_stage import (
    Listing,
    Units,
    check_quarantine,
    check_takedowns_unchanged,
    list_inputs,
    read_units,
)
from pipeline.run.results import RunResult
from pipeline.run.tokenize_stage import select_tasks, tokenize_stage
from pipeline.run.waves import Waves


def run_pipeline(cfg: Config, show_progress: bool = True, allow_empty: bool = False) -> RunResult:
    """allow_empty: publish even an empty or shrunken input (run/input_guard.py)."""
    clock = PhaseClock()
    kernels = cfg.dedup.exact or cfg.dedup.near.enabled
    steps = tuple(curate_warm.step_names(cfg.chain_of(src) for src in cfg.sources))
    warming = (kernels or steps) and _local(cfg)
    compile_child = kernel_cache.warm_in_background(steps) if warming else None
    try:
        with clock.phase("ray start"):
            ensure_ray(cfg)
        kernel_cache.hurry(compile_child)  # the workers will wait for it from here
        with clock.phase("worker start"):
            start_workers(kernels, steps)
    finally:
        kernel_cache.finish(compile_child)  # done: the workers waited for its compile lock
    started = dt.datetime.now(dt.timezone.utc)
    waves = Waves(show_progress)
    try:
        with clock.phase("stages"):
            listing = list_inputs(waves, cfg)
        layout = listing.layout
        earlier = already_committed(layout)
        if earlier is not None:
            earlier.timing = clock.split()
            return earlier
        if not allow_empty:  # before anything is written
            input_guard.check_listing(listing.cfg, listing.listed, layout.dataset)
        for warning in probe_fields(listing.cfg, listing.listed.inputs, listing.roots):
            tqdm.write(f"warning: {warning}", file=sys.stderr)  # above the open stage bar
        with held(layout.lease, layout.run_id) as lease:
            check_takedowns_unchanged(listing)  # a removal committed before the lease was ours
            waves.lease = lease
            result = run_stages(waves, listing, started, allow_empty, clock)
            layout.committed.write_bytes(json.dumps({"version": result.version.name}).encode())
    finally:
        waves.bars.close()
    with clock.phase("report"):
        _after_commit(listing.cfg, layout.dataset, result)
    result.timing = clock.split()
    result.compiled_kernels = compile_child is not None
    return result


def _local(cfg: Config) -> bool:
    """Whether the run's workers are on this machine (no cluster address)."""
    return not (cfg.ray.address or os.environ.get("RAY_ADDRESS"))


def run_stages(
    waves: Waves,
    listing: Listing,
    started: dt.datetime,
    allow_empty: bool = False,
    clock: PhaseClock | None = None,
) -> RunResult:
    """Every stage after the listing; commits the version (nothing, on a RunError)."""
    clock = clock or PhaseClock()
    cfg, layout = listing.cfg, listing.layout
    with clock.phase("stages"):
        units = Units.of(listing.listed.units)
        reads = read_units(waves, listing, units)
        check_quarantine(waves, listing, units, reads, reads.quarantined, allow_empty)
        exact = exact_dedup(waves, cfg.dedup, layout, units, reads)
        near = None
        if cfg.dedup.near.enabled:
            near = near_dedup(waves, cfg, layout, units, reads, exact)
        removed = by_bucket(exact, near, reads)
        selecting = select_tasks(
            waves, layout, units.ids, removed.bounds, removed.ranges(), removed.read_pass
        )
        auditing = audit_later(waves, layout, removed)  # behind select's tasks, beside pack's
        tokenized = tokenize_stage(waves, selecting, units.ids, reads.engine)
        packed = pack_stage(waves, cfg, layout, units.origin_of, tokenized)
        waves.settle()  # the quarantine listing and the audit, before the commit
        audit = audit_result(waves, auditing)
    counted = Counted(reads, audit, tokenized, reads.quarantined)
    with clock.phase("commit"):
        return commit(waves, listing, units, counted, packed, started, allow_empty)


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

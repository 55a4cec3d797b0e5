"""The dedup stages: exact dedup, near dedup (optional), then the removal audit.

Each step is a wave of Ray tasks (run/exact_dedup_tasks.py, run/neardup.py, run/merge_tasks.py)
run through `Waves`. Between steps rows move through sectioned exchange objects
(exchange/sections.py): `exchange` runs pass 1 (`regroup`, exchange/regroup.py), or none for a
small exchange (plan.direct), and hands each partition's reader the ranges it GETs. The removals
of both dedups end up in unit buckets (`Removals.bounds`, `ByBucket`), which the audit merges
bucket by bucket and select reads bucket by bucket, beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pipeline.config.model import Config
from pipeline.config.sections import DedupConfig
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.dedup import band_rows, components, exact
from pipeline.dedup.minhash import cand_row_bytes
from pipeline.exchange import row_codec
from pipeline.exchange.plan import direct, exchange_plan, one_pass_writers
from pipeline.exchange.sections import (
    Range,
    SectionedObject,
    part_ranges,
    unit_bounds,
    unit_bucket,
    writer_ranges,
)
from pipeline.run import neardup
from pipeline.run.read_stage import Reads, Units
from pipeline.run.results import AuditResult
from pipeline.run.waves import Later, Waves


@dataclass(frozen=True)
class Removals:
    """One dedup's removals, by unit bucket: the ranges the audit's merge reads per bucket.
    `bounds`: the first unit of each bucket (sections.unit_bounds), shared by both dedups."""

    bounds: list[str]
    by_bucket: list[list[Range]]


def exchange(
    waves: Waves,
    dedup: DedupConfig,
    folder: Location,
    stage: str,
    writers: list[SectionedObject],
    n: int,
    schema: pa.Schema,
    reads: int = 1,
) -> dict[int, list[Range]]:
    """Pass 1 of a dedup exchange (exchange/sections.py) of rows of `schema` into `folder`
    (layout.exchange, one folder per cut and row format): the writers' objects regrouped;
    returns, per partition, the ranges its reader(s) GET (one per writer group). Where the
    writers' pieces are large enough, or the exchange small enough (plan.direct), there is no
    pass 1: the ranges are the writers' own sections."""
    total, request = sum(w.size for w in writers), int(dedup.exchange_request_bytes)
    small = dedup.exchange_small_gets
    if direct(n, len(writers), total, request, reads, small):
        return writer_ranges(writers, n)
    plan = exchange_plan(n, len(writers), total, request, int(dedup.exchange_task_bytes), reads,
                         dedup.partitions, small)  # fmt: skip
    folder, groups = folder / f"{plan.name}-{row_codec.FORMAT}", plan.unit_groups(writers)
    task = waves.task("regroup")
    regrouped = waves.run(
        stage,
        [
            task.remote(folder, plan, g, k, groups[g], schema)
            for g in range(plan.groups)
            for k in range(plan.buckets)
        ],
        merge=True,
    )
    return part_ranges(folder, plan, regrouped)


def _removals(
    waves: Waves, dedup: DedupConfig, layout: RunLayout, stage: str, name: str, writers, bounds
) -> Removals:
    """A dedup's removal objects regrouped by unit bucket (the audit's merge reads one each)."""
    folder = layout.exchange(stage, name)
    ranges = exchange(waves, dedup, folder, stage, writers, len(bounds), exact.REMOVED_SCHEMA)
    return Removals(bounds, [ranges[b] for b in range(len(bounds))])


def exact_dedup(
    waves: Waves, dedup: DedupConfig, layout: RunLayout, units: Units, reads: Reads
) -> Removals:
    """The hash rows' exchange, one task per hash partition, then the removals' exchange
    by unit bucket (near dedup, the audit and select read them by bucket)."""
    n = dedup.partitions
    bounds = unit_bounds(units.ids, n)
    if dedup.exact:
        hashes = [SectionedObject(layout.exact_hashes(r.unit), r.hash_size) for r in reads.results]
        folder = layout.exchange("exact", "hashes")
        ranges = exchange(waves, dedup, folder, "exact", hashes, n, exact.HASH_SCHEMA)
    else:
        ranges = {p: [] for p in range(n)}
    task, shared = waves.task("exact_partition"), waves.put(bounds)
    parts = waves.run(
        "exact",
        [task.remote(layout, p, ranges[p], shared, dedup.exact) for p in range(n)],
        merge=True,
    )
    removed = [SectionedObject(layout.exact_removed(r.part), r.size) for r in parts]
    return _removals(waves, dedup, layout, "exact", "exact-removed", removed, bounds)


def near_dedup(
    waves: Waves, cfg: Config, layout: RunLayout, units: Units, reads: Reads, exact: Removals
) -> Removals:
    """MinHash LSH (run/neardup.py): the documents exact dedup kept (`exact`: its removals by
    unit bucket), band hashes to candidate edges, candidate components
    (star rounds over the unverified edges, in the object store), the candidates' signatures
    fetched once from their units, then verification, components and the keep rule per label
    partition, and the near removals' exchange by unit bucket (exact dedup's bounds)."""
    order = document_order(cfg, units)  # node ids' unit indices (neardup.node_ids)
    found = _candidates(waves, cfg, layout, units, order, exact, reads)
    dedup, n, bounds = cfg.dedup, cfg.dedup.partitions, exact.bounds
    unit_buckets = waves.put(unit_bucket(bounds, pa.array(order, pa.string())))
    members_task = waves.task("members_task").options(num_returns=n + 1)
    members = [
        members_task.remote(
            layout, q, unit_buckets, n, len(found.inbox[q]),
            *found.inbox[q], *found.candidates[q],
        )  # fmt: skip
        for q in range(n)
    ]
    asked = waves.run("near", [refs[0] for refs in members], merge=True)
    asking = [SectionedObject(layout.near_requests(r.part), r.size) for r in asked]
    folder = layout.exchange("near", "req")
    requests = exchange(
        waves, dedup, folder, "near", asking, len(bounds), neardup.REQUEST_SCHEMA
    )
    unit_ids, fetch = waves.put(order), waves.task("near_fetch")
    cand_bytes = sum(r.members for r in asked) * cand_row_bytes(dedup.near.num_perm)
    fetching = fetch_runs(dedup, len(bounds), cand_bytes)
    fetched = waves.run(
        "near",
        [
            fetch.remote(layout, f, [r for b in run for r in requests[b]], unit_ids, cfg)
            for f, run in enumerate(fetching)
        ],
        merge=True,
    )
    sent = [SectionedObject(layout.near_cands(r.part), r.size) for r in fetched]
    folder = layout.exchange("near", "cand")
    cands = exchange(waves, dedup, folder, "near", sent, n, neardup.cand_schema(cfg))
    keep, shared = waves.task("near_keep"), waves.put(bounds)
    kept = waves.run(
        "near",
        [
            keep.remote(layout, lp, cands[lp], shared, cfg, *[refs[1 + lp] for refs in members])
            for lp in range(n)
        ],
        merge=True,
    )
    removed = [SectionedObject(layout.near_removed(r.part), r.size) for r in kept]
    return _removals(waves, dedup, layout, "near", "near-removed", removed, bounds)


def fetch_runs(dedup: DedupConfig, buckets: int, cand_bytes: float) -> list[range]:
    """The unit buckets each near_fetch task takes: runs of consecutive buckets, as few tasks
    as let the candidates' exchange (into the P label partitions) run in one pass
    (plan.one_pass_writers: the candidates' rows then cross storage twice, not four times),
    one task per bucket where no count does. `cand_bytes`: the candidates' rows, estimated."""
    tasks = one_pass_writers(
        buckets,
        dedup.partitions,
        int(cand_bytes),
        int(dedup.exchange_request_bytes),
        int(dedup.exchange_task_bytes),
        dedup.exchange_small_gets,
    )
    return [range(f * buckets // tasks, (f + 1) * buckets // tasks) for f in range(tasks)]


@dataclass(frozen=True)
class _Candidates:
    """Banding's results, per partition: the candidate edges (object refs) and the star rounds'
    final edge pieces."""

    candidates: list[list]
    inbox: list[list]


def group_removals(exact: Removals, group: list[tuple]) -> list[list[Range]]:
    """The exact removals' ranges of each unit bucket that holds a unit group's units (a run
    of consecutive sorted unit ids, first item of each entry the unit id), buckets in order:
    what the group's near_band_group tasks read to drop exact duplicates."""
    if not group:
        return []
    ends = pa.array([group[0][0], group[-1][0]], pa.string())
    first, last = unit_bucket(exact.bounds, ends).tolist()
    return exact.by_bucket[first : last + 1]


def document_order(cfg: Config, units: Units) -> list[str]:
    """The unit ids in the order of their documents (Units.document_order, by the config's
    source ranks): a unit's index there is its part of near dedup's node ids."""
    return units.document_order({src.name: cfg.source_rank(src.name)[0] for src in cfg.sources})


def _candidates(
    waves: Waves,
    cfg: Config,
    layout: RunLayout,
    units: Units,
    order: list[str],
    exact: Removals,
    reads: Reads,
) -> _Candidates:
    """The band hashes exchanged by band partition (exact duplicates dropped), candidate edges
    per bucket, and their components: star rounds, or one task where the edges are few
    (neardup.star_fold)."""
    dedup, n = cfg.dedup, cfg.dedup.partitions
    plan = exchange_plan(
        n,
        len(units.ids),
        band_rows.exchange_bytes(reads.docs, dedup.near.bands, len(units.ids), n),
        int(dedup.exchange_request_bytes),
        int(dedup.exchange_task_bytes),
        min_tasks=n,
        small_gets=dedup.exchange_small_gets,
    )
    index = {u: i for i, u in enumerate(order)}  # a unit's rank in document order
    groups = plan.unit_groups([(u, index[u], units.origin_of[u]) for u in units.ids])
    band_group = waves.task("near_band_group")
    removals = [waves.put(group_removals(exact, groups[g])) for g in range(plan.groups)]
    banded = waves.run(
        "near",
        [
            band_group.remote(layout, plan, g, k, groups[g], removals[g], cfg)
            for g in range(plan.groups)
            for k in range(plan.buckets)
        ],
    )
    bands_at = layout.exchange("near", neardup.BAND_EXCHANGE) / plan.name
    bands = part_ranges(bands_at, plan, [r.bands for r in banded])
    buckets = [
        waves.task("near_buckets").options(num_returns=n + 1).remote(p, bands[p], n)
        for p in range(n)
    ]
    counted = waves.run("near", [refs[0] for refs in buckets], merge=True)
    candidates = [[refs[1 + q] for refs in buckets] for q in range(n)]
    if neardup.folds(sum(r.candidates for r in counted), n):
        fold = waves.task("star_fold").options(num_returns=n + 1)
        folded = fold.remote(n, *[ref for piece in candidates for ref in piece])
        return _Candidates(candidates, [[folded[1 + q]] for q in range(n)])
    return _Candidates(candidates, _star_rounds(waves, candidates))


def _star_rounds(waves: Waves, inbox: list[list]) -> list[list]:
    """Alternate large/small star rounds until a large round changes nothing; the edge
    pieces go task to task through the object store, the driver sees fingerprints only.

    While the driver waits for a large step's fingerprints, that round's small step and the
    next large step are already queued (their inputs are object refs), so rounds follow each
    other without a driver round trip between them; the two steps queued past convergence are
    left to finish unused (each at most one step's edges, which never grow)."""
    n = len(inbox)
    star = waves.task("star_task").options(num_returns=n + 1)

    def step(kind: str, pieces: list[list]) -> list:
        return [star.remote(kind, n, *pieces[p]) for p in range(n)]

    def routed(tasks: list) -> list[list]:
        return [[refs[1 + p] for refs in tasks] for p in range(n)]

    large, previous = step("large", inbox), None
    while True:
        after = routed(step("small", routed(large)))
        ahead = step("large", after)
        current = components.combine_fingerprints(waves.get([refs[0] for refs in large]))
        if current == previous:
            return inbox
        previous, inbox, large = current, after, ahead


@dataclass(frozen=True)
class ByBucket:
    """Every removal of the run by unit bucket (`bounds`, sections.unit_bounds): per bucket,
    the exact then near removals' ranges, and the units with read-pass audit rows (curation,
    the takedown list: read_unit's own file). What the audit merges into removed.parquet, and
    what select reads per bucket without waiting for it."""

    bounds: list[str]
    exact: list[list[Range]]
    near: list[list[Range]] | None
    read_pass: list[list[str]]

    def ranges(self) -> list[list[Range]]:
        """Per bucket: its exact, then its near removals' ranges."""
        near = self.near if self.near is not None else [[] for _ in self.exact]
        return [e + n for e, n in zip(self.exact, near, strict=True)]


def by_bucket(exact: Removals, near: Removals | None, reads: Reads) -> ByBucket:
    down: list[list[str]] = [[] for _ in exact.bounds]
    units = [r.unit for r in reads.results if r.removed_takedown or r.removed_filtered]
    for unit, bucket in zip(
        units, unit_bucket(exact.bounds, pa.array(units, pa.string())), strict=True
    ):
        down[bucket].append(unit)
    return ByBucket(exact.bounds, exact.by_bucket, near.by_bucket if near else None, down)


def audit_later(waves: Waves, layout: RunLayout, removed: ByBucket) -> Later:
    """The audit's task (removed.parquet) as a `later` wave: it runs beside select and pack,
    which do not need it; `audit_result` waits for it. It merges the exact (and near)
    removals and the read pass's (curation rules, the takedown list) bucket by bucket."""
    merge = waves.task("merge_audit")
    return waves.later(
        "audit", lambda: [merge.remote(layout, removed.exact, removed.near, removed.read_pass)]
    )


def audit_result(waves: Waves, auditing: Later) -> AuditResult:
    """The run's audit, from audit_later's wave (waited for here if it was not yet)."""
    [audit] = waves.finish(auditing)
    return audit

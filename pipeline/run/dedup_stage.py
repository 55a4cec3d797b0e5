"""The driver's side of dedup: exact dedup, near dedup (optional), then the removal audit.

Each step is a wave of Ray tasks (run/tasks.py, run/neardup.py) run through the driver object
`drv` (run/driver.py: its `remote` tasks, `stage` waves and the state the stages share). Between
steps rows move through sectioned exchange objects (exchange/sections.py): `exchange` runs pass 1
(`regroup`, exchange/regroup.py) and hands each partition's reader the ranges it GETs. The removals
of both dedups end up in unit buckets (`drv.bounds`), which the audit merges bucket by bucket.
"""

from __future__ import annotations

import pyarrow as pa
import ray

from pipeline.dedup import components
from pipeline.exchange.plan import exchange_plan
from pipeline.exchange.sections import SectionedObject as Writer
from pipeline.exchange.sections import (
    part_ranges,
    unit_bounds,
    unit_bucket,
)


def exchange(
    drv, stage: str, name: str, writers: list[Writer], n: int, reads: int = 1
) -> dict[int, list]:
    """Pass 1 of a dedup exchange (exchange/sections.py): the writers' objects regrouped;
    returns, per partition, the ranges its reader(s) GET (one per writer group)."""
    dedup = drv.cfg.dedup
    plan = exchange_plan(
        n,
        len(writers),
        sum(w.size for w in writers),
        int(dedup.exchange_request_bytes),
        int(dedup.exchange_task_bytes),
        reads,
    )
    folder, groups = drv.layout.exchange(stage, name) / plan.name, plan.unit_groups(writers)
    task = drv.remote["regroup"]
    regrouped = drv.stage(
        stage,
        [
            task.remote(folder, plan, g, k, groups[g])
            for g in range(plan.groups)
            for k in range(plan.buckets)
        ],
        merge=True,
    )
    return part_ranges(folder, plan, regrouped)


def removal_buckets(drv, ranges: dict[int, list]) -> list[list]:
    """An exchange's ranges as a list by unit bucket (the audit's merge reads one per bucket)."""
    return [ranges[b] for b in range(len(drv.bounds))]


def exact_dedup(drv) -> None:
    """The hash rows' exchange, one task per hash partition, then the removals' exchange
    by unit bucket and their merge into one file sorted by unit."""
    n, layout, exact = drv.cfg.dedup.partitions, drv.layout, drv.cfg.dedup.exact
    drv.bounds = unit_bounds(drv.unit_ids, n)
    if exact:
        hashes = [Writer(layout.exact_hashes(r.unit), r.hash_size) for r in drv.read]
        ranges = exchange(drv, "exact", "hashes", hashes, n)
    else:
        ranges = {p: [] for p in range(n)}
    task, bounds = drv.remote["exact_partition"], ray.put(drv.bounds)
    parts = drv.stage(
        "exact",
        [task.remote(layout, p, ranges[p], bounds, exact) for p in range(n)],
        merge=True,
    )
    removed = [Writer(layout.exact_removed(r.part), r.size) for r in parts]
    drv.exact_removed = removal_buckets(
        drv, exchange(drv, "exact", "exact-removed", removed, len(drv.bounds))
    )
    merge = drv.remote["merge_exact"]
    drv.stage("exact", [merge.remote(layout, drv.exact_removed)], merge=True)


def near_dedup(drv) -> None:
    """MinHash LSH (run/neardup.py): band hashes to candidate edges, candidate components
    (star rounds over the unverified edges, in the object store), the candidates' signatures
    fetched once from their units, then verification, components and the keep rule per label
    partition, and the near removals' exchange by unit bucket (for the audit)."""
    remote, layout, cfg, n = drv.remote, drv.layout, drv.cfg, drv.cfg.dedup.partitions
    units = [(u, i, drv.origin_of[u]) for i, u in enumerate(drv.unit_ids)]
    docs = sum(r.docs for r in drv.read)  # at most: exact duplicates are dropped on the way
    plan = exchange_plan(
        n,
        len(units),
        docs * cfg.dedup.near.bands * 16,  # a band row: band hash, key
        int(cfg.dedup.exchange_request_bytes),
        int(cfg.dedup.exchange_task_bytes),
    )
    groups = plan.unit_groups(units)
    banded = drv.stage(
        "near",
        [
            remote["near_band_group"].remote(layout, plan, g, k, groups[g], cfg)
            for g in range(plan.groups)
            for k in range(plan.buckets)
        ],
    )
    folder = layout.exchange("near", "bands") / plan.name
    bands = part_ranges(folder, plan, [r.bands for r in banded])
    folder = layout.exchange("near", "dir") / plan.name
    directory = part_ranges(folder, plan, [r.directory for r in banded])
    buckets = [
        remote["near_buckets"].options(num_returns=n + 1).remote(p, bands[p], n) for p in range(n)
    ]
    drv.stage("near", [refs[0] for refs in buckets], merge=True)
    candidates = [[refs[1 + q] for refs in buckets] for q in range(n)]
    inbox = _star_rounds(drv, candidates)
    unit_buckets = ray.put(unit_bucket(drv.bounds, pa.array(drv.unit_ids, pa.string())))
    members = [
        remote["members_task"]
        .options(num_returns=n + 1)
        .remote(layout, q, directory[q], unit_buckets, n, len(inbox[q]), *inbox[q], *candidates[q])
        for q in range(n)
    ]
    asked = drv.stage("near", [refs[0] for refs in members], merge=True)
    nb = len(drv.bounds)
    requests = exchange(
        drv, "near", "req", [Writer(layout.near_requests(r.part), r.size) for r in asked], nb
    )
    unit_ids = ray.put(drv.unit_ids)
    origins = ray.put([drv.origin_of[u] for u in drv.unit_ids])
    fetched = drv.stage(
        "near",
        [
            remote["near_fetch"].remote(layout, b, requests[b], unit_ids, origins, cfg)
            for b in range(nb)
        ],
        merge=True,
    )
    cands = exchange(
        drv, "near", "cand", [Writer(layout.near_cands(r.part), r.size) for r in fetched], n
    )
    bounds = ray.put(drv.bounds)
    kept = drv.stage(
        "near",
        [
            remote["near_keep"].remote(
                layout, lp, cands[lp], bounds, cfg, *[refs[1 + lp] for refs in members]
            )
            for lp in range(n)
        ],
        merge=True,
    )
    removed = [Writer(layout.near_removed(r.part), r.size) for r in kept]
    drv.near_removed = removal_buckets(
        drv, exchange(drv, "near", "near-removed", removed, len(drv.bounds))
    )


def _star_rounds(drv, inbox: list[list]) -> list[list]:
    """Alternate large/small star rounds until a large round changes nothing; the edge
    pieces go task to task through the object store, the driver sees fingerprints only."""
    n = len(inbox)
    star, previous = drv.remote["star_task"].options(num_returns=n + 1), None
    while True:
        large = [star.remote("large", n, *inbox[p]) for p in range(n)]
        current = components.combine_fingerprints(ray.get([refs[0] for refs in large]))
        if current == previous:
            return inbox
        previous = current
        small = [star.remote("small", n, *[refs[1 + p] for refs in large]) for p in range(n)]
        inbox = [[refs[1 + p] for refs in small] for p in range(n)]


def audit_stage(drv) -> None:
    """The exact (and near) removals merged bucket by bucket into the run's audit."""
    near = drv.near_removed if drv.cfg.dedup.near.enabled else None
    merge = drv.remote["merge_audit"]
    [drv.audit] = drv.stage("audit", [merge.remote(drv.layout, drv.exact_removed, near)])

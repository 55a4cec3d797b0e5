"""The driver's side of dedup: exact dedup, near dedup (optional), then the removal audit.

Each step is a wave of Ray tasks (run/tasks.py, run/neardup.py) run through the driver object
`drv` (run/driver.py: its `remote` tasks, `stage` waves and the state the stages share). Between
steps rows move through sectioned exchange objects (formats/sectioned.py): `exchange` runs pass 1
(`regroup`, run/exchange.py) and hands each partition's reader the ranges it GETs. The removals
of both dedups end up in unit buckets (`drv.bounds`), which the audit merges bucket by bucket.
"""

from __future__ import annotations

import ray

from pipeline.dedup import components
from pipeline.formats.sectioned import Writer, exchange_plan, part_ranges, unit_bounds


def exchange(
    drv, stage: str, name: str, writers: list[Writer], n: int, reads: int = 1
) -> dict[int, list]:
    """Pass 1 of a dedup exchange (formats/sectioned.py): the writers' objects regrouped;
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


def near_edges(drv) -> tuple[list, dict[int, list]]:
    """MinHash LSH (run/neardup.py) up to the verified edges: returns the verify tasks' refs
    (result, then one edge piece per partition) and each partition's signature ranges.
    Every step writes one object sectioned by partition; `exchange` regroups it."""
    remote, layout, cfg, n = drv.remote, drv.layout, drv.cfg, drv.cfg.dedup.partitions
    signed = drv.stage(
        "near",
        [remote["near_signatures"].remote(layout, u, cfg, drv.origin_of[u]) for u in drv.unit_ids],
    )
    sigs = exchange(
        drv,
        "near",
        "sig",
        [Writer(layout.near_sig(r.unit), r.sig_size) for r in signed],
        n,
        reads=3,  # by near_attach, near_verify and near_members
    )
    bands = exchange(
        drv, "near", "bands", [Writer(layout.near_bands(r.unit), r.band_size) for r in signed], n
    )
    buckets = drv.stage(
        "near",
        [remote["near_buckets"].remote(layout, p, bands[p], n) for p in range(n)],
        merge=True,
    )
    edges = exchange(
        drv, "near", "edges", [Writer(layout.near_edges(r.part), r.size) for r in buckets], n
    )
    attached = drv.stage(
        "near",
        [remote["near_attach"].remote(layout, q, edges[q], sigs[q], cfg) for q in range(n)],
        merge=True,
    )
    halves = exchange(
        drv, "near", "half", [Writer(layout.near_half(r.part), r.size) for r in attached], n
    )
    verify = [
        remote["near_verify"].options(num_returns=n + 1).remote(layout, q, halves[q], sigs[q], cfg)
        for q in range(n)
    ]
    drv.stage("near", [refs[0] for refs in verify], merge=True)
    return verify, sigs


def near_components(drv, verify: list, sigs: dict[int, list]) -> None:
    """Connected components of the verified edges, their members, the keep rule, and the
    near removals' exchange by unit bucket (for the audit)."""
    remote, layout, cfg, n = drv.remote, drv.layout, drv.cfg, drv.cfg.dedup.partitions
    inbox = _star_rounds(drv, [[refs[1 + p] for refs in verify] for p in range(n)])
    task = remote["members_task"]
    members = drv.stage(
        "near",
        [task.remote(layout, q, sigs[q], cfg, *inbox[q]) for q in range(n)],
        merge=True,
    )
    ranges = exchange(
        drv, "near", "members", [Writer(layout.near_members(r.part), r.size) for r in members], n
    )
    bounds = ray.put(drv.bounds)
    kept = drv.stage(
        "near",
        [remote["near_keep"].remote(layout, lp, ranges[lp], bounds, cfg) for lp in range(n)],
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

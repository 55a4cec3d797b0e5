"""Exact dedup's Ray task: one hash partition deduplicated (dedup/exact.py, the pure core).

Like every task module (run/read_tasks.py): picklable descriptions in, a small typed result
(run/results.py) out. Its rows come from every read task's sectioned hash object, one range per
writer group (the exchange: exchange/sections.py); the audit (run/merge_tasks.py) reads its
removals back one unit bucket at a time.
"""

from __future__ import annotations

from pipeline.core.layout import RunLayout
from pipeline.dedup import exact
from pipeline.exchange import sections
from pipeline.run.results import ExactResult
from pipeline.run.timer import TaskTimer


def exact_partition(
    layout: RunLayout,
    part: int,
    ranges: list[sections.Range],
    bounds: list[str],
    enabled: bool = True,
) -> ExactResult:
    """Exact dedup of one hash partition, its rows read as one range per writer group (the
    exchange: exchange/sections.py); its removals go out sectioned by unit bucket (`bounds`)."""
    timer = TaskTimer()
    rows = sections.read_part(ranges if enabled else [], exact.HASH_SCHEMA)
    removed = exact.exact_removals(rows)
    buckets = sections.unit_bucket(bounds, removed.column("unit_id"))
    size = sections.write_sectioned(layout.exact_removed(part), removed, buckets, len(bounds))
    return timer.result(
        ExactResult, part=part, rows=rows.num_rows, removed=removed.num_rows, size=size
    )

"""The merges only the commit needs, each a `later` wave (run/waves.py): every unit's bad records
into the run's quarantine listing (merge_quarantine), and every removal, exact, near, by a
curation rule and by the takedown list, into removed.parquet, the run's audit (merge_audit).

Like every task module (run/read_tasks.py): picklable descriptions in, a small typed result
(run/results.py) out. Their formats are documented with their schemas: ingest/records.py
(quarantine) and dedup/exact.py (the removal audit).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.dedup import exact
from pipeline.exchange import sections
from pipeline.exchange.sections import concat
from pipeline.ingest.listing import with_origin
from pipeline.ingest.records import QUARANTINE_SCHEMA
from pipeline.run.results import AuditResult, QuarantineResult
from pipeline.run.timer import TaskTimer


def merge_quarantine(
    layout: RunLayout,
    units: list[str],
    origins: dict[str, str] | None = None,
) -> QuarantineResult:
    """Every unit's bad records in one listing, sorted by source and row. With `origins` (unit
    id -> source name; named sources) every row also has `origin`, the source it came from,
    and rows sort by origin first (two sources may hold the same relative path). A listing
    without the column (a single `input:`, or a run from before) is the one source's. The
    documents the tokenizer quarantined are in their unit's rows (read_unit)."""
    timer = TaskTimer()
    parts = [layout.read_quarantine(u).read_parquet() for u in units]
    schema, order = QUARANTINE_SCHEMA, [("source", "ascending"), ("row", "ascending")]
    if origins is not None:
        parts = [
            with_origin(t.drop_columns(["origin"]) if "origin" in t.column_names else t, origins[u])
            for u, t in zip(units, parts, strict=True)
        ]
        schema = QUARANTINE_SCHEMA.append(pa.field("origin", pa.string()))
        order = [("origin", "ascending"), *order]
    bad = concat(parts, schema)
    layout.quarantine.write_parquet(bad.sort_by(order))
    documents = int(pc.sum(bad["records"]).as_py() or 0)
    return timer.result(QuarantineResult, rows=bad.num_rows, documents=documents)


def merge_audit(
    layout: RunLayout,
    exact_by_bucket: list[list[sections.Range]],
    near_by_bucket: list[list[sections.Range]] | None = None,
    takedown_by_bucket: list[list[str]] | None = None,
) -> AuditResult:
    """removed.parquet: every removal, exact, near, by a curation rule and by the takedown list,
    sorted by unit: the run's audit. Written one bucket of units at a time (buckets in unit
    order), so memory holds one bucket's removals, never the corpus's; `takedown_by_bucket`:
    each bucket's units with read-pass audit rows (read_unit)."""
    timer = TaskTimer()
    near_by_bucket = near_by_bucket or [[] for _ in exact_by_bucket]
    down_by_bucket = takedown_by_bucket or [[] for _ in exact_by_bucket]
    with _RemovedWriter(layout.removed) as out:
        for exact_ranges, near_ranges, down in zip(
            exact_by_bucket, near_by_bucket, down_by_bucket, strict=True
        ):
            rows = sections.read_part(exact_ranges + near_ranges, exact.REMOVED_SCHEMA)
            taken = [layout.read_removed(u).read_parquet() for u in down]
            out.write(concat([rows, *taken], exact.AUDIT_SCHEMA))
    dedup_rules = ("exact", "near", "takedown")
    return timer.result(
        AuditResult,
        removed_exact=out.rules.get("exact", 0),
        removed_near=out.rules.get("near", 0),
        removed_takedown=out.rules.get("takedown", 0),
        removed_filtered={r: n for r, n in sorted(out.rules.items()) if r not in dedup_rules},
        by_origin=out.by_origin,
    )


class _RemovedWriter:
    """A removal listing written batch by batch, each batch sorted by unit (batches arrive in
    unit order, so the file is sorted by unit) with row groups of at most 65,536 rows. Counts
    removals per rule, and per source (`by_origin`: per rule, and those whose kept copy sits in
    another source)."""

    def __init__(self, loc: Location) -> None:
        self.loc, self.rules = loc, Counter()
        self.by_origin: dict[str, dict] = {}

    def __enter__(self) -> _RemovedWriter:
        self._file = self.loc.atomic_writer()
        self._writer = pq.ParquetWriter(self._file.__enter__(), exact.AUDIT_SCHEMA)
        return self

    def write(self, removed: pa.Table) -> None:
        if removed.num_rows:
            self.rules.update(removed["rule"].to_pylist())
            self._count_origins(removed)
            if "detail" not in removed.column_names:  # exact and near say why by kept_id
                removed = removed.append_column("detail", pa.nulls(removed.num_rows, pa.string()))
            batch = removed.select(exact.AUDIT_SCHEMA.names).cast(exact.AUDIT_SCHEMA)
            batch = batch.sort_by(_BY_UNIT)
            self._writer.write_table(batch, row_group_size=65536)

    def _count_origins(self, removed: pa.Table) -> None:
        for origin, rule, kept in zip(
            removed["origin"].to_pylist(),
            removed["rule"].to_pylist(),
            removed["kept_origin"].to_pylist(),
            strict=True,
        ):
            entry = self.by_origin.setdefault(origin, {"exact": 0, "near": 0, "in_favour_of": {}})
            entry[rule] = entry.get(rule, 0) + 1
            if kept is not None and kept != origin:  # a takedown keeps no copy
                entry["in_favour_of"][kept] = entry["in_favour_of"].get(kept, 0) + 1

    def __exit__(self, *exc) -> None:
        self._writer.close()
        self._file.__exit__(*exc)


_BY_UNIT = [("unit_id", "ascending"), ("source", "ascending"), ("row", "ascending")]

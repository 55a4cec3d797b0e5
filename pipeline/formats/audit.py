"""Why a document is not in a version, said in one line for `find`: its row in the run's audit
(`removed.parquet`: every removal, exact, near, by a curation rule or by the takedown list;
dedup/exact.AUDIT_SCHEMA) or in its quarantine listing (`quarantine.parquet`, whose rows carry
the id the record would have had: ingest/records.quarantine_id).

Contract: reads only the one document's rows (a Parquet filter on doc_id); a version whose
lineage names no such file, or one that is gone (retention), gives no line, never an error.
A quarantine listing written before rows carried `doc_id` is matched on derived ids alone.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from pipeline.core.storage import Location
from pipeline.core.text import derived_id


def why_removed(dataset: Location, lineage: dict, doc_id: str) -> list[str]:
    """One line per audit row of `doc_id` in the run that made a version (its lineage)."""
    path = lineage.get("removed") if isinstance(lineage, dict) else None
    if not isinstance(path, str):
        return []
    try:
        with (dataset / path).open_read() as f:
            rows = pq.read_table(f, filters=[("doc_id", "=", doc_id)]).to_pylist()
    except (FileNotFoundError, OSError, ValueError):
        return []
    return [describe(row) for row in rows]


def why_quarantined(dataset: Location, lineage: dict, doc_id: str) -> list[str]:
    """One line per quarantine row of the run that made a version whose record had `doc_id`."""
    path = lineage.get("quarantine") if isinstance(lineage, dict) else None
    if not isinstance(path, str):
        return []
    try:
        with (dataset / path).open_read() as f:
            has_ids = "doc_id" in pq.ParquetFile(f).schema_arrow.names
            f.seek(0)
            table = pq.read_table(f, filters=[("doc_id", "=", doc_id)] if has_ids else None)
    except (FileNotFoundError, OSError, ValueError):
        return []
    rows = table.to_pylist()
    if not has_ids:
        rows = [dict(r, doc_id=derived_id(r["source"], r["row"])) for r in rows if r["row"] >= 0]
    return [
        f"{doc_id!r} was quarantined: {r['reason']}: {r['detail']}"
        f" (read from {r['source']}, row {r['row']})"
        for r in rows
        if r.get("doc_id") == doc_id
    ]


def describe(row: dict) -> str:
    doc, rule = repr(row["doc_id"]), row["rule"]
    where = f" (read from {row['source']}, row {row['row']})"
    if rule in ("exact", "near"):
        similar = f", similarity {row['similarity']:.3f}" if row.get("similarity") else ""
        return (f"{doc} was removed as a{'n' if rule == 'exact' else ''} {rule} duplicate of"
                f" {row['kept_id']!r}{similar}{where}")  # fmt: skip
    if rule == "takedown":
        return f"{doc} was removed by the takedown list{where}"
    return f"{doc} was filtered by {rule}: {row.get('detail') or 'no reason recorded'}{where}"

"""The monthly bill at a corpus size (`report --corpus-bytes`): the cost report's storage under
the same retention plan scaled to that input, the dry run's requests per pipeline run
(report/dry_run_stages.py) and training's range GETs over the tokens."""

from __future__ import annotations

import math

from pipeline.report.dry_run_stages import StagePlan
from pipeline.report.prices import PricesConfig


def projected_bill(
    report: dict,
    corpus_bytes: int,
    stages: list[StagePlan],
    cut: dict,
    *,
    runs_per_month: float,
    epochs_per_month: float,
    range_bytes: int,
    prices: PricesConfig,
) -> dict:
    """The monthly bill of `report` (a cost report of this dataset) at `corpus_bytes` of input:
    storage retained under the same retention plan scaled by corpus / this dataset's raw bytes,
    the dry run's requests per pipeline run, and training's range GETs over the tokens."""
    raw = sum(r["bytes"] for r in report["before"]["retained"] if r["data_class"] == "raw")
    if not raw:
        raise ValueError("the report lists no raw input bytes to scale from (input not listed)")
    scale = corpus_bytes / raw
    storage = {}
    for r in report["after"]["retained"]:
        storage[r["data_class"]] = storage.get(r["data_class"], 0.0) + r["usd_month"] * scale
    run_usd = sum(s.dollars for s in stages) * runs_per_month
    epoch_gets = math.ceil(cut["token_bytes"] / range_bytes) + cut["shards"]
    training_usd = epochs_per_month * epoch_gets * prices.standard.get_per_1000 / 1000
    return {
        "corpus_bytes": corpus_bytes,
        "scale": scale,
        "storage_usd_by_class": storage,
        "storage_usd": sum(storage.values()),
        "pipeline_request_usd": run_usd,
        "pipeline_core_hours": sum(s.core_hours for s in stages) * runs_per_month,
        "training_request_usd": training_usd,
        "total_usd": sum(storage.values()) + run_usd + training_usd,
    }


def bill_lines(bill: dict) -> list[str]:
    """The projection as Markdown: its section of the cost report (report/document.py)."""
    from pipeline.report.document import projection_section
    from pipeline.report.markdown import table_lines

    section = projection_section(bill)
    return [f"## {section.title}", "", *table_lines(section.blocks[0])]

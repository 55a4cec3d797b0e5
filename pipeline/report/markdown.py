"""The cost report (report/build.py) as Markdown, for the terminal; tables from report/tables.py."""

from __future__ import annotations

from typing import Any

from pipeline.core.units import human_bytes
from pipeline.report import tables
from pipeline.report.tables import Table, usd


def _table(t: Table) -> list[str]:
    lines = ["| " + " | ".join(t.headers) + " |", "|" + "|".join("---" for _ in t.headers) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in t.rows]


def format_markdown(r: dict[str, Any]) -> str:
    a, once = r["assumptions"], r["apply_once"]
    monthly = tables.monthly_cost(r)
    monthly = Table(
        monthly.headers, [[f"**{x}**" if x == "total" else x, *rest] for x, *rest in monthly.rows]
    )
    lines = [
        f"# Cost report: {r['dataset']}",
        "",
        f"{r['generated_at']} · prices per month, GB = {a['bytes_per_gb']:,} B ·"
        f" pipeline runs/month {a['runs_per_month']:g} (stats: {a['stats'] or 'none'}) ·"
        f" training epochs/month {a['epochs_per_month']:g} ({a['training_reads']})",
        "",
        "## Monthly cost",
        "",
        *_table(monthly),
        "",
        f"The plan saves **{usd(r['savings_usd_per_month'])} per month**; applying it"
        f" once costs {usd(once['total_usd'])} ({once['copies']} COPY = "
        f"{usd(once['copy_usd'])}, minimum-duration charges"
        f" {usd(once['early_delete_usd'])}) and deletes {once['deletes']} objects"
        f" ({human_bytes(once['delete_bytes'])}).",
        "",
        "## Retained by data class and storage class",
        "",
        *_table(tables.retained(r)),
        "",
        "## Pipeline and training I/O per month (priced at the storage classes after the plan)",
        "",
        *_table(tables.reads(r)),
        "",
        "## Requests by type",
        "",
        *_table(tables.requests_by_type(r)),
        "",
        "## Retained vs read by data class",
        "",
        *_table(tables.retained_vs_read(r)),
    ]
    if r.get("sources"):
        lines += [
            "",
            "## Bytes and tokens per source (newest version; an epoch reads weight x a source)",
            "",
            *_table(tables.sources(r)),
        ]
    n = r["napkin"]
    if n:
        lines += [
            "",
            f"## One epoch of training: one object per document vs shards (version {n['version']})",
            "",
            *_table(tables.napkin(n)),
        ]
        if n["request_ratio"]:
            lines += [
                "",
                f"Small files need {n['request_ratio']:,.3g}x the GET requests of shards.",
            ]
    return "\n".join(lines) + "\n"

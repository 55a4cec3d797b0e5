"""The cost report as one document model: titled sections of tables (report/tables.py),
paragraphs and charts. report/markdown.py and report/html.py only lay it out, so the page and
the Markdown carry the same sections, tables and sentences and cannot drift apart; charts are
drawn on the page only (the Markdown has their figures as tables).

Paragraphs mark `**bold**` and `` `code` `` as Markdown does; the page renders both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.core.units import human_bytes
from pipeline.report import tables
from pipeline.report.dry_run_printout import si
from pipeline.report.tables import Table, usd


@dataclass(frozen=True)
class Chart:
    """Grouped horizontal bars: per group (a row label) one bar per series."""

    label: str  # what the chart shows (its accessible name)
    groups: list[tuple[str, dict[str, float]]]
    series: list[tuple[str, str, str]]  # (key, legend name, colour)
    axis: str  # the value axis' label
    log: bool = False
    unit: str = "bytes"  # "bytes" (values shown as human_bytes) or a count's name


@dataclass(frozen=True)
class Section:
    title: str
    blocks: list[Table | Chart | str] = field(default_factory=list)


BYTES_SERIES = [
    ("retained_before", "retained now", "#4a6fa5"),
    ("retained_after", "retained after plan", "#9cc0e7"),
    ("read_per_month", "read per month", "#e0823d"),
]
SPLIT_SERIES = [("train", "train", "#4a6fa5"), ("valid", "valid", "#e0823d")]


def title(r: dict[str, Any]) -> str:
    return f"Cost report: {r['dataset']}"


def preamble(r: dict[str, Any]) -> str:
    a = r["assumptions"]
    return (
        f"{r['generated_at']} · prices per month, GB = {a['bytes_per_gb']:,} B ·"
        f" pipeline runs/month {a['runs_per_month']:g} (stats: {a['stats'] or 'none'}) ·"
        f" training epochs/month {a['epochs_per_month']:g} ({a['training_reads']})"
    )


def sections(r: dict[str, Any]) -> list[Section]:
    once = r["apply_once"]
    out = [
        Section(
            "Monthly cost",
            [
                tables.monthly_cost(r),
                f"The plan saves **{usd(r['savings_usd_per_month'])} per month**; applying it"
                f" once costs {usd(once['total_usd'])} ({once['copies']} COPY ="
                f" {usd(once['copy_usd'])}, minimum-duration charges"
                f" {usd(once['early_delete_usd'])}) and deletes {once['deletes']} objects"
                f" ({human_bytes(once['delete_bytes'])}).",
            ],
        ),
        Section("Retained by data class and storage class", [tables.retained(r)]),
        Section(
            "Pipeline and training I/O per month (priced at the storage classes after the plan)",
            [tables.reads(r)],
        ),
        Section("Requests by type", [tables.requests_by_type(r)]),
        Section(
            "Retained vs read by data class",
            [
                Chart(
                    "bytes retained and read per data class",
                    [(x["data_class"], x) for x in r["by_class"]],
                    BYTES_SERIES,
                    "bytes (log scale)",
                    log=True,
                ),
                tables.retained_vs_read(r),
            ],
        ),
    ]
    if r.get("sources"):
        out.append(
            Section(
                "Bytes and tokens per source (newest version; an epoch reads weight x a source)",
                [tables.sources(r)],
            )
        )
    if r.get("data"):
        out.append(data_section(r["data"]))
    n = r["napkin"]
    if n:
        napkin: list[Table | Chart | str] = [tables.napkin(n)]
        if n["request_ratio"]:
            napkin.append(
                f"Small files need {n['request_ratio']:,.3g}x the GET requests of shards."
            )
        out.append(
            Section(
                "One epoch of training: one object per document vs shards"
                f" (version {n['version']})",
                napkin,
            )
        )
    if r.get("projection"):
        out.append(projection_section(r["projection"]))
    return out


def projection_section(bill: dict[str, Any]) -> Section:
    """The monthly bill at `report --corpus-bytes` (report/bill.py)."""
    return Section(
        f"Projected monthly bill at {si(bill['corpus_bytes'])}B of input"
        f" (this dataset x {bill['scale']:,.0f}; `plan --corpus-bytes` dry run)",
        [tables.projection(bill)],
    )


def data_section(data: dict[str, Any]) -> Section:
    """Data quality of the newest version: dedup per source, curation rules, quarantine, tokens
    per split."""
    blocks: list[Table | Chart | str] = [
        "Documents removed as exact and near duplicates, as a share of each source's"
        " documents in; what each curation rule removed or rewrote; quarantined documents by"
        " reason; tokens per source and split.",
        tables.dedup_by_source(data),
    ]
    if data.get("filtered") or data.get("curated"):
        blocks.append(tables.curation_rules(data))
    if data["quarantine"]:
        blocks.append(tables.quarantine_reasons(data))
    blocks += [
        Chart(
            "tokens per source and split",
            [
                (x["source"], {k: float(y["tokens"]) for k, y in x["splits"].items()})
                for x in data["sources"]
            ],
            SPLIT_SERIES,
            "tokens (log scale)",
            log=True,
            unit="tokens",
        ),
        tables.tokens_by_split(data),
    ]
    return Section(f"Data: what version {data['version']} kept", blocks)

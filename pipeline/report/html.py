"""The cost report as one self-contained HTML page: inline CSS, an inline SVG bar chart of bytes
retained (now, after the retention plan) and read per month by data class, the report's tables;
each bar carries its exact byte count (data-bytes). No script, no external stylesheet, font or
image: the page references no URL at all (inline SVG in HTML needs no xmlns).
"""

from __future__ import annotations

import html
from typing import Any

from pipeline.core.units import human_bytes
from pipeline.report import tables
from pipeline.report.tables import Table, usd

SERIES = (
    ("retained_before", "retained now", "#4a6fa5"),
    ("retained_after", "retained after plan", "#9cc0e7"),
    ("read_per_month", "read per month", "#e0823d"),
)
_STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px}
td.n{text-align:right}th{background:#f2f2f2}svg text{font:12px system-ui,sans-serif}"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def chart_svg(by_class: list[dict[str, Any]], width: int = 900) -> str:
    """Grouped horizontal bars, linear scale; each bar carries its exact bytes in data-bytes."""
    label_w, value_w, bar_h, gap = 170, 110, 12, 14
    plot_w = width - label_w - value_w
    top = max((row[k] for row in by_class for k, _, _ in SERIES), default=0) or 1
    height = 30 + len(by_class) * (len(SERIES) * bar_h + gap)
    parts = [
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        ' role="img" aria-label="bytes retained and read per data class">'
    ]
    for i, (_, name, color) in enumerate(SERIES):
        x = label_w + i * 190
        parts.append(
            f'<rect x="{x}" y="4" width="12" height="12" fill="{color}"/>'
            f'<text x="{x + 16}" y="14">{_e(name)}</text>'
        )
    y = 30
    for row in by_class:
        parts.append(
            f'<text x="{label_w - 8}" y="{y + bar_h * 2}" text-anchor="end">'
            f"{_e(row['data_class'])}</text>"
        )
        for key, name, color in SERIES:
            value = row[key]
            w = max(1.0, plot_w * value / top) if value else 0.0
            parts.append(
                f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 2}"'
                f' fill="{color}" data-class="{_e(row["data_class"])}" data-series="{key}"'
                f' data-bytes="{value:.0f}"><title>{_e(row["data_class"])} {_e(name)}:'
                f" {human_bytes(value)}</title></rect>"
                f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 3}">{human_bytes(value)}</text>'
            )
            y += bar_h
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def _table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=n' if i >= t.label_columns else ''}>{_e(c)}</td>" for i, c in enumerate(r)
        )
        + "</tr>"
        for r in t.rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def format_html(r: dict[str, Any]) -> str:
    once, a = r["apply_once"], r["assumptions"]
    sections = [
        f"<h1>Cost report: {_e(r['dataset'])}</h1>",
        f"<p>{_e(r['generated_at'])} · GB = {a['bytes_per_gb']:,} B · pipeline runs/month"
        f" {a['runs_per_month']:g} (stats: {_e(a['stats'] or 'none')}) · training epochs/month"
        f" {a['epochs_per_month']:g} ({_e(a['training_reads'])})</p>",
        "<h2>Retained vs read by data class</h2>",
        chart_svg(r["by_class"]),
        "<h2>Monthly cost</h2>",
        _table(tables.monthly_cost(r)),
        f"<p>The plan saves <b>{usd(r['savings_usd_per_month'])} per month</b>; applying it once"
        f" costs {usd(once['total_usd'])} ({once['copies']} COPY, minimum-duration charges"
        f" {usd(once['early_delete_usd'])}) and deletes {once['deletes']} objects"
        f" ({human_bytes(once['delete_bytes'])}).</p>",
        "<h2>Retained by data class and storage class</h2>",
        # the page is the short version: object counts stay in the Markdown (as per-object sizes
        # and PUT costs below do)
        _table(tables.retained(r).without("objects", "objects after")),
        "<h2>Pipeline and training I/O per month</h2>",
        _table(tables.reads(r)),
        "<h2>Requests by type</h2>",
        _table(tables.requests_by_type(r)),
    ]
    if r.get("sources"):
        sections += ["<h2>Bytes and tokens per source</h2>", _table(tables.sources(r))]
    n = r["napkin"]
    if n:
        sections += [
            f"<h2>One epoch of training: small files vs shards ({_e(n['version'])})</h2>",
            _table(tables.napkin(n).without("bytes/object", "PUT $ to write")),
        ]
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>Cost report"
        f"</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )

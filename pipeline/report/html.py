"""The cost report as one self-contained HTML page: report/document.py's sections (the same
tables and sentences as the Markdown) plus inline SVG bar charts drawn here. Each bar carries
its exact value (data-bytes, or data-value for counts). No script, no external stylesheet, font
or image: the page references no URL at all (inline SVG in HTML needs no xmlns).

Layout for narrow windows: charts are 640 units wide and shrink with the page (viewBox, max
width 100%); tables wrap their cells, and a table still too wide scrolls inside its own box.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from pipeline.core.units import human_bytes
from pipeline.report import document
from pipeline.report.document import Chart
from pipeline.report.tables import Table

_STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#222;max-width:1100px}
h1,h2,p{overflow-wrap:anywhere}h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}
.t{overflow-x:auto;margin:.5em 0 1.2em}table{border-collapse:collapse;font-size:12.5px}
td,th{border:1px solid #ccc;padding:3px 4px;vertical-align:top}td.n{text-align:right;
white-space:nowrap}th{background:#f2f2f2;font-weight:600}tr.s td{font-weight:700}
svg{display:block;width:100%;max-width:640px;height:auto}svg text{font:12px system-ui,sans-serif}
code{background:#f4f4f4;padding:0 2px}"""
WIDTH, LABEL_W, VALUE_W = 640, 110, 78


def _e(x: Any) -> str:
    return html.escape(str(x))


def _inline(text: str) -> str:
    """A paragraph's Markdown marks (**bold**, `code`) as HTML, the rest escaped."""
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", _e(text))
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


class _Scale:
    """Values to x offsets in [0, width]: log10 between whole decades, or linear from 0."""

    def __init__(self, values: list[float], width: float, log: bool) -> None:
        positive = [v for v in values if v > 0] or [1.0]
        self.width, self.log = width, log
        if log:
            self.lo = math.floor(math.log10(min(positive)))
            self.hi = max(self.lo + 1, math.ceil(math.log10(max(positive))))
        else:
            step = 10 ** math.floor(math.log10(max(positive) / 4))
            self.step = next(s * step for s in (1, 2, 5, 10) if max(positive) / (s * step) <= 5)
            self.hi = math.ceil(max(positive) / self.step) * self.step

    def x(self, v: float) -> float:
        if v <= 0:
            return 0.0
        if self.log:
            return self.width * (math.log10(v) - self.lo) / (self.hi - self.lo)
        return self.width * v / self.hi

    def ticks(self) -> list[float]:
        if not self.log:
            return [i * self.step for i in range(round(self.hi / self.step) + 1)]
        every = 1 if self.hi - self.lo <= 6 else 3
        return [10.0**d for d in range(self.lo, self.hi + 1) if (d - self.lo) % every == 0]


def _short(v: float, unit: str) -> str:
    """A tick label: 1 kB, 10 MB (bytes) or 1k, 10M (counts)."""
    if unit == "bytes":
        return human_bytes(v).replace(".00", "")
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def chart_svg(chart: Chart) -> str:
    """Grouped horizontal bars with a value axis (ticks, grid lines, its label) below them."""
    bar_h, gap, top = 13, 12, 28
    plot_w = WIDTH - LABEL_W - VALUE_W
    values = [g[k] for _, g in chart.groups for k, _, _ in chart.series]
    scale = _Scale(values, plot_w, chart.log)
    plot_h = len(chart.groups) * (len(chart.series) * bar_h + gap)
    height = top + plot_h + 40
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{_e(chart.label)}">',
    ]
    for i, (_, name, color) in enumerate(chart.series):  # the legend, one row
        x = LABEL_W + i * 160
        parts.append(
            f'<rect x="{x}" y="6" width="12" height="12" fill="{color}"/>'
            f'<text x="{x + 16}" y="16">{_e(name)}</text>'
        )
    for t in scale.ticks():
        x = LABEL_W + scale.x(t)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{top + plot_h}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
            f"{_e(_short(t, chart.unit))}</text>"
        )
    parts.append(
        f'<text x="{LABEL_W + plot_w / 2:.0f}" y="{top + plot_h + 32}" text-anchor="middle">'
        f"{_e(chart.axis)}</text>"
    )
    y = top
    attr = "data-bytes" if chart.unit == "bytes" else "data-value"
    for label, group in chart.groups:
        parts.append(
            f'<text x="{LABEL_W - 6}" y="{y + bar_h * len(chart.series) / 2 + 4:.0f}"'
            f' text-anchor="end">{_e(label)}</text>'
        )
        for key, name, color in chart.series:
            value = group[key]
            text = human_bytes(value) if chart.unit == "bytes" else f"{value:,.0f}"
            w = max(1.0, scale.x(value)) if value else 0.0
            parts.append(
                f'<rect x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{bar_h - 2}"'
                f' fill="{color}" data-class="{_e(label)}" data-series="{key}"'
                f' {attr}="{value:.0f}"><title>{_e(label)} {_e(name)}: {_e(text)}</title></rect>'
                f'<text x="{LABEL_W + w + 4:.1f}" y="{y + bar_h - 3}">{_e(text)}</text>'
            )
            y += bar_h
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def _breakable(text: str) -> str:
    """Escaped, with line-break opportunities after / and _ (narrow columns wrap there)."""
    return re.sub(r"([/_])", r"\1<wbr>", _e(text))


def _table(t: Table) -> str:
    head = "".join(f"<th>{_breakable(h)}</th>" for h in t.headers)
    body = "".join(
        ("<tr class=s>" if i in t.strong_rows else "<tr>")
        + "".join(
            f"<td class=n>{_e(c)}</td>" if j >= t.label_columns else f"<td>{_breakable(c)}</td>"
            for j, c in enumerate(row)
        )
        + "</tr>"
        for i, row in enumerate(t.rows)
    )
    return f"<div class=t><table><tr>{head}</tr>{body}</table></div>"


def format_html(r: dict[str, Any]) -> str:
    parts = [f"<h1>{_e(document.title(r))}</h1>", f"<p>{_inline(document.preamble(r))}</p>"]
    for section in document.sections(r):
        parts.append(f"<h2>{_inline(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append(_table(block))
            elif isinstance(block, Chart):
                parts.append(chart_svg(block))
            else:
                parts.append(f"<p>{_inline(block)}</p>")
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1"><title>Cost report'
        f"</title><style>{_STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )

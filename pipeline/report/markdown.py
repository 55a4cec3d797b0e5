"""The cost report (report/build.py) as Markdown, for the terminal: report/document.py's
sections laid out as headings, tables and paragraphs (charts are the page's; their figures
are in the tables next to them)."""

from __future__ import annotations

from typing import Any

from pipeline.report import document
from pipeline.report.document import Chart
from pipeline.report.tables import Table


def table_lines(t: Table) -> list[str]:
    rows = [
        [f"**{c}**" if i in t.strong_rows and c else c for c in row] for i, row in enumerate(t.rows)
    ]
    lines = ["| " + " | ".join(t.headers) + " |", "|" + "|".join("---" for _ in t.headers) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def format_markdown(r: dict[str, Any]) -> str:
    lines = [f"# {document.title(r)}", "", document.preamble(r)]
    for section in document.sections(r):
        lines += ["", f"## {section.title}"]
        for block in section.blocks:
            if isinstance(block, Table):
                lines += ["", *table_lines(block)]
            elif not isinstance(block, Chart):
                lines += ["", block]
    return "\n".join(lines) + "\n"

"""URL and path block lists: drop a document whose URL (a field of its record) or input path
matches a listed domain or pattern, as the URL filters of C4, RefinedWeb and FineWeb do.

`field` is `path` (the input file, relative to its source's root) or a record field that the
source keeps (`inputs[].keep_fields`, e.g. `url`). `domains_file`: one domain a line; a URL
matches when its host is that domain or a subdomain of it. `patterns_file`: one regular
expression a line, searched in the value. A document without the field is kept. Lines starting
with `#` are comments. Contract: as curate/base.py; the list files' content is in the reuse key.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pyarrow as pa
from pydantic import Field

from pipeline.core.model import StrictModel
from pipeline.curate.base import CurationError, Filter, Verdicts, local_text, register


class BlockListParams(StrictModel):
    field: str = Field(
        "url",
        description="what is matched: 'path' (the input file) or a kept record field such as 'url'",
    )
    domains_file: str | None = Field(
        None,
        description="a UTF-8 file of domains, one a line: a URL on one of them or a subdomain is "
                    "removed",
    )
    patterns_file: str | None = Field(
        None,
        description='a UTF-8 file of regular expressions, one a line, searched in the value',
    )


def _entries(path: str | None) -> list[str]:
    if path is None:
        return []
    lines = local_text(path).splitlines()
    return [s for line in lines if (s := line.strip()) and not s.startswith("#")]


def _compiled(path: str | None) -> list[re.Pattern[str]]:
    patterns = []
    for pattern in _entries(path):
        try:
            patterns.append(re.compile(pattern))
        except re.error as e:
            raise CurationError(f"{path}: pattern {pattern!r} is not a regular expression:"
                                f" {e}") from None  # fmt: skip
    return patterns


@register
class BlockList(Filter):
    """URL and path block lists: listed domains (and subdomains) and patterns."""

    name = "block_list"
    Params = BlockListParams

    def __init__(self, params: BlockListParams) -> None:
        super().__init__(params)
        self._domains = {d.lower().lstrip(".") for d in _entries(params.domains_file)}
        self._patterns = _compiled(params.patterns_file)

    @classmethod
    def check(cls, params: BlockListParams) -> None:
        _entries(params.domains_file)
        _compiled(params.patterns_file)

    @classmethod
    def files_for(cls, params: BlockListParams) -> list[str]:
        return [f for f in (params.domains_file, params.patterns_file) if f]

    def judge(self, value: str | None) -> str | None:
        if not value:
            return None
        if self._domains:
            host = (urlsplit(value if "//" in value else f"//{value}").hostname or "").lower()
            parts = host.split(".")
            for i in range(len(parts)):
                if ".".join(parts[i:]) in self._domains:
                    return f"{self.params.field} domain {'.'.join(parts[i:])} is blocked"
        for pattern in self._patterns:
            if pattern.search(value):
                return f"{self.params.field} matches {pattern.pattern!r}"
        return None

    def __call__(self, batch: pa.Table) -> Verdicts:
        column = "source" if self.params.field == "path" else f"keep.{self.params.field}"
        if column not in batch.column_names:
            return Verdicts([None] * batch.num_rows)
        return Verdicts([self.judge(v) for v in batch[column].to_pylist()])

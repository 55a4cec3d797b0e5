"""FineWeb's quality filter (Penedo et al. 2024, "The FineWeb Datasets: Decanting the Web for
the Finest Text Data at Scale", section 3.3's custom filters), and datatrove's newline rule.

A document is removed when the share of its lines ending in terminal punctuation is under 0.12,
the share of its line characters in lines that repeat an earlier line is over 0.1 (the paper's
value; datatrove ships 0.01), the share of lines of at most 30 characters is over 0.67, or it
has more than 0.3 newlines per word. Lines and words as curate/text.py measures them.
Contract: as curate/base.py.
"""

from __future__ import annotations

from itertools import repeat

from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, above, below, fraction, register

STOP_CHARS = (".", "'", '"', "!", "?", "”", "’")


class FineWebParams(StrictModel):
    min_punct_lines: Fraction = 0.12
    max_dup_line_chars: Fraction = 0.1
    max_short_lines: Fraction = 0.67
    short_line_chars: int = Field(30, ge=0)
    max_newlines_per_word: float = Field(0.3, ge=0)
    stop_chars: tuple[str, ...] = STOP_CHARS


@register
class FineWebQuality(Filter):
    name = "fineweb_quality"
    Params = FineWebParams

    def judge(self, text: str) -> str | None:
        p: FineWebParams = self.params
        lines = t.lines(text)
        if not lines:
            return "lines=0 < 1"
        # each rule measured only when the ones before it passed: the same first reason
        punct = sum(map(str.endswith, lines, repeat(p.stop_chars))) / len(lines)
        lengths = list(map(len, lines))
        reason = below("punct_lines", punct, p.min_punct_lines) or above(
            "dup_line_chars", fraction(t.duplicates(lines)[1], sum(lengths)), p.max_dup_line_chars
        ) or above(
            "short_lines",
            sum(map(p.short_line_chars.__ge__, lengths)) / len(lines),
            p.max_short_lines,
        )  # fmt: skip
        if reason:
            return reason
        newlines = text.count("\n")
        if not newlines:  # 0 per word, whatever the words
            return None
        return above(
            "newlines_per_word", fraction(newlines, len(t.words(text))), p.max_newlines_per_word
        )

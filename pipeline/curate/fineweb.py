"""FineWeb's quality filter (Penedo et al. 2024, "The FineWeb Datasets: Decanting the Web for
the Finest Text Data at Scale", section 3.3's custom filters), and datatrove's newline rule.

A document is removed when the share of its lines ending in terminal punctuation is under 0.12,
the share of its line characters in lines that repeat an earlier line is over 0.1 (the paper's
value; datatrove ships 0.01), the share of lines of at most 30 characters is over 0.67, or it
has more than 0.3 newlines per word. Lines and words as curate/text.py measures them.
Contract: as curate/base.py.
"""

from __future__ import annotations

from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, above, below, first, fraction, register

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
        _, dup_chars = t.duplicates(lines)
        words = len(t.words(text))
        return first(
            below(
                "punct_lines",
                sum(line.endswith(p.stop_chars) for line in lines) / len(lines),
                p.min_punct_lines,
            ),
            above("dup_line_chars", fraction(dup_chars, sum(map(len, lines))),
                  p.max_dup_line_chars),  # fmt: skip
            above(
                "short_lines",
                sum(len(line) <= p.short_line_chars for line in lines) / len(lines),
                p.max_short_lines,
            ),
            above("newlines_per_word", fraction(text.count("\n"), words),
                  p.max_newlines_per_word),  # fmt: skip
        )

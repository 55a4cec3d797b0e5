"""FineWeb's quality filter (Penedo et al. 2024, "The FineWeb Datasets: Decanting the Web for
the Finest Text Data at Scale", section 3.3's custom filters), and datatrove's newline rule.

A document is removed when the share of its lines ending in terminal punctuation (a sentence
end of any script, text.SENTENCE_ENDS, or a closing quote) is under 0.12,
the share of its line characters in lines that repeat an earlier line is over 0.1 (the paper's
value; datatrove ships 0.01), the share of lines of at most 30 characters is over 0.67, or it
has more than 0.3 newlines per word. Lines and words as curate/text.py measures them.
Contract: as curate/base.py.
"""

from __future__ import annotations

from itertools import repeat

import pyarrow as pa
from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, Verdicts, above, below, fraction, register
from pipeline.curate.doc_stats import LINES, SCAN, DocStats

# a line "ends in punctuation" when it ends in a sentence end of any script (text.SENTENCE_ENDS:
# Unicode's Sentence_Terminal and the full stops it leaves out, e.g. । ۔ 。) or a closing quote
STOP_CHARS = ("'", '"', "”", "’", *t.SENTENCE_ENDS)


class FineWebParams(StrictModel):
    min_punct_lines: Fraction = Field(
        0.12,
        description='smallest share of lines ending in stop_chars',
    )
    max_dup_line_chars: Fraction = Field(
        0.1,
        description="largest share of line characters in lines repeating an earlier one (the "
                    "paper's 0.1; datatrove ships 0.01)",
    )
    max_short_lines: Fraction = Field(
        0.67,
        description='largest share of lines of at most short_line_chars characters',
    )
    short_line_chars: int = Field(
        30, ge=0,
        description="a short line's most characters",
    )
    max_newlines_per_word: float = Field(
        0.3, ge=0,
        description="most newlines per word (datatrove's rule)",
    )
    stop_chars: tuple[str, ...] = Field(
        STOP_CHARS,
        description="a line ends in punctuation when it ends with one of these (default: the "
                    "sentence ends of every script, text.SENTENCE_ENDS, and closing quotes)",
    )


@register
class FineWebQuality(Filter):
    """FineWeb's quality rules: line punctuation, duplicated lines, short lines, newlines."""

    name = "fineweb_quality"
    DEFINITION = 2  # issue 43: sentence ends of every script
    Params = FineWebParams

    def judge(self, text: str) -> str | None:
        lines = t.lines(text)
        lengths = list(map(len, lines))
        return self._decide(
            len(lines),
            lambda: sum(map(str.endswith, lines, repeat(self.params.stop_chars))),
            lambda: (t.duplicates(lines)[1], sum(lengths)),
            lambda: sum(map(self.params.short_line_chars.__ge__, lengths)),
            text.count("\n"),
            lambda: len(t.words(text)),
        )

    def _decide(self, lines, punct, dup_chars, short, newlines, words) -> str | None:
        """The first rule broken, from the line count, the newline count and the other
        measures as callables, each called only when the rules before it passed."""
        p: FineWebParams = self.params
        if not lines:
            return "lines=0 < 1"
        reason = below("punct_lines", punct() / lines, p.min_punct_lines) or above(
            "dup_line_chars", fraction(*dup_chars()), p.max_dup_line_chars
        ) or above("short_lines", short() / lines, p.max_short_lines)  # fmt: skip
        if reason:
            return reason
        if not newlines:  # 0 per word, whatever the words
            return None
        return above("newlines_per_word", fraction(newlines, words()), p.max_newlines_per_word)

    def needs(self) -> list[tuple] | None:
        """What `decide` reads from a DocStats (None: judge reads the text, without numba)."""
        from pipeline.curate import measures  # numba: imported where a document is scored

        if not measures.available():
            return None
        p: FineWebParams = self.params
        return [SCAN, LINES, ("affixed", tuple(p.stop_chars), True),
                ("short_lines", p.short_line_chars)]  # fmt: skip

    def decide(self, stats: DocStats) -> Verdicts:
        """judge's reasons, from the measured numbers."""
        scan, lines, punct, short = stats.get(*self.needs())
        per_doc = zip(lines.tolist(), punct.tolist(), short.tolist(), scan[:, 0].tolist(),
                      scan[:, 1].tolist(), strict=True)  # fmt: skip
        return Verdicts([
            self._decide(n, lambda x=punct: x, lambda x=(dup, chars): x, lambda x=s: x, nl,
                         lambda x=w: x)  # fmt: skip
            for (n, _, dup, chars), punct, s, nl, w in per_doc
        ])  # fmt: skip

    def __call__(self, batch: pa.Table) -> Verdicts:
        if self.needs() is None:
            return super().__call__(batch)
        return self.decide(DocStats(batch["text"]))

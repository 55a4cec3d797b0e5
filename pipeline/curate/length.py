"""Length bounds: words, characters and mean word length (Gopher's word bounds by default:
Rae et al. 2021, app. A.1.1). A bound set to null is not checked. Contract: as curate/base.py.
"""

from __future__ import annotations

from pydantic import Field

from pipeline.core.model import StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, above, below, first, register


class LengthParams(StrictModel):
    min_words: int | None = Field(
        50, ge=0,
        description='fewest words (whitespace-separated); null: not checked',
    )
    max_words: int | None = Field(
        100_000, ge=1,
        description='most words; null: not checked',
    )
    min_chars: int | None = Field(
        None, ge=0,
        description='fewest characters; null: not checked',
    )
    max_chars: int | None = Field(
        None, ge=1,
        description='most characters; null: not checked',
    )
    min_mean_word_length: float | None = Field(
        3.0, ge=0,
        description='shortest mean word length in characters; null: not checked',
    )
    max_mean_word_length: float | None = Field(
        10.0, gt=0,
        description='longest mean word length in characters; null: not checked',
    )


@register
class Length(Filter):
    """Length bounds: words, characters, mean word length (Gopher's word bounds by default)."""

    name = "length"
    Params = LengthParams

    def judge(self, text: str) -> str | None:
        p: LengthParams = self.params
        words = t.words(text)
        mean = sum(map(len, words)) / len(words) if words else 0.0
        checks = [
            (below, "words", len(words), p.min_words),
            (above, "words", len(words), p.max_words),
            (below, "chars", len(text), p.min_chars),
            (above, "chars", len(text), p.max_chars),
            (below, "mean_word_length", mean, p.min_mean_word_length),
            (above, "mean_word_length", mean, p.max_mean_word_length),
        ]
        return first(*(rule(m, v, b) for rule, m, v, b in checks if b is not None))

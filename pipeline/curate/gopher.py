"""Gopher's quality and repetition filters (Rae et al. 2021, "Scaling Language Models: Methods,
Analysis & Insights from Training Gopher", appendix A.1.1), with the paper's thresholds.

Words, lines and paragraphs as curate/text.py measures them. Character fractions of lines and
paragraphs are of the characters of all lines (or paragraphs); n-gram fractions are of the
characters of all words, each character counted once however many repeated n-grams cover it.
Contract: `judge` returns the first rule the document breaks, in the order the parameters are
listed, as `measure=value > bound`; a document within every bound is kept.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, above, below, first, fraction, register

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = ("•", "-", "*", "‣", "◦", "▪", "●")
ELLIPSES = ("...", "…")


class QualityParams(StrictModel):
    min_words: int = Field(50, ge=0)
    max_words: int = Field(100_000, ge=1)
    min_mean_word_length: float = Field(3.0, ge=0)
    max_mean_word_length: float = Field(10.0, gt=0)
    max_hash_word_ratio: float = Field(0.1, ge=0)  # "#" per word
    max_ellipsis_word_ratio: float = Field(0.1, ge=0)  # "..." or "…" per word
    max_bullet_lines: Fraction = 0.9  # share of lines starting with a bullet
    max_ellipsis_lines: Fraction = 0.3  # share of lines ending with an ellipsis
    min_alpha_words: Fraction = 0.8  # share of words holding an alphabetic character
    min_stop_words: int = Field(2, ge=0)  # occurrences of STOP_WORDS
    stop_words: tuple[str, ...] = STOP_WORDS


@register
class GopherQuality(Filter):
    """Gopher's quality heuristics: length, word shape, symbols, bullets, stop words."""

    name = "gopher_quality"
    Params = QualityParams

    def judge(self, text: str) -> str | None:
        p: QualityParams = self.params
        words = t.words(text)
        n = len(words)
        reason = first(
            below("words", n, p.min_words), above("words", n, p.max_words)
        )
        if reason or n == 0:
            return reason or "words=0 < 1"
        mean = sum(map(len, words)) / n
        lines = t.lines(text)
        stop = set(p.stop_words)
        return first(
            below("mean_word_length", mean, p.min_mean_word_length),
            above("mean_word_length", mean, p.max_mean_word_length),
            above("hash_word_ratio", text.count("#") / n, p.max_hash_word_ratio),
            above(
                "ellipsis_word_ratio",
                (text.count("...") + text.count("…")) / n,
                p.max_ellipsis_word_ratio,
            ),
            above(
                "bullet_lines",
                fraction(sum(line.startswith(BULLETS) for line in lines), len(lines)),
                p.max_bullet_lines,
            ),
            above(
                "ellipsis_lines",
                fraction(sum(line.endswith(ELLIPSES) for line in lines), len(lines)),
                p.max_ellipsis_lines,
            ),
            below(
                "alpha_words",
                sum(any(c.isalpha() for c in w) for w in words) / n,
                p.min_alpha_words,
            ),
            below("stop_words", sum(t.bare(w) in stop for w in words), p.min_stop_words),
        )


def _top_ngram_defaults() -> dict[int, float]:
    return {2: 0.20, 3: 0.18, 4: 0.16}


def _dup_ngram_defaults() -> dict[int, float]:
    return {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


class RepetitionParams(StrictModel):
    max_dup_lines: Fraction = 0.30  # share of lines that repeat an earlier line
    max_dup_paragraphs: Fraction = 0.30
    max_dup_line_chars: Fraction = 0.20  # share of line characters in repeated lines
    max_dup_paragraph_chars: Fraction = 0.20
    max_top_ngram_chars: dict[int, Fraction] = Field(default_factory=_top_ngram_defaults)
    max_dup_ngram_chars: dict[int, Fraction] = Field(default_factory=_dup_ngram_defaults)


@register
class GopherRepetition(Filter):
    """Gopher's repetition removal: repeated lines, paragraphs and n-grams."""

    name = "gopher_repetition"
    Params = RepetitionParams

    def judge(self, text: str) -> str | None:
        p: RepetitionParams = self.params
        lines, paras = t.lines(text), t.paragraphs(text)
        dup_lines, dup_line_chars = t.duplicates(lines)
        dup_paras, dup_para_chars = t.duplicates(paras)
        reason = first(
            above("dup_lines", fraction(dup_lines, len(lines)), p.max_dup_lines),
            above("dup_paragraphs", fraction(dup_paras, len(paras)), p.max_dup_paragraphs),
            above(
                "dup_line_chars",
                fraction(dup_line_chars, sum(map(len, lines))),
                p.max_dup_line_chars,
            ),
            above(
                "dup_paragraph_chars",
                fraction(dup_para_chars, sum(map(len, paras))),
                p.max_dup_paragraph_chars,
            ),
        )
        if reason:
            return reason
        words = t.words(text)
        grams = NGrams(words)
        for n, bound in sorted(p.max_top_ngram_chars.items()):
            reason = above(f"top_{n}gram_chars", grams.top_fraction(n), bound)
            if reason:
                return reason
        for n, bound in sorted(p.max_dup_ngram_chars.items()):
            reason = above(f"dup_{n}gram_chars", grams.duplicated_fraction(n), bound)
            if reason:
                return reason
        return None


class NGrams:
    """Word n-grams of one document as 64-bit rolling hashes (numpy), for the character
    fractions: the most frequent n-gram's, and those covered by any repeated n-gram."""

    _MUL = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, words: list[str]) -> None:
        index: dict[str, int] = {}
        self.ids = np.array([index.setdefault(w, len(index) + 1) for w in words], np.uint64)
        self.lengths = np.array([len(w) for w in words], np.int64)
        self.total = int(self.lengths.sum())

    def _hashes(self, n: int) -> np.ndarray:
        m = len(self.ids) - n + 1
        h = np.zeros(m, np.uint64)
        with np.errstate(over="ignore"):
            for k in range(n):
                h = h * self._MUL + self.ids[k : k + m]
        return h

    def top_fraction(self, n: int) -> float:
        """Characters of the most frequent n-gram times its count, over all word characters
        (0 when no n-gram occurs twice)."""
        if len(self.ids) < n or not self.total:
            return 0.0
        h = self._hashes(n)
        values, first_at, counts = np.unique(h, return_index=True, return_counts=True)
        best = int(np.argmax(counts))
        if counts[best] < 2:
            return 0.0
        at = int(first_at[best])
        return float(counts[best] * self.lengths[at : at + n].sum()) / self.total

    def duplicated_fraction(self, n: int) -> float:
        """Word characters inside any n-gram that occurs more than once, each counted once."""
        if len(self.ids) < n or not self.total:
            return 0.0
        h = self._hashes(n)
        _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
        starts = np.flatnonzero(counts[inverse] > 1)
        if not len(starts):
            return 0.0
        cover = np.zeros(len(self.ids) + 1, np.int64)
        np.add.at(cover, starts, 1)
        np.add.at(cover, starts + n, -1)
        covered = np.cumsum(cover[:-1]) > 0
        return float(self.lengths[covered].sum()) / self.total

"""Gopher's quality and repetition filters (Rae et al. 2021, "Scaling Language Models: Methods,
Analysis & Insights from Training Gopher", appendix A.1.1), with the paper's thresholds.

Words, lines and paragraphs as curate/text.py measures them. Character fractions of lines and
paragraphs are of the characters of all lines (or paragraphs); n-gram fractions are of the
characters of all words, each character counted once however many repeated n-grams cover it.
Where several n-grams are the most frequent, the top n-gram rules measure the one of most
characters (the paper names one; the longest makes the value independent of their order).
A repeated line, paragraph or 5…10-gram counts from its second occurrence: the first is the
text, the rest its repetition (as datatrove counts; the paper does not say). Counting the
first too roughly doubles the share (`dup_ngram_first_too: true`, the n-gram rules only).
Contract: `judge` returns the first rule the document breaks, in the order the parameters are
listed, as `measure=value > bound`; a document within every bound is kept.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress, count, filterfalse, repeat

import numpy as np
import pyarrow as pa
from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import Filter, Verdicts, above, below, first, fraction, register
from pipeline.curate.doc_stats import LINES, PARAGRAPHS, SCAN, DocStats, undecided

STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
BULLETS = ("•", "-", "*", "‣", "◦", "▪", "●")
ELLIPSES = ("...", "…")


class QualityParams(StrictModel):
    min_words: int = Field(
        50, ge=0,
        description='fewest words',
    )
    max_words: int = Field(
        100_000, ge=1,
        description='most words',
    )
    min_mean_word_length: float = Field(
        3.0, ge=0,
        description='shortest mean word length (characters)',
    )
    max_mean_word_length: float = Field(
        10.0, gt=0,
        description='longest mean word length (characters)',
    )
    max_hash_word_ratio: float = Field(
        0.1, ge=0,
        description="most '#' per word",
    )
    max_ellipsis_word_ratio: float = Field(
        0.1, ge=0,
        description="most ellipses ('...' or '…') per word",
    )
    max_bullet_lines: Fraction = Field(
        0.9,
        description='largest share of lines starting with a bullet (•-*‣◦▪●)',
    )
    max_ellipsis_lines: Fraction = Field(
        0.3,
        description='largest share of lines ending with an ellipsis',
    )
    min_alpha_words: Fraction = Field(
        0.8,
        description='smallest share of words holding an alphabetic character',
    )
    min_stop_words: int = Field(
        2, ge=0,
        description="fewest distinct words of stop_words present (the paper's 'at least two of')",
    )
    stop_words: tuple[str, ...] = Field(
        STOP_WORDS,
        description='the stop words (matched lower-cased, punctuation stripped)',
    )


@register
class GopherQuality(Filter):
    """Gopher's quality heuristics: length, word shape, symbols, bullets, stop words."""

    name = "gopher_quality"
    DEFINITION = 2  # issue 43: distinct stop words
    Params = QualityParams

    def judge(self, text: str) -> str | None:
        words = t.words(text)

        def shape() -> tuple[int, int, int, int, int, int]:
            lines = t.lines(text)
            return (
                sum(map(len, words)),
                text.count("#"),
                text.count("...") + text.count("…"),
                len(lines),
                sum(map(str.startswith, lines, repeat(BULLETS))),
                sum(map(str.endswith, lines, repeat(ELLIPSES))),
            )

        def classes() -> tuple[int, int]:
            # once per distinct word, weighted by its count
            counts = Counter(words)
            alpha = sum(compress(counts.values(), map(str.isalpha, counts)))  # letters only
            mixed = filterfalse(str.isalpha, counts)
            alpha += sum(counts[w] for w in mixed if any(map(str.isalpha, w)))
            # distinct stop words: the paper asks for "at least two of" the eight words, so one
            # of them said twice ("To ... to") is one
            stop = frozenset(self.params.stop_words)
            return alpha, len(stop.intersection(t.bare_words(counts)))

        return self._decide(len(words), shape, classes)

    def _decide(self, n: int, shape, classes) -> str | None:
        """The first rule broken, from the word count, `shape()`: (word characters, "#",
        ellipses, lines, bullet lines, ellipsis lines) and `classes()`: (words holding a
        letter, stop words), each measured only when the rules before it passed."""
        p: QualityParams = self.params
        reason = first(below("words", n, p.min_words), above("words", n, p.max_words))
        if reason or n == 0:
            return reason or "words=0 < 1"
        chars, hashes, ellipses, lines, bullets, ellipsis_lines = shape()
        mean = chars / n
        reason = first(
            below("mean_word_length", mean, p.min_mean_word_length),
            above("mean_word_length", mean, p.max_mean_word_length),
            above("hash_word_ratio", hashes / n, p.max_hash_word_ratio),
            above("ellipsis_word_ratio", ellipses / n, p.max_ellipsis_word_ratio),
            above("bullet_lines", fraction(bullets, lines), p.max_bullet_lines),
            above("ellipsis_lines", fraction(ellipsis_lines, lines), p.max_ellipsis_lines),
        )
        if reason:
            return reason
        alpha, stop = classes()
        return first(
            below("alpha_words", alpha / n, p.min_alpha_words),
            below("stop_words", stop, p.min_stop_words),
        )

    def needs(self) -> list[tuple] | None:
        """What `decide` reads from a DocStats (None: judge reads the text, where a stop word
        is not ASCII or longer than 7 characters, or numba is missing)."""
        from pipeline.curate import measures  # numba: imported where a document is scored

        if not (measures.available() and measures.packable(self.params.stop_words)):
            return None
        return [SCAN, ("classes", t.BARE_STRIP, tuple(self.params.stop_words)), LINES,
                ("affixed", BULLETS, False), ("affixed", ELLIPSES, True)]  # fmt: skip

    def decide(self, stats: DocStats) -> Verdicts:
        """judge's reasons, from the measured numbers."""
        scan, classes, lines, bullets, ellipsis_lines = stats.get(*self.needs())
        per_doc = zip(scan[:, 1].tolist(), scan[:, 2].tolist(), classes.tolist(),
                      lines[:, 0].tolist(), bullets.tolist(), ellipsis_lines.tolist(),
                      strict=True)  # fmt: skip
        why = []
        for n, chars, (hashes, dots, alpha, stop), *marks in per_doc:
            shape = (chars, hashes, dots, *marks)
            why.append(self._decide(n, lambda s=shape: s, lambda c=(alpha, stop): c))
        return Verdicts(why)

    def __call__(self, batch: pa.Table) -> Verdicts:
        if self.needs() is None:
            return super().__call__(batch)
        return self.decide(DocStats(batch["text"]))


def _top_ngram_defaults() -> dict[int, float]:
    return {2: 0.20, 3: 0.18, 4: 0.16}


def _dup_ngram_defaults() -> dict[int, float]:
    return {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}


class RepetitionParams(StrictModel):
    max_dup_lines: Fraction = Field(
        0.30,
        description='largest share of lines repeating an earlier line',
    )
    max_dup_paragraphs: Fraction = Field(
        0.30,
        description='largest share of paragraphs repeating an earlier paragraph',
    )
    max_dup_line_chars: Fraction = Field(
        0.20,
        description='largest share of line characters in lines repeating an earlier one',
    )
    max_dup_paragraph_chars: Fraction = Field(
        0.20,
        description='largest share of paragraph characters in repeated paragraphs',
    )
    max_top_ngram_chars: dict[int, Fraction] = Field(
        default_factory=_top_ngram_defaults,
        description='n: largest share of word characters in the most frequent n-gram',
    )
    max_dup_ngram_chars: dict[int, Fraction] = Field(
        default_factory=_dup_ngram_defaults,
        description="n: largest share of word characters inside repeated n-grams (each counted "
                    "once)",
    )
    # False: the words of a repeated n-gram's later occurrences (the first is the text, the
    # rest its repetition: as the line and paragraph rules and datatrove count); True: every
    # occurrence, the first too (about twice the share on the same text)
    dup_ngram_first_too: bool = Field(
        False,
        description="false: a repeated n-gram counts from its second occurrence (as lines, "
                    "paragraphs and datatrove); true: its first occurrence too",
    )


@register
class GopherRepetition(Filter):
    """Gopher's repetition removal: repeated lines, paragraphs and n-grams."""

    name = "gopher_repetition"
    # 2, issue 43: repeated n-grams from their second occurrence; 3: of equally frequent
    # n-grams, the top n-gram rules measure the one of most characters (was: the smaller hash)
    DEFINITION = 3
    Params = RepetitionParams

    def judge(self, text: str) -> str | None:
        lines, paras = t.lines(text), t.paragraphs(text)
        reason = self._line_reason(
            (*t.duplicates(lines), len(lines), sum(map(len, lines))),
            (*t.duplicates(paras), len(paras), sum(map(len, paras))),
        )
        if reason:
            return reason
        return self._ngram_reason(*NGrams(t.words(text)).first_exceeded(self._rules()))

    def _line_reason(self, lines, paras) -> str | None:
        """The first line or paragraph rule broken, from (repeated items, their characters,
        items, characters) of the lines and of the paragraphs."""
        p: RepetitionParams = self.params
        return first(
            above("dup_lines", fraction(lines[0], lines[2]), p.max_dup_lines),
            above("dup_paragraphs", fraction(paras[0], paras[2]), p.max_dup_paragraphs),
            above("dup_line_chars", fraction(lines[1], lines[3]), p.max_dup_line_chars),
            above("dup_paragraph_chars", fraction(paras[1], paras[3]), p.max_dup_paragraph_chars),
        )

    def _ngram_reason(self, r: int, value: float) -> str | None:
        """The reason for NGrams.first_exceeded's answer (r < 0: none)."""
        if r < 0:
            return None
        n, kind, bound = self._rules()[r]
        return above(f"{'top' if kind == TOP else 'dup'}_{n}gram_chars", value, bound)

    def _rules(self) -> list[tuple[int, int, float]]:
        p: RepetitionParams = self.params
        rules = [(n, TOP, bound) for n, bound in sorted(p.max_top_ngram_chars.items())]
        kind = DUPLICATED if p.dup_ngram_first_too else REPEATED
        return rules + [(n, kind, b) for n, b in sorted(p.max_dup_ngram_chars.items())]

    def needs(self) -> list[tuple] | None:
        """What `decide` reads from a DocStats (None: judge reads the text, where numba is
        missing or a rule's n is under 1); the n-gram rules are asked for, not declared."""
        from pipeline.curate import measures, ngram_kernel  # numba: where a document is scored

        if not (measures.available() and ngram_kernel.available()) or any(
            n < 1 for n, _, _ in self._rules()
        ):
            return None
        return [LINES, PARAGRAPHS]

    def decide(self, stats: DocStats) -> Verdicts:
        """judge's reasons, from the measured numbers: the n-gram rules measured only for the
        documents the line and paragraph rules keep (doc_stats.undecided: the same bounds)."""
        p: RepetitionParams = self.params
        bounds = (p.max_dup_lines, p.max_dup_paragraphs, p.max_dup_line_chars,
                  p.max_dup_paragraph_chars)  # fmt: skip
        ngram = ("ngram", tuple(self._rules()), bounds)
        lines, paras, found = stats.get(LINES, PARAGRAPHS, ngram, keeps=lambda values: undecided(
            values[LINES], values[PARAGRAPHS], bounds) & (values[ngram][:, 0] < 0))  # fmt: skip
        why = []
        for (nl, dl, dl_chars, l_chars), (n_p, dp, dp_chars, p_chars), (r, v), todo in zip(
            lines.tolist(), paras.tolist(), found.tolist(),
            undecided(lines, paras, bounds).tolist(), strict=True,
        ):  # fmt: skip
            if todo:
                why.append(self._ngram_reason(int(r), v))
            else:
                why.append(self._line_reason((dl, dl_chars, nl, l_chars),
                                             (dp, dp_chars, n_p, p_chars)))  # fmt: skip
        return Verdicts(why)

    def __call__(self, batch: pa.Table) -> Verdicts:
        if self.needs() is None:
            return super().__call__(batch)
        return self.decide(DocStats(batch["text"]))


# n-gram rules: the most frequent one's characters; the characters of every occurrence of a
# repeated n-gram (DUPLICATED), or of its occurrences after the first (REPEATED)
TOP, DUPLICATED, REPEATED = 0, 1, 2


class NGrams:
    """Word n-grams of one document as 64-bit rolling hashes (numpy), for the character
    fractions: the most frequent n-gram's, and those covered by any repeated n-gram.
    `first_exceeded` runs curate/ngram_kernel.py's compiled loop where numba is available: the
    same values."""

    _MUL = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, words: list[str]) -> None:
        # ids 1, 2, ... in order of first occurrence
        index = dict(zip(dict.fromkeys(words), count(1)))
        self.ids = np.fromiter(map(index.__getitem__, words), np.uint64, len(words))
        self.lengths = np.fromiter(map(len, words), np.int64, len(words))
        self.total = int(self.lengths.sum())
        self._grams: dict[int, np.ndarray] = {}

    def first_exceeded(self, rules: list[tuple[int, int, float]]) -> tuple[int, float]:
        """(index of the first rule (n, TOP or DUPLICATED, bound) whose fraction exceeds its
        bound, that fraction), or (-1, 0.0)."""
        from pipeline.curate import ngram_kernel  # numba: imported where a document is scored

        if ngram_kernel.available():
            return ngram_kernel.first_exceeded(self.ids, self.lengths, rules)
        for r, (n, kind, bound) in enumerate(rules):
            value = self.top_fraction(n) if kind == TOP else self.duplicated_fraction(
                n, first_too=kind == DUPLICATED)
            if value > bound:
                return r, value
        return -1, 0.0

    def _hashes(self, n: int) -> np.ndarray:
        """h_n[i] = h_(n-1)[i] * MUL + ids[i + n - 1] (h_1 = ids), extended from the longest
        n-gram hashed so far."""
        k = max((j for j in self._grams if j <= n), default=1)
        h = self._grams.get(k, self.ids)
        with np.errstate(over="ignore"):
            for j in range(k + 1, n + 1):
                h = h[:-1] * self._MUL + self.ids[j - 1 :]
                self._grams[j] = h
        return h

    def top_fraction(self, n: int) -> float:
        """Characters of the most frequent n-gram times its count, over all word characters
        (0 when no n-gram occurs twice; among equally frequent ones, the one of most
        characters, whatever their order in the text)."""
        if len(self.ids) < n or not self.total:
            return 0.0
        h = self._hashes(n)
        order = np.argsort(h, kind="stable")
        ordered = h[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        counts = np.diff(np.r_[starts, len(ordered)])
        most = int(counts.max())
        if most < 2:
            return 0.0
        ends = np.r_[0, np.cumsum(self.lengths)]
        at = order[starts[counts == most]]  # an occurrence of each most frequent n-gram
        return float(most * int((ends[at + n] - ends[at]).max())) / self.total

    def duplicated_fraction(self, n: int, first_too: bool = False) -> float:
        """Word characters inside an occurrence of an n-gram after its first one (first_too:
        inside any occurrence of an n-gram that occurs more than once), each counted once."""
        if len(self.ids) < n or not self.total:
            return 0.0
        h = self._hashes(n)
        order = np.argsort(h, kind="stable")  # equal hashes in text order: the first is first
        ordered = h[order]
        same = ordered[1:] == ordered[:-1]
        if not same.any():
            return 0.0
        repeated = np.zeros(len(h), bool)
        repeated[order[1:][same]] = True
        if first_too:
            repeated[order[:-1][same]] = True
        starts = np.flatnonzero(repeated)
        opened = np.zeros(len(self.ids) + 1, np.int64)
        closed = np.zeros(len(self.ids) + 1, np.int64)
        opened[starts] = 1
        closed[starts + n] = 1
        covered = np.cumsum(opened[:-1] - closed[:-1]) > 0
        return float(self.lengths[covered].sum()) / self.total

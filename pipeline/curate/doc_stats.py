"""The numbers the Gopher, FineWeb and C4 filters decide from, per document of a batch, shared
by the steps of a chain (pure: no I/O, no Ray).

A `DocStats` holds, for the documents of one batch, one array per need (below), and measures
on the first request, in one pass over the text (curate/measures.py: ~1 MB per kernel call),
what was asked and every need the chain's steps declared: the text is scanned once for all of
them, and a filter then only compares numbers. The chain keeps it while the text column is
unchanged: a filter's removals `keep` the kept rows' numbers (a removed document is never
measured again), the documents a transform rewrote are measured again when a step next asks
(`rewritten`). Gopher repetition's n-gram rules are measured on request only, for the
documents its line and paragraph rules leave undecided (-1, 0.0 for the others), and the word
classes another step declared, in the same pass, for the documents it keeps (`get`'s keeps).

Needs are tuples (hashable, so equal needs of two steps are measured once):
  SCAN                        (n, 4): newlines, words, word characters, sentence ends
  ("classes", punct, stops)   (n, 4): "#", ellipses, words holding a letter, stop words
  LINES, PARAGRAPHS           (n, 4): items, repeated items, their characters, characters
  ("affixed", patterns, end)  (n,): lines starting (end False) or ending with a pattern
  ("short_lines", chars)      (n,): lines of at most `chars` characters
  ("ngram", rules, bounds)    (n, 2): first rule exceeded (-1: none) and its fraction, where
                              no line/paragraph fraction exceeds `bounds` (gopher.py's order)
Contract: a document's numbers depend only on its text and the need (word classes left 0 for
a document the asking filter removes), so decisions taken from them are the same whatever the
batch, its other documents and the steps before.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SCAN, LINES, PARAGRAPHS = ("scan",), ("lines",), ("paragraphs",)
_WIDTH = {"scan": 4, "classes": 4, "lines": 4, "paragraphs": 4, "ngram": 2}


class DocStats:
    """Per-document numbers of a batch's texts (a string array without nulls)."""

    def __init__(self, texts: pa.Array | pa.ChunkedArray, declared: Iterable[tuple] = ()) -> None:
        self.texts = texts
        self.declared = frozenset(declared)  # measured with the first request
        self.values: dict[tuple, np.ndarray] = {}
        self.stale: pa.Array | None = None  # rows rewritten since their numbers were measured

    def __len__(self) -> int:
        return len(self.texts)

    def get(self, *needs: tuple, keeps=None) -> list[np.ndarray]:
        """Each need's array, measuring in one pass those not measured yet (with the declared
        ones, unless a pass already measured them). `keeps`: the asking filter's kept rows, as
        a function of the asked needs' arrays (a batch's rows); the word classes declared by
        another step are then measured for those rows only, the others being removed next."""
        if self.stale is not None:
            mask, self.stale = self.stale.to_numpy(zero_copy_only=False), None
            again = measure(self.texts.filter(mask), set(self.values))
            for need, values in again.items():
                self.values[need][mask] = values
        missing = {n for n in needs if n not in self.values}
        if missing:
            others = self.declared - self.values.keys() - set(needs)
            self.values.update(measure(self.texts, missing | others, keeps if others else None))
        return [self.values[n] for n in needs]

    def keep(self, kept: pa.Array, texts: pa.Array | pa.ChunkedArray) -> None:
        """Only the rows where `kept` (a boolean array) is true remain: `texts`, the texts
        filtered so."""
        mask = kept.to_numpy(zero_copy_only=False)
        self.texts = texts
        self.values = {need: values[mask] for need, values in self.values.items()}
        if self.stale is not None:
            self.stale = self.stale.filter(kept)

    def rewritten(self, texts: pa.Array | pa.ChunkedArray, changed: pa.Array) -> None:
        """The texts are now `texts`, and differ where `changed` is true: those rows are
        measured again, for every need measured so far, when a step next asks."""
        self.texts = texts
        if self.values and changed.true_count:
            self.stale = changed if self.stale is None else pc.or_(self.stale, changed)


def measure(texts: pa.Array | pa.ChunkedArray, needs: set[tuple], keeps=None
            ) -> dict[tuple, np.ndarray]:  # fmt: skip
    """Every need's array over `texts`, in one pass of ~1 MB batches; the word classes only for
    the rows `keeps` (DocStats.get) keeps, when given."""
    from pipeline.curate import measures  # numba: imported where a document is scored

    n = len(texts)
    needs = set(needs) | {SCAN}
    for need in list(needs):
        if need[0] == "ngram":  # its undecided documents are those of the line rules
            needs |= {LINES, PARAGRAPHS}
        elif need[0] in ("affixed", "short_lines"):
            needs.add(LINES)
    out = {need: _empty(need, n) for need in needs}
    classes = next((need[1:] for need in needs if need[0] == "classes"), None)
    at = 0
    for m in measures.measured(texts, classes):
        rows = slice(at, at + len(m.offsets) - 1)
        at = rows.stop
        _measure_batch(m, needs, {need: values[rows] for need, values in out.items()}, keeps)
    return out


def _empty(need: tuple, n: int) -> np.ndarray:
    shape = (n, _WIDTH[need[0]]) if need[0] in _WIDTH else n
    return np.zeros(shape, np.float64 if need[0] == "ngram" else np.int64)


def _measure_batch(m, needs: set[tuple], out: dict[tuple, np.ndarray], keeps) -> None:
    """Fill `out` (views on the batch's rows) from one measured batch."""
    from pipeline.curate import ngram_kernel

    out[SCAN][:] = m.per_doc[:, :4]
    lines = None
    for need in sorted(needs, key=_order):
        kind = need[0]
        if kind == "classes":  # last: after what `keeps` reads
            m.word_classes(need[1:], None if keeps is None else keeps(out))
            out[need][:] = m.per_doc[:, 4:]
        elif kind in ("lines", "paragraphs"):
            items = m.lines() if kind == "lines" else m.paragraphs()
            lines = items if kind == "lines" else lines
            out[need][:, 0] = items.per_doc()
            out[need][:, 1:] = m.duplicates(items)
        elif kind == "affixed":
            out[need][:] = m.affixed(lines, need[1], at_end=need[2])
        elif kind == "short_lines":
            short = np.concatenate([[0], np.cumsum(lines.cps <= need[1])])
            out[need][:] = short[lines.first[1:]] - short[lines.first[:-1]]
        elif kind == "ngram":
            rules, bounds = need[1], need[2]
            todo = undecided(out[LINES], out[PARAGRAPHS], bounds)
            rule, value = ngram_kernel.first_exceeded_batch(
                m.ids(m.words, todo), m.words.cps, m.words.first, todo, list(rules)
            )
            out[need][:, 0], out[need][:, 1] = rule, value


def _order(need: tuple) -> int:
    """Lines before what is measured on them, the n-gram rules after the line rules, the word
    classes last."""
    return {"lines": 0, "paragraphs": 1, "ngram": 3, "classes": 4}.get(need[0], 2)


def undecided(lines: np.ndarray, paragraphs: np.ndarray, bounds: tuple) -> np.ndarray:
    """Rows where no fraction of gopher.GopherRepetition's line and paragraph rules exceeds its
    bound, bounds = (dup lines, dup paragraphs, dup line chars, dup paragraph chars): the
    fractions as base.fraction computes them (0 over 0 items)."""
    within = np.ones(len(lines), np.bool_)
    for items, part, whole, bound in (
        (lines, 1, 0, bounds[0]), (paragraphs, 1, 0, bounds[1]),
        (lines, 2, 3, bounds[2]), (paragraphs, 2, 3, bounds[3]),
    ):  # fmt: skip
        share = np.divide(items[:, part], items[:, whole], out=np.zeros(len(items)),
                          where=items[:, whole] != 0)  # fmt: skip
        within &= ~(share > bound)
    return within

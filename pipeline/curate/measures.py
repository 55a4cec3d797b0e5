"""The measures of curate/text.py over a batch of documents, compiled with numba (pure: no I/O):
words, lines and paragraphs as byte spans of an Arrow string array's buffers, and the counts
the Gopher and FineWeb rules take from them, with no Python call per word or line (the loops:
curate/stats_kernel.py).

The units are text.py's, on UTF-8: words are runs of characters that are not str.isspace (the
set str.split uses; `SPACE` is built from str.isspace itself); a line is the words between two
newlines, from its first word's start to its last word's end (text.split("\\n") then strip,
blank lines left out); a paragraph likewise between whitespace runs holding two newlines or
more (what re.split(r"\\n\\s*\\n") cuts at, \\s being str.isspace too). Lengths are in code
points, as len; two items are equal when their bytes are (so duplicates are exact: a hash
match is confirmed byte for byte). Prefixes and suffixes are compared as bytes, which for
UTF-8 is comparing characters. tests/unit/test_curate_measures.py checks each measure
against text.py on ASCII and non-ASCII texts.

numba is optional: `available()` is False where it is not installed (or cannot compile), and
the filters judge each document with text.py. Compiled on first use into kernel_cache's shared
folder, under its lock.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipeline.curate import stats_kernel as k
from pipeline.dedup import kernel_cache
from pipeline.dedup.text_kernel import _string_buffers, batch_bounds

# str.isspace of every code point up to U+3000, the last one it accepts (checked in the tests)
SPACE = np.array([chr(c).isspace() for c in range(0x3001)], np.bool_)
# each ASCII byte's kind for stats_kernel._words: 0 a word's, 1 whitespace, 2 "#" or "." when
# the word classes are counted
KINDS = {False: SPACE[:128].astype(np.uint8)}
KINDS[True] = KINDS[False].copy()
KINDS[True][[ord("#"), ord(".")]] = 2
BATCH_BYTES = 1 << 20  # text measured per kernel call: bounds the span arrays' memory
# the columns of Measured.per_doc; the last four only where `classes` were asked for
PER_DOC = ("newlines", "words", "word_chars", "sentence_ends", "hashes", "ellipses",
           "alpha_words", "stop_words")  # fmt: skip


@dataclass
class Items:
    """Words, lines or paragraphs of a batch: byte spans, code points, hashes, and `first[d]`
    the index of document d's first item (first[n]: the number of items)."""

    starts: np.ndarray
    ends: np.ndarray
    cps: np.ndarray
    hashes: np.ndarray
    first: np.ndarray

    def per_doc(self) -> np.ndarray:
        return np.diff(self.first)

    def fields(self) -> tuple[np.ndarray, ...]:
        return self.starts, self.ends, self.cps, self.hashes, self.first


@dataclass
class Measured:
    """One batch's text (UTF-8 bytes, document offsets) and its words, for the functions below."""

    data: np.ndarray
    offsets: np.ndarray
    words: Items
    gap_cps: np.ndarray
    gap_lines: np.ndarray
    per_doc: np.ndarray  # (documents, len(PER_DOC))

    @property
    def newlines(self) -> np.ndarray:
        return self.per_doc[:, 0]

    def _grouped(self, min_newlines: int) -> Items:
        n, w = len(self.offsets) - 1, len(self.words.starts)
        s, e, c = (np.empty(w, np.int32) for _ in range(3))
        h, first = np.empty(w, np.uint64), np.empty(n + 1, np.int64)
        m = k._groups(self.words.fields(), self.gap_cps, self.gap_lines, min_newlines, s, e, c, h,
                    first)  # fmt: skip
        return Items(s[:m], e[:m], c[:m], h[:m], first)

    def lines(self) -> Items:
        return self._grouped(1)

    def paragraphs(self) -> Items:
        return self._grouped(2)

    def ids(self, items: Items, todo: np.ndarray | None = None) -> np.ndarray:
        """Each item's id in its document: 1, 2, ... in order of first occurrence (only in the
        documents where `todo`, when given; the others' are left unset)."""
        out = np.empty(len(items.starts), np.uint64)
        if todo is None:
            todo = np.ones(len(self.offsets) - 1, np.bool_)
        k._ids(self.data, items.fields(), todo, out)
        return out

    def duplicates(self, items: Items) -> np.ndarray:
        """(documents, 3): items repeating an earlier one, their code points, all code points."""
        out = np.empty((len(self.offsets) - 1, 3), np.int64)
        k._duplicates(self.ids(items), items.cps, items.first, out)
        return out

    def affixed(self, items: Items, patterns: tuple[str, ...], at_end: bool) -> np.ndarray:
        """Per document: items starting (or, at_end, ending) with any of the patterns."""
        pat_data, pat_offsets, edge = _patterns(patterns, at_end)
        out = np.empty(len(self.offsets) - 1, np.int64)
        k._affixed(self.data, items.starts, items.ends, items.first, pat_data, pat_offsets,
                 at_end, edge, out)  # fmt: skip
        return out

    def word_classes(self, classes: tuple[str, tuple[str, ...]], todo=None) -> None:
        """per_doc's words holding a letter and distinct stop words (classes: punctuation, stop
        words), for the documents where `todo` (all when None; the others' are left 0)."""
        punct, stop_keys = _classes(*classes)
        if todo is None:
            todo = np.ones(len(self.offsets) - 1, np.bool_)
        w = self.words
        k._word_classes(self.data, w.starts, w.ends, w.first, _alpha(), punct, stop_keys,
                        max(map(len, classes[1]), default=0), todo, self.per_doc)  # fmt: skip


def packable(stop_words: tuple[str, ...]) -> bool:
    """Whether `classes` may hold these stop words: ASCII, 7 characters at most."""
    return all(w.isascii() and len(w) <= 7 for w in stop_words)


def packed(stop_words: tuple[str, ...]) -> np.ndarray:
    """Each stop word as one integer: its bytes (little-endian) and its length in the top byte."""
    return np.array([int.from_bytes(w.encode(), "little") | len(w) << 56 for w in stop_words],
                    np.int64)  # fmt: skip


@functools.cache
def _alpha() -> np.ndarray:
    """str.isalpha of every code point (numpy's isalpha over them as one-character strings)."""
    return np.char.isalpha(np.arange(0x110000, dtype=np.uint32).view("<U1"))


@functools.lru_cache(maxsize=16)
def _patterns(patterns: tuple[str, ...], at_end: bool) -> tuple[np.ndarray, ...]:
    """The patterns' bytes, their offsets, and which bytes one starts (at_end: ends) with
    (every byte when one is empty: it starts and ends every item)."""
    encoded = [p.encode() for p in patterns]
    data = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
    edge = np.zeros(256, np.bool_)
    edge[[p[-1] if at_end else p[0] for p in encoded if p]] = True
    if not all(encoded):
        edge[:] = True
    return data, np.cumsum([0] + [len(p) for p in encoded], dtype=np.int64), edge


def measure(texts: pa.Array, classes: tuple[str, tuple[str, ...]] | None = None) -> Measured:
    """The words of a string array without nulls (a batch from `batches`); `classes`:
    (punctuation, stop words) for PER_DOC's word classes (the stop words `packable`)."""
    m = _measure(texts, None, classes)[0]
    if classes is not None:
        m.word_classes(classes)
    return m


def measured(
    texts: pa.Array | pa.ChunkedArray, classes: tuple[str, tuple[str, ...]] | None = None
) -> Iterator[Measured]:
    """`measure` of each of `batches(texts)`, in order, with the word arrays of one batch
    written over the previous one's: each Measured is valid until the next is asked for (the
    pages are faulted in once, not once per batch: a third of measure's time). With `classes`,
    "#" and ellipses are counted; the other word classes when asked (Measured.word_classes)."""
    buffers = None
    for batch in batches(texts):
        m, buffers = _measure(batch, buffers, classes)
        yield m


def _measure(texts: pa.Array, buffers: list[np.ndarray] | None, classes):
    data, offsets = _string_buffers(texts)
    n = len(offsets) - 1
    size = int(offsets[-1] - offsets[0]) if n else 0
    cap = size // 2 + n + 1  # a word is one byte at least, followed by a space or the end
    if buffers is None or len(buffers[0]) < cap:
        # np.empty: the pages past the words found are never touched; int32: a string array's
        # offsets are, and the fewer pages written, the faster
        buffers = [np.empty(cap, np.int32) for _ in range(5)] + [np.empty(cap, np.uint64)]
    starts, ends, cps, gap_cps, gap_lines, hashes = buffers
    first, per_doc = np.empty(n + 1, np.int64), np.zeros((n, len(PER_DOC)), np.int64)
    w = k._words(data, offsets, KINDS[classes is not None], SPACE, classes is not None, starts,
                 ends, cps, hashes, gap_cps, gap_lines, first, per_doc)  # fmt: skip
    words = Items(starts[:w], ends[:w], cps[:w], hashes[:w], first)
    return Measured(data, offsets, words, gap_cps[:w], gap_lines[:w], per_doc), buffers


@functools.lru_cache(maxsize=8)
def _classes(punctuation: str, stop_words: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    punct = np.zeros(max(map(ord, punctuation), default=0) + 1, np.bool_)
    punct[[ord(c) for c in punctuation]] = True
    return punct, packed(stop_words)


def batches(texts: pa.Array | pa.ChunkedArray) -> Iterator[pa.Array]:
    """Consecutive slices of about BATCH_BYTES of text (one document at least), as string
    arrays, in order."""
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    for chunk in chunks:
        if chunk.type != pa.string():
            chunk = chunk.cast(pa.string())
        for start, stop in batch_bounds(chunk, BATCH_BYTES):
            yield chunk.slice(start, stop - start)


_usable: bool | None = None


def available() -> bool:
    """Whether these loops run compiled here (numba installed and they compile)."""
    global _usable
    if _usable is None:
        _usable = k.numba is not None
        if _usable:
            try:  # compile (or load from the cache) now, on a tiny input
                with kernel_cache.compiling():
                    m = measure(pa.array(["a é\n\n#...b c", ""], pa.string()), ("#", ("a",)))
                    m.duplicates(m.lines())
                    m.affixed(m.paragraphs(), ("a",), True)
            except Exception:  # noqa: BLE001 - any failure to compile: the Python paths
                _usable = False
    return _usable

"""fastText's supervised predict (top 1) for the language model (read by curate/lid_model.py),
compiled with numba: the same label and float32 score as fastText-predict's C++, value for value.

Predict, as fastText's C++ does it: tokens are split at space, \\n, \\r, \\t, \\v, \\f and NUL, the
line ending at \\n (EOS); a word of the dictionary adds its row, then its character n-grams of
"<word>" (FNV-1a of the bytes, sign-extended, modulo the buckets, kept buckets only); an unknown
word its n-grams; a label token nothing. Hidden = the rows summed in that order in float32, times
1/count; then a depth-first walk of the Huffman tree of the labels (left first, pruned by the
best leaf so far), scores summed as log(p + 1e-5).

Faster, same values: `predict_texts` takes many texts' UTF-8 bytes and offsets (an Arrow
array's buffers, read in place) in one compiled call, and forms the language step's line in the
loop (the first `max_chars` characters, newlines as spaces, then EOS) instead of copying it. A
token's row ids (its dictionary row, then its kept n-gram rows, in fastText's order) are found
once per distinct token and kept in a word cache; a repeated token adds those same rows in the
same order, so every float32 sum is fastText's. The cache is the predictor's (16 MiB,
emptied when full, tokens over 64 bytes not kept); it changes speed only, never a value.

`load` checks predictions against fastText's on probe texts and returns None where one differs
or numba is missing (the caller then uses fastText). Kernels compile on first use, cached on disk.
"""

from __future__ import annotations

import math
import threading
from typing import Any, NamedTuple

import numpy as np

from pipeline.curate import lid_model
from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops

try:
    import numba

    _jit = numba.njit(cache=True, nogil=True)
    _inline = numba.njit(cache=True, nogil=True, inline="always")
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function

    _inline = _jit

_LOW32 = np.uint64(0xFFFFFFFF)
_FNV_OFFSET = np.uint64(2166136261)
_FNV_PRIME = np.uint64(16777619)
_LABEL = np.frombuffer(b"__label__", np.uint8).copy()  # fastText's label prefix
_SKIP, _WORD, _END = 0, 1, 2  # a token adds nothing (a label), its rows, or its row and ends
_SPREAD = lid_model.SPREAD
_LONGEST_CACHED = 64  # bytes; a longer token's rows are found each time it occurs
PROBES = (
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun saute par-dessus le chien paresseux. Ça va très bien, merci !",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。 日本語のテキストも少し。",
    "zzqx __label__en x\t\ty\r\x0bz\x0c\x00 naïve ＡＢＣ 🙂 عربى",
    "a </s> b",
    "",
)


@_inline
def _step(h, byte):
    return ((h ^ (np.uint64(np.int64(np.int8(byte))) & _LOW32)) * _FNV_PRIME) & _LOW32


@_inline
def _add(x, rows, t):
    for k in range(x.shape[0]):
        x[k] += rows[t, k]


@_inline
def _pruned(prune, h):
    mask = prune.shape[0] - 1
    s = (h * _SPREAD) & mask
    while prune[s, 0] >= 0:
        if prune[s, 0] == h:
            return np.int64(prune[s, 1])
        s = (s + 1) & mask
    return np.int64(-1)


@_inline
def _mod(n, magic, d):
    """n % d for n < 2**32 and d < 2**31 without a division (Lemire, Kaser and Kurz 2019,
    "Faster remainder by direct computation"; magic = (2**64 - 1) // d + 1)."""
    low = magic * np.uint64(n)
    high = (low >> np.uint64(32)) * d + (((low & _LOW32) * d) >> np.uint64(32))
    return high >> np.uint64(32)


@_inline
def _is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@_inline
def _same(a, a0, b, b0, n):
    for k in range(n):  # noqa: SIM110 - numba compiles the loop, not a generator
        if a[a0 + k] != b[b0 + k]:
            return False
    return True


@_jit
def _word_id(data, start, end, h, table, wbytes, woff):
    mask = table.shape[0] - 1
    s = np.int64(h) & mask
    while table[s] >= 0:
        w = table[s]
        n = woff[w + 1] - woff[w]
        if n == end - start and _same(wbytes, woff[w], data, start, n):
            return w
        s = (s + 1) & mask
    return -1


@_jit
def _token_rows(data, start, end, h, w, word, out, at):
    """What the token data[start:end] (fastText hash h) does, and its row ids in fastText's
    order written to out[at:] (room for maxn * (length + 2) + 1): (kind, rows written)."""
    wid = _word_id(data, start, end, h, w.table, w.wbytes, w.woff)
    if wid >= 0 and w.types[wid] != 0:
        return _SKIP, 0  # a label of the dictionary
    if wid < 0 and end - start >= 9 and _same(data, start, _LABEL, 0, 9):
        return _SKIP, 0
    n = 0
    if wid >= 0:
        out[at] = wid
        n = 1
        if wid == w.eos:  # "</s>" in the text: a word without n-grams that ends the line
            return _END, n
    length = end - start + 2
    word[0] = 60  # "<"
    for k in range(start, end):
        word[k - start + 1] = data[k]
    word[length - 1] = 62  # ">"
    for a in range(length):
        if (word[a] & 0xC0) == 0x80:
            continue
        j, g, gh = a, 1, _FNV_OFFSET
        while j < length and g <= w.maxn:
            gh = _step(gh, word[j])
            j += 1
            while j < length and (word[j] & 0xC0) == 0x80:
                gh = _step(gh, word[j])
                j += 1
            if g >= w.minn and not (g == 1 and (a == 0 or j == length)):
                b = _mod(gh, w.magic, w.bucket)
                if (w.kept[b >> np.uint64(6)] >> (b & np.uint64(63))) & np.uint64(1):
                    out[at + n] = w.nwords + _pruned(w.prune, np.int64(b))
                    n += 1
            g += 1
    return _WORD, n


@_jit
def _insert(data, start, end, h, w, cache, word):
    """Add the token data[start:end] (hash h, not in the cache) to the cache, emptied first
    when full: its record's offset."""
    slots, arena, abytes, fill = cache
    length = end - start
    room = 4 + w.maxn * (length + 2) + (length + 3) // 4
    if 2 * (fill[0] + 1) > slots.shape[0] or fill[1] + room > arena.shape[0]:
        slots[:] = -1
        fill[:] = 0
    mask = slots.shape[0] - 1
    s = np.int64(h) & mask
    while slots[s] >= 0:
        s = (s + 1) & mask
    at = fill[1]
    kind, n = _token_rows(data, start, end, h, w, word, arena, at + 3)
    arena[at], arena[at + 1], arena[at + 2] = length, kind, n
    key = 4 * (at + 3 + n)
    for k in range(length):
        abytes[key + k] = data[start + k]
    slots[s] = (at << 32) | np.int64(h)
    fill[0] += 1
    fill[1] = at + 3 + n + (length + 3) // 4
    return at


@_inline
def _std_log(v):
    return np.float32(math.log(np.float64(np.float32(v)) + 1e-5))


@_jit
def _top(x, count, out, left, right, labels):
    scale = np.float32(1.0 / count)
    for j in range(x.shape[0]):
        x[j] *= scale
    floor = _std_log(np.float32(0.0))
    nodes = np.empty(2 * labels, np.int64)
    scores = np.empty(2 * labels, np.float32)
    nodes[0], scores[0], depth = 2 * labels - 2, np.float32(0.0), 1
    best_node, best = -1, np.float32(0.0)
    while depth > 0:
        depth -= 1
        node, score = nodes[depth], scores[depth]
        if score < floor or (best_node >= 0 and score < best):
            continue
        if left[node] == -1:  # a leaf that gets here replaces the best (fastText's heap)
            best_node, best = node, score
            continue
        d = np.float32(0.0)
        for j in range(x.shape[0]):
            d += out[node - labels, j] * x[j]
        f = np.float32(1.0 / (np.float32(1.0) + np.float32(math.exp(-d))))
        nodes[depth], scores[depth] = right[node], np.float32(score + _std_log(f))
        nodes[depth + 1] = left[node]
        scores[depth + 1] = np.float32(score + _std_log(np.float32(1.0 - np.float64(f))))
        depth += 2
    return best_node, np.float32(math.exp(best))


@_inline
def _char_end(data, start, end, chars):
    """The byte offset after the first `chars` characters of UTF-8 data[start:end]."""
    seen = 0
    for i in range(start, end):
        if (data[i] & 0xC0) != 0x80:
            if seen == chars:
                return i
            seen += 1
    return end


@_jit
def _predict_all(data, offsets, max_chars, text, w, rows, out, left, right, cache, node, score):
    """node[d], score[d] for each line data[offsets[d]:offsets[d + 1]] (node -1: no words).
    `text`: the language step's line (\\n a space, EOS at the end); else a line as given, that
    ends at its first \\n. One loop, the cache's arrays taken once: a token in the cache costs
    its hash, its slot, its record (length, kind, rows, bytes: one or two cache lines) and
    its rows' additions."""
    slots, arena, abytes, _ = cache
    mask = slots.shape[0] - 1
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    word = np.empty(longest + 2, np.uint8)
    scratch = np.empty(w.maxn * (longest + 2) + 1, np.int32)
    x = np.empty(rows.shape[1], np.float32)
    for d in range(offsets.shape[0] - 1):
        i, end = offsets[d], offsets[d + 1]
        if max_chars >= 0 and end - i > max_chars:
            end = _char_end(data, i, end, max_chars)
        x[:] = 0
        count, ended = 0, False
        while i < end and not ended:
            if _is_space(data[i]):
                if data[i] == 10 and not text:  # the line's end: EOS, a word without n-grams
                    _add(x, rows, w.eos)
                    count += 1
                    ended = True
                i += 1
                continue
            first, h64 = i, _FNV_OFFSET
            while i < end and not _is_space(data[i]):
                h64 = _step(h64, data[i])
                i += 1
            h, length = np.int64(h64), i - first
            s, at = h & mask, -1
            while slots[s] >= 0:
                if slots[s] & 0xFFFFFFFF == h:
                    c = slots[s] >> 32
                    key = 4 * (c + 3 + arena[c + 2])
                    if arena[c] == length and _same(abytes, key, data, first, length):
                        at = c
                        break
                s = (s + 1) & mask
            if at < 0 and length > _LONGEST_CACHED:
                kind, n = _token_rows(data, first, i, np.uint32(h), w, word, scratch, 0)
                for r in range(n):
                    _add(x, rows, scratch[r])
            else:
                if at < 0:
                    at = _insert(data, first, i, np.uint32(h), w, cache, word)
                kind, n = arena[at + 1], arena[at + 2]
                for r in range(at + 3, at + 3 + n):
                    _add(x, rows, arena[r])
            count += n
            ended = kind == _END
        if text and not ended:
            _add(x, rows, w.eos)
            count += 1
        if count == 0:
            node[d], score[d] = -1, 0.0
        else:
            node[d], score[d] = _top(x, count, out, left, right, left.shape[0] // 2 + 1)


class _Words(NamedTuple):
    """The dictionary and the kept buckets, as the kernels read them (curate/lid_model.py)."""

    table: np.ndarray
    wbytes: np.ndarray
    woff: np.ndarray
    types: np.ndarray
    prune: np.ndarray
    kept: np.ndarray
    nwords: int
    minn: int
    maxn: int
    bucket: np.uint64
    magic: np.uint64  # for _mod by bucket
    eos: int


class _Cache(NamedTuple):
    """The word cache: a token's record is found from its fastText hash in `slots`."""

    slots: np.ndarray  # int64: -1 empty, else record offset << 32 | the token's hash
    arena: np.ndarray  # int32 records: length, kind, n, n row ids, the token's bytes (padded)
    abytes: np.ndarray  # the arena's memory as bytes
    fill: np.ndarray  # int64: tokens held, arena int32s used


def _empty_cache(words: int) -> _Cache:
    arena = np.zeros(12 * words, np.int32)
    slots = np.full(1 << (2 * words - 1).bit_length(), -1, np.int64)
    return _Cache(slots, arena, arena.view(np.uint8), np.zeros(2, np.int64))


class Predictor:
    """fastText's `predict(line, 1, 0.0)` for the model at `path`; `cache_words`: distinct
    tokens the word cache holds before it is emptied."""

    def __init__(self, path: str, cache_words: int = 1 << 18) -> None:
        model = lid_model.read(path)
        self.labels = model.labels
        self._words = _Words(model.table, model.wbytes, model.woff, model.types, model.prune,
                             model.kept, model.nwords, model.minn, model.maxn,
                             np.uint64(model.bucket), np.uint64((2**64 - 1) // model.bucket + 1),
                             model.eos)  # fmt: skip
        self._net = (model.rows, model.out, model.left, model.right)
        self._cache_words = cache_words
        self._cache = _empty_cache(cache_words)
        self._lock = threading.Lock()  # the cache is written in place: one call at a time

    def predict(self, line: str) -> tuple[str, float]:
        """(label, score) of one line, read up to its first \\n."""
        data = np.frombuffer(line.encode("utf-8"), np.uint8)
        node, score = self._run(data, np.array([0, len(data)], np.int64), -1, False)
        if node[0] < 0:
            raise ValueError("no words to predict from")
        return self.labels[node[0]], float(score[0])

    def predict_texts(self, data: np.ndarray, offsets: np.ndarray, max_chars: int
                      ) -> tuple[list[str], np.ndarray]:  # fmt: skip
        """(labels, float32 scores) of texts data[offsets[i]:offsets[i + 1]] (UTF-8), each read
        as the line `text[:max_chars].replace("\\n", " ") + "\\n"`."""
        node, score = self._run(data, offsets.astype(np.int64, copy=False), max_chars, True)
        return [self.labels[i] for i in node.tolist()], score

    def forget(self) -> None:
        """Empty the word cache (a benchmark's cold start)."""
        with self._lock:
            self._cache = _empty_cache(self._cache_words)

    def _run(self, data, offsets, max_chars, text) -> tuple[np.ndarray, np.ndarray]:
        data = data.view()
        data.flags.writeable = False  # one compiled signature, whoever owns the bytes
        node = np.empty(len(offsets) - 1, np.int64)
        score = np.empty(len(offsets) - 1, np.float32)
        with self._lock:
            _predict_all(data, offsets, max_chars, text, self._words, *self._net, self._cache,
                         node, score)  # fmt: skip
        return node, score


def load(path: str, reference: Any) -> Predictor | None:
    """The compiled predictor of the model at `path`, or None (numba missing, another kind of
    model, or a probe text on which it and `reference` (fastText's `f`) disagree)."""
    if numba is None:
        return None
    try:
        predictor = Predictor(path)
        for text in PROBES:
            line = text.replace("\n", " ") + "\n"
            ((score, label),) = reference.predict(line, 1, 0.0, "replace")
            if predictor.predict(line) != (label, float(score)):
                return None
    except Exception:  # noqa: BLE001 - whatever fails here, fastText itself answers
        return None
    return predictor

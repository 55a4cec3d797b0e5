"""fastText's supervised predict (top 1) for the language model, compiled with numba: the same
label and float32 score as fastText-predict's C++, value for value, about 4x faster per core.

Model file (.ftz, fastText's format version 12, as `lid.176.ftz`): magic and version (int32),
the arguments (12 int32, a double), the dictionary (size, words, labels: int32; tokens, pruned
buckets: int64; per entry a NUL-ended UTF-8 string, an int64 count, an int8 type 0 word or
1 label; then (bucket, row) int32 pairs), the input matrix product-quantized (norms quantized),
the output matrix dense. Read here: hierarchical softmax (loss 1), word n-grams 1, character
n-grams minn..maxn; another model gets None from `load`, and the caller uses fastText.

Predict, as fastText's C++ does it: tokens are split at space, \\n, \\r, \\t, \\v, \\f and NUL, the
line ending at \\n (EOS); a word of the dictionary adds its row, then its character n-grams of
"<word>" (FNV-1a of the bytes, sign-extended, modulo the buckets, kept buckets only); an unknown
word its n-grams; a label token nothing. Hidden = the rows summed in that order in float32 (each
row the product norm x centroid, as fastText forms it), times 1/count; then a depth-first walk of
the Huffman tree of the labels (left first, pruned by the best leaf so far), scores summed as
log(p + 1e-5). `load` checks its predictions against fastText's on probe texts and returns None
where one differs. numba is optional; compiled on first use and cached on disk (cache=True).
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

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
_SPREAD = 0x9E3779B1  # a pruned-bucket table slot
_LABEL = np.frombuffer(b"__label__", np.uint8).copy()  # fastText's label prefix
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
def _is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@_jit
def _word_id(data, start, end, table, wbytes, woff):
    h = _FNV_OFFSET
    for i in range(start, end):
        h = _step(h, data[i])
    mask = table.shape[0] - 1
    s = np.int64(h) & mask
    while table[s] >= 0:
        w = table[s]
        a, b = woff[w], woff[w + 1]
        if b - a == end - start:
            same = True
            for k in range(end - start):
                if wbytes[a + k] != data[start + k]:
                    same = False
                    break
            if same:
                return w
        s = (s + 1) & mask
    return -1


@_jit
def _add_ngrams(x, word, length, rows, prune, nwords, minn, maxn, bucket):
    added = 0
    for a in range(length):
        if (word[a] & 0xC0) == 0x80:
            continue
        j, g, h = a, 1, _FNV_OFFSET
        while j < length and g <= maxn:
            h = _step(h, word[j])
            j += 1
            while j < length and (word[j] & 0xC0) == 0x80:
                h = _step(h, word[j])
                j += 1
            if g >= minn and not (g == 1 and (a == 0 or j == length)):
                row = _pruned(prune, np.int64(h % np.uint64(bucket)))
                if row >= 0:
                    _add(x, rows, nwords + row)
                    added += 1
            g += 1
    return added


@_jit
def _hidden(data, table, wbytes, woff, types, prune, nwords, minn, maxn, bucket, rows, eos):
    x = np.zeros(rows.shape[1], np.float32)
    count = 0
    word = np.empty(data.shape[0] + 2, np.uint8)
    i, n = 0, data.shape[0]
    while i < n:
        if _is_space(data[i]):
            if data[i] == 10:  # the line's end: EOS, a word without n-grams
                _add(x, rows, eos)
                count += 1
                break
            i += 1
            continue
        start = i
        while i < n and not _is_space(data[i]):
            i += 1
        wid = _word_id(data, start, i, table, wbytes, woff)
        if wid >= 0 and types[wid] != 0:
            continue  # a label of the dictionary
        if wid < 0 and i - start >= 9:
            label = True
            for k in range(9):
                if data[start + k] != _LABEL[k]:
                    label = False
                    break
            if label:
                continue
        if wid >= 0:
            _add(x, rows, wid)
            count += 1
            if wid == eos:  # "</s>" in the text: a word without n-grams that ends the line
                break
        word[0] = 60  # "<"
        word[1 : i - start + 1] = data[start:i]
        word[i - start + 1] = 62  # ">"
        count += _add_ngrams(x, word, i - start + 2, rows, prune, nwords, minn, maxn, bucket)
    return x, count


@_jit
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


@_jit
def _decode(codes, centroids, nsubq, dsub, lastdsub, norm_codes, norm_centroids, dim):
    rows = np.zeros((norm_codes.shape[0], dim), np.float32)
    for t in range(rows.shape[0]):
        norm = norm_centroids[norm_codes[t]]
        for m in range(nsubq):
            code = np.int64(codes[nsubq * t + m])
            last = m == nsubq - 1
            base = m * 256 * dsub + code * lastdsub if last else (m * 256 + code) * dsub
            for k in range(lastdsub if last else dsub):
                rows[t, m * dsub + k] += norm * centroids[base + k]
    return rows


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: Any, n: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype, n, self.at).copy()
        self.at += out.nbytes
        return out

    def quantizer(self) -> tuple[int, int, int, np.ndarray]:
        dim, nsubq, dsub, lastdsub = self.take("4i")
        return nsubq, dsub, lastdsub, self.array(np.float32, dim * 256)


class Predictor:
    """fastText's `predict(line, 1, 0.0)` for one line (ending in \\n): (label, score)."""

    def __init__(self, path: str) -> None:
        r = _Reader(Path(path).read_bytes())
        magic, version = r.take("2i")
        (dim, _, _, _, _, word_ngrams, loss, model, bucket, minn, maxn, _) = r.take("12i")
        r.take("d")
        size, nwords, nlabels = r.take("3i")
        _, pruned_n = r.take("2q")
        if (magic, version, loss, model, word_ngrams) != (793712314, 12, 1, 3, 1):
            raise ValueError("not a supervised hierarchical-softmax model without word n-grams")
        words, types, counts = [], [], []
        for _ in range(size):
            end = r.data.index(b"\0", r.at)
            words.append(r.data[r.at : end])
            r.at = end + 1
            counts.append(r.take("q")[0])
            types.append(r.take("b")[0])
        pairs = r.array(np.int32, 2 * pruned_n).reshape(-1, 2)
        (quantized,) = r.take("?")
        (qnorm,) = r.take("?")
        rows_n, _ = r.take("2q")
        if not quantized or not qnorm or pruned_n <= 0:
            raise ValueError("not a quantized model with quantized norms and pruned buckets")
        codes = r.array(np.uint8, r.take("i")[0])
        nsubq, dsub, lastdsub, centroids = r.quantizer()
        norm_codes = r.array(np.uint8, rows_n)
        _, _, _, norm_centroids = r.quantizer()
        if r.take("?")[0]:
            raise ValueError("a quantized output matrix")
        out_m, out_n = r.take("2q")
        self.out = r.array(np.float32, out_m * out_n).reshape(out_m, out_n)
        rows = _decode(codes, centroids, nsubq, dsub, lastdsub, norm_codes, norm_centroids, dim)
        self.labels = [w.decode("utf-8", "replace") for w in words[nwords:]]
        self.left, self.right = _huffman(counts[nwords:])
        self._args = (*self._words_table(words), np.array(types, np.int8),
                      _bucket_table(pairs), nwords, minn, maxn, bucket, rows,
                      words.index(b"</s>"))  # fmt: skip

    def _words_table(self, words: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        wbytes = np.frombuffer(b"".join(words), np.uint8)
        woff = np.zeros(len(words) + 1, np.int64)
        woff[1:] = np.cumsum([len(w) for w in words])
        size = 1 << max(1, (2 * len(words) - 1).bit_length())
        table = np.full(size, -1, np.int64)
        for i in range(len(words)):
            h = _fnv(words[i])
            s = h & (size - 1)
            while table[s] >= 0:
                s = (s + 1) & (size - 1)
            table[s] = i
        return table, wbytes, woff

    def predict(self, line: str) -> tuple[str, float]:
        data = np.frombuffer(line.encode("utf-8"), np.uint8)
        x, count = _hidden(data, *self._args)
        if not count:
            raise ValueError("no words to predict from")
        node, score = _top(x, count, self.out, self.left, self.right, len(self.labels))
        return self.labels[node], float(score)


def _fnv(word: bytes) -> int:
    h = 2166136261
    for byte in word:
        h = ((h ^ ((byte - 256 if byte >= 128 else byte) & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    return h


def _bucket_table(pairs: np.ndarray) -> np.ndarray:
    """(bucket, row) pairs in an open-addressing table (-1: empty), a third full."""
    size = 1 << max(1, (3 * len(pairs)).bit_length())
    table = np.full((size, 2), -1, np.int32)
    for bucket, row in pairs.tolist():
        s = (bucket * _SPREAD) & (size - 1)
        while table[s, 0] >= 0:
            s = (s + 1) & (size - 1)
        table[s] = (bucket, row)
    return table


def _huffman(counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """fastText's label tree (HierarchicalSoftmaxLoss::buildTree): children of each node."""
    labels = len(counts)
    left = np.full(2 * labels - 1, -1, np.int64)
    right = np.full(2 * labels - 1, -1, np.int64)
    count = counts + [10**15] * (labels - 1)
    leaf, node = labels - 1, labels
    for i in range(labels, 2 * labels - 1):
        pair = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                pair.append(leaf)
                leaf -= 1
            else:
                pair.append(node)
                node += 1
        left[i], right[i] = pair
        count[i] = count[pair[0]] + count[pair[1]]
    return left, right


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

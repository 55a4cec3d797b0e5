"""The fastText supervised model file, read into the arrays the compiled predict uses
(curate/lid_kernel.py). This module owns the file format; it computes nothing per document.

Format (.ftz, fastText's format version 12, as `lid.176.ftz`): magic and version (int32), the
arguments (12 int32, a double), the dictionary (size, words, labels: int32; tokens, pruned
buckets: int64; per entry a NUL-ended UTF-8 string, an int64 count, an int8 type 0 word or
1 label; then (bucket, row) int32 pairs), the input matrix product-quantized (norms quantized),
the output matrix dense. Read here: hierarchical softmax (loss 1), word n-grams 1, character
n-grams minn..maxn; another kind raises ValueError.

What `read` returns: the dictionary as an open-addressing table over fastText's word hash
(FNV-1a of the bytes, each byte sign-extended), the kept buckets as a bitmap with a rank
(bucket b's row is ranked[before[b // 64] + kept bits below b in word b // 64]), the input
rows decoded the way fastText forms them (norm x centroid, in float32), the output matrix and
the Huffman tree of the labels (fastText's HierarchicalSoftmaxLoss::buildTree).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LidModel:
    nwords: int  # dictionary words; then labels; rows nwords.. are the kept buckets
    minn: int
    maxn: int
    bucket: int
    eos: int  # the dictionary id of "</s>"
    types: np.ndarray  # int8 per dictionary entry: 0 word, 1 label
    table: np.ndarray  # int64 slots: dictionary id or -1
    wbytes: np.ndarray  # uint8: the entries' bytes, back to back
    woff: np.ndarray  # int64: entry i is wbytes[woff[i]:woff[i + 1]]
    kept: np.ndarray  # uint64 bits: bucket b is kept iff bit b % 64 of kept[b // 64] is set
    before: np.ndarray  # int32 per word of kept: the kept buckets in the words before it
    ranked: np.ndarray  # int32 per kept bucket, in bucket order: its row
    rows: np.ndarray  # float32 (words + kept buckets, dim)
    out: np.ndarray  # float32 (labels - 1, dim): the tree's inner nodes
    left: np.ndarray  # int64 per tree node: left child, -1 at a leaf (a label)
    right: np.ndarray
    labels: list[str]


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


def read(path: str) -> LidModel:
    r = _Reader(Path(path).read_bytes())
    magic, version = r.take("2i")
    (dim, _, _, _, _, word_ngrams, loss, model, bucket, minn, maxn, _) = r.take("12i")
    r.take("d")
    size, nwords, _ = r.take("3i")
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
    norms = r.array(np.uint8, rows_n)
    _, _, _, norm_centroids = r.quantizer()
    if r.take("?")[0]:
        raise ValueError("a quantized output matrix")
    out_m, out_n = r.take("2q")
    out = r.array(np.float32, out_m * out_n).reshape(out_m, out_n)
    rows = _decode(codes.reshape(rows_n, nsubq), centroids, dsub, lastdsub,
                   norm_centroids[norms], dim)  # fmt: skip
    left, right = _huffman(counts[nwords:])
    return LidModel(
        nwords, minn, maxn, bucket, words.index(b"</s>"), np.array(types, np.int8),
        *_words_table(words), *_kept_buckets(pairs, nwords, bucket), rows, out, left, right,
        [w.decode("utf-8", "replace") for w in words[nwords:]],
    )  # fmt: skip


def _decode(codes, centroids, dsub, lastdsub, norms, dim) -> np.ndarray:
    """fastText's ProductQuantizer::addcode per row: 0 + norm * centroid, in float32."""
    rows = np.zeros((codes.shape[0], dim), np.float32)
    nsubq = codes.shape[1]
    for m in range(nsubq):
        code = codes[:, m].astype(np.int64)
        last = m == nsubq - 1
        width = lastdsub if last else dsub
        base = m * 256 * dsub + code * lastdsub if last else (m * 256 + code) * dsub
        block = centroids[base[:, None] + np.arange(width)]
        rows[:, m * dsub : m * dsub + width] += norms[:, None] * block
    return rows


def fnv(word: bytes) -> int:
    """fastText's word hash: FNV-1a over the bytes, each sign-extended to 32 bits."""
    h = 2166136261
    for byte in word:
        h = ((h ^ ((byte - 256 if byte >= 128 else byte) & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    return h


def _words_table(words: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    wbytes = np.frombuffer(b"".join(words), np.uint8)
    woff = np.zeros(len(words) + 1, np.int64)
    woff[1:] = np.cumsum([len(w) for w in words])
    size = 1 << max(1, (2 * len(words) - 1).bit_length())
    table = np.full(size, -1, np.int64)
    for i, word in enumerate(words):
        s = fnv(word) & (size - 1)
        while table[s] >= 0:
            s = (s + 1) & (size - 1)
        table[s] = i
    return table, wbytes, woff


def _kept_buckets(pairs: np.ndarray, nwords: int, bucket: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A bit per bucket (2M buckets: 250 KB, cache-resident), so that a bucket that was pruned
    away, most of them, is known without a look-up; the rank of a kept one (the kept buckets
    in the words before its word, plus the bits below it in its word) is its place in `ranked`,
    which holds its row (nwords + the row fastText's pruned index gives it)."""
    if len(np.unique(pairs[:, 0])) != len(pairs):
        raise ValueError("a bucket pruned to two rows")
    order = np.argsort(pairs[:, 0], kind="stable")
    buckets = pairs[order, 0].astype(np.int64)
    bits = np.zeros((bucket + 63) // 64, np.uint64)
    one_bit = np.left_shift(np.uint64(1), (buckets % 64).astype(np.uint64))
    np.bitwise_or.at(bits, buckets // 64, one_bit)
    per_word = np.bincount(buckets // 64, minlength=len(bits))
    before = np.zeros(len(bits), np.int32)
    before[1:] = np.cumsum(per_word)[:-1]
    return bits, before, (nwords + pairs[order, 1]).astype(np.int32)


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

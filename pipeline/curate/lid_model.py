"""A fastText supervised model file, read into the arrays the compiled predict uses
(curate/lid_kernel.py). This module owns the file format; it computes nothing per document.

Format (fastText's format version 12: `.bin` and `.ftz` alike): magic and version (int32), the
arguments (12 int32: dim, ws, epoch, minCount, neg, wordNgrams, loss, model, bucket, minn, maxn,
lrUpdateRate; a double), the dictionary (size, words, labels: int32; tokens, pruned index size:
int64; per entry a NUL-ended UTF-8 string, an int64 count, an int8 type 0 word or 1 label; then
(bucket, row) int32 pairs: -1 pairs, every bucket has its row nwords + bucket; 0, none has one),
then the input matrix and the output matrix, each after a bool "quantized": dense (rows, cols:
int64; float32 values) or product-quantized (qnorm bool, rows, cols int64, code size int32, the
codes, the quantizer (dim, nsubq, dsub, lastdsub int32; 256 x dim float32 centroids), then with
qnorm a byte per row and the norms' quantizer). Read here: a supervised model (model 3) of any
loss fastText predicts with (hierarchical softmax 1, negative sampling 2, softmax 3,
one-vs-all 4), any word n-grams and character n-grams (maxn 0: none); another file raises
ValueError.

What `read` returns: the dictionary as an open-addressing table over fastText's word hash
(FNV-1a of the bytes, each byte sign-extended; a slot: the entry's id << 32 | its hash, -1
empty, so that a probe compares hashes before it reads an entry's bytes), the kept buckets of a
pruned model as a bitmap with a rank (bucket b's row is ranked[before[b // 64] + kept bits below
b in word b // 64]), the input rows formed as fastText adds them (a quantized row: norm x
centroid, in float32), the output rows (a quantized one: its centroids, and its norm apart,
since fastText multiplies the dot product by the norm) and, for hierarchical softmax, the
Huffman tree of the labels (fastText's HierarchicalSoftmaxLoss::buildTree).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGIC, VERSION, SUPERVISED = 793712314, 12, 3
HS, NS, SOFTMAX, OVA = 1, 2, 3, 4  # fastText's loss_name


@dataclass(frozen=True)
class LidModel:
    nwords: int  # dictionary words; then labels; rows nwords.. are the buckets (kept ones)
    minn: int
    maxn: int
    bucket: int
    word_ngrams: int
    loss: int  # HS, NS, SOFTMAX or OVA
    pruned: bool  # only the buckets in `kept` have rows (else bucket b's row is nwords + b)
    eos: int  # the dictionary id of "</s>"
    types: np.ndarray  # int8 per dictionary entry: 0 word, 1 label
    table: np.ndarray  # int64 slots: dictionary id << 32 | its word hash, or -1
    wbytes: np.ndarray  # uint8: the entries' bytes, back to back
    woff: np.ndarray  # int64: entry i is wbytes[woff[i]:woff[i + 1]]
    kept: np.ndarray  # uint64 bits: bucket b is kept iff bit b % 64 of kept[b // 64] is set
    before: np.ndarray  # int32 per word of kept: the kept buckets in the words before it
    ranked: np.ndarray  # int32 per kept bucket, in bucket order: its row
    rows: np.ndarray  # float32 (words + buckets, dim), read-only where the file is dense
    out: np.ndarray  # float32 (labels, or labels - 1 inner nodes of the tree, dim)
    out_norms: np.ndarray  # float32 per output row: its dot product's factor (1: dense)
    left: np.ndarray  # int64 per tree node: left child, -1 at a leaf (a label)
    right: np.ndarray
    labels: list[str]


class _Reader:
    def __init__(self, data: Any) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: Any, n: int, copy: bool = True) -> np.ndarray:
        if self.at + n * np.dtype(dtype).itemsize > len(self.data):
            raise ValueError("the file ends inside a matrix")
        out = np.frombuffer(self.data, dtype, n, self.at)
        self.at += out.nbytes
        return out.copy() if copy else out

    def quantizer(self) -> tuple[int, int, int, np.ndarray]:
        dim, nsubq, dsub, lastdsub = self.take("4i")
        return nsubq, dsub, lastdsub, self.array(np.float32, dim * 256)

    def matrix(self, dim: int) -> tuple[np.ndarray, np.ndarray | None]:
        """A matrix after its "quantized" bool: (its rows, dense or decoded centroids; the
        quantized norms per row, or None)."""
        if not self.take("?")[0]:
            m, n = self.take("2q")
            if n != dim:
                raise ValueError(f"a matrix of {n} columns in a model of dimension {dim}")
            return self.array(np.float32, m * n, copy=False).reshape(m, n), None
        (qnorm,) = self.take("?")
        m, n = self.take("2q")
        codes = self.array(np.uint8, self.take("i")[0])
        nsubq, dsub, lastdsub, centroids = self.quantizer()
        if n != dim or len(codes) != m * nsubq or (nsubq - 1) * dsub + lastdsub != dim:
            raise ValueError("a quantized matrix that does not match the model's dimension")
        rows = _decode(codes.reshape(m, nsubq), centroids, dsub, lastdsub, dim)
        if not qnorm:
            return rows, None
        norm_codes = self.array(np.uint8, m)
        return rows, self.quantizer()[3][norm_codes]


def check(path: str) -> None:
    """Raise ValueError (or OSError) unless `path` starts as a fastText supervised model."""
    with open(path, "rb") as f:
        head = f.read(8 + 12 * 4)
    if len(head) < 56:
        raise ValueError("not a fastText model file (too short)")
    magic, version = struct.unpack_from("<2i", head)
    model = struct.unpack_from("<12i", head, 8)[7]
    if (magic, version) != (MAGIC, VERSION):
        raise ValueError("not a fastText model file (format version 12: .bin or .ftz)")
    if model != SUPERVISED:
        raise ValueError("a fastText model that is not supervised (a classifier)")


def _open(path: str) -> _Reader:
    check(path)
    with open(path, "rb") as f:
        return _Reader(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _dictionary(r: _Reader) -> tuple[list[bytes], list[int], list[int], int, int]:
    """The entries' bytes, types and counts, the words, the pruned index's size."""
    size, nwords, _ = r.take("3i")
    _, pruned_n = r.take("2q")
    words, types, counts = [], [], []
    for _ in range(size):
        end = r.data.find(b"\0", r.at)
        if end < 0:
            raise ValueError("the file ends inside the dictionary")
        words.append(r.data[r.at : end])
        r.at = end + 1
        counts.append(r.take("q")[0])
        types.append(r.take("b")[0])
    if b"</s>" not in words:
        raise ValueError("a dictionary without </s>")
    return words, types, counts, nwords, pruned_n


def labels_of(path: str) -> list[str]:
    """The model's labels, in its order (the dictionary's; no matrix is read)."""
    r = _open(path)
    r.at = 8 + 12 * 4 + 8
    words, _, _, nwords, _ = _dictionary(r)
    return [w.decode("utf-8", "replace") for w in words[nwords:]]


def read(path: str) -> LidModel:
    r = _open(path)
    r.take("2i")
    (dim, _, _, _, _, word_ngrams, loss, _, bucket, minn, maxn, _) = r.take("12i")
    r.take("d")
    if loss not in (HS, NS, SOFTMAX, OVA):
        raise ValueError(f"a fastText loss ({loss}) without a predict")
    words, types, counts, nwords, pruned_n = _dictionary(r)
    pairs = r.array(np.int32, 2 * max(pruned_n, 0)).reshape(-1, 2)
    rows, norms = r.matrix(dim)
    if norms is not None:  # fastText's addcode: x += norm * centroid, the product in float32
        rows = rows * norms[:, None]
    out, out_norms = r.matrix(dim)
    out = np.ascontiguousarray(out, np.float32).copy()
    out_norms = np.ones(len(out), np.float32) if out_norms is None else out_norms
    nlabels = len(words) - nwords
    if out.shape[0] != nlabels or nlabels < 1:
        raise ValueError("an output matrix that does not match the labels")
    if pruned_n < 0 and rows.shape[0] != nwords + bucket:
        raise ValueError("an input matrix that does not match the dictionary and buckets")
    left, right = _huffman(counts[nwords:])
    return LidModel(
        nwords, minn, maxn, bucket, word_ngrams, loss, pruned_n >= 0, words.index(b"</s>"),
        np.array(types, np.int8), *_words_table(words), *_kept_buckets(pairs, nwords, bucket),
        rows, out, out_norms, left, right, [w.decode("utf-8", "replace") for w in words[nwords:]],
    )  # fmt: skip


def _decode(codes, centroids, dsub, lastdsub, dim) -> np.ndarray:
    """fastText's ProductQuantizer::addcode per row with norm 1: the centroids, in float32."""
    rows = np.zeros((codes.shape[0], dim), np.float32)
    nsubq = codes.shape[1]
    for m in range(nsubq):
        code = codes[:, m].astype(np.int64)
        last = m == nsubq - 1
        width = lastdsub if last else dsub
        base = m * 256 * dsub + code * lastdsub if last else (m * 256 + code) * dsub
        rows[:, m * dsub : m * dsub + width] = centroids[base[:, None] + np.arange(width)]
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
        h = fnv(word)
        s = h & (size - 1)
        while table[s] >= 0:
            s = (s + 1) & (size - 1)
        table[s] = i << 32 | h
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

"""MinHash signatures and LSH banding for near-duplicate detection (pure: no I/O, no Ray).

Shingles are word n-grams of lower(NFC(text)) with edge punctuation stripped; values are
(a_j·s + b_j) mod 2^32 with odd a_j ("affine32"); 32 bands x 8 rows (256 permutations) propose
candidates, and every candidate is verified by the Jaccard estimated from the full signature.
Stored signatures keep the low STORED_BITS = 8 bits of each value (b-bit MinHash,
`narrowed`), and `estimated_jaccard` corrects for chance matches.

Contract: a signature depends only on the text, the seed and the parameters (the same on every
worker, numpy or compiled kernel); banding uses the full 32-bit values. The definitions, the
parameter choice and its measured quality: docs/dedup.md, "Near: MinHash signatures".
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

if TYPE_CHECKING:
    from pipeline.dedup.nfc import NormalForm

EMPTY_VALUE = np.uint32(0xFFFFFFFF)
STORED_BITS = 8  # bits of each signature value near dedup stores and compares (`narrowed`)
# a signature row's bytes besides its signature (ids, length, origin: run/near_signing.py),
# an estimate: what the plan assumes and near dedup's fetch cut (run/dedup_stage.py) sizes by
SIG_ROW_OTHER_BYTES = 52


def signature_row_bytes(num_perm: int) -> int:
    """The estimated stored bytes of one document's signature row."""
    return num_perm * STORED_BITS // 8 + SIG_ROW_OTHER_BYTES


def cand_row_bytes(num_perm: int) -> int:
    """A candidate's row in near dedup's fetch exchange: its node id, signature row and label."""
    return signature_row_bytes(num_perm) + 16


SHINGLE_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: Horner steps stay invertible
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
PUNCTUATION = string.punctuation + "“”‘’«»„‚‹›…–—·•¿¡"
# the ASCII characters str.isspace and Arrow's utf8_split_whitespace split at (U+001C..U+001F
# included; ascii_split_whitespace leaves those out)
ASCII_SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "


@dataclass(frozen=True)
class MinHashParams:
    """Near-duplicate parameters; see the module docstring for why 32 x 8."""

    ngram: int = 5
    num_perm: int = 256
    bands: int = 32
    rows: int = 8
    threshold: float = 0.8
    seed: int = 42

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.bands < 1 or self.rows < 1:
            raise ValueError("ngram, bands and rows must be positive")
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} > num_perm {self.num_perm}")


DEFAULT_PARAMS = MinHashParams()


def fmix64(values: np.ndarray) -> np.ndarray:
    """MurmurHash3 64-bit finaliser, element-wise (uint64 arithmetic wraps mod 2^64)."""
    h = values ^ (values >> np.uint64(33))
    h *= _FMIX_1
    h ^= h >> np.uint64(33)
    h *= _FMIX_2
    h ^= h >> np.uint64(33)
    return h


def permutation_coefficients(params: MinHashParams) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) as uint32 arrays of num_perm values; every a is odd."""

    def draw(tag: str, j: int) -> int:
        return xxhash.xxh64_intdigest(f"{tag}{j}".encode(), seed=params.seed) & 0xFFFFFFFF

    a = np.array([draw("a", j) | 1 for j in range(params.num_perm)], dtype=np.uint32)
    b = np.array([draw("b", j) for j in range(params.num_perm)], dtype=np.uint32)
    return a, b


def _as_string_array(texts: list[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(texts, type=pa.string())
    return texts.fill_null("")


def _string_chunks(texts: list[str] | pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The texts as string arrays without nulls, a ChunkedArray's chunks as they are: combining
    them would copy a unit's whole text (its size again in memory) for nothing."""
    if isinstance(texts, pa.ChunkedArray):
        return [c if c.null_count == 0 else c.fill_null("") for c in texts.chunks]
    return [_as_string_array(texts)]


def _tokens(
    texts: pa.Array, ascii_only: bool = False, normalized: bool = False
) -> tuple[pa.Array, np.ndarray]:
    """Every whitespace-separated token of the batch with its punctuation trimmed (empty where it
    was punctuation only), flat, and the document of each. `ascii_only`: every text is ASCII, so
    Arrow's ASCII kernels (several times faster) give the same bytes as the UTF-8 ones; the
    split stays utf8_split_whitespace, whose whitespace (Python's str.isspace) includes
    U+001C..U+001F, which ascii_split_whitespace does not. `normalized`: the texts are NFC
    already."""
    if ascii_only:
        tokens = pc.utf8_split_whitespace(pc.ascii_lower(texts))
        words = pc.ascii_trim(pc.list_flatten(tokens), characters=string.punctuation)
    else:
        from pipeline.dedup.nfc import nfc

        tokens = pc.utf8_split_whitespace(pc.utf8_lower(texts if normalized else nfc(texts)))
        words = pc.utf8_trim(pc.list_flatten(tokens), characters=PUNCTUATION)
    return words, pc.list_parent_indices(tokens).to_numpy()


def _words(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """All words of the batch, flat, and the number of words of each document."""
    words, parents = _tokens(texts)
    keep = pc.greater(pc.binary_length(words), 0)
    parents = parents[keep.to_numpy(zero_copy_only=False)]
    return pc.filter(words, keep), np.bincount(parents, minlength=len(texts))


def word_lists(texts: list[str] | pa.Array) -> list[list[str]]:
    """The words each document is shingled from (for ground truth, tests and debugging)."""
    words, counts = _words(_as_string_array(texts))
    flat = words.to_pylist()
    ends = np.cumsum(counts)
    return [flat[end - count : end] for end, count in zip(ends, counts, strict=True)]


def _hashed_words(
    texts: pa.Array, seed: int, ascii_only: bool, compiled: bool = False, normalized: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """xxh3_64 of every word of the batch, flat, and the number of words of each document.

    `compiled` (minhash_kernel.available()): the words are found and hashed in compiled loops
    (text_kernel, equal to the xxhash package), which also keeps Arrow's utf8_split_whitespace
    out: (pyarrow 26) on the last string of an array it sometimes does not split at a trailing
    whitespace character, so a signature could depend on what followed the array in memory.
    Otherwise each distinct token of the batch is hashed once by xxhash (dictionary-encoded as
    binary: the same groups as strings, and Arrow's binary hash table is ~2.5x faster). Tokens
    left empty by the trim are dropped from the hashes, not from the strings (no string copy).
    `normalized`: the texts are NFC already."""
    from pipeline.dedup import text_kernel

    if compiled and ascii_only:  # split, lowered, trimmed and hashed in one compiled pass
        return text_kernel.ascii_word_hashes(texts, ASCII_SPACES, string.punctuation, seed)
    if compiled:  # split, trimmed and hashed in one compiled pass
        lowered = pc.utf8_lower(texts if normalized else text_kernel.nfc(texts))
        return text_kernel.utf8_word_hashes(lowered, PUNCTUATION, seed)
    words, parents = _tokens(texts, ascii_only, normalized)
    keep = pc.binary_length(words).to_numpy(zero_copy_only=False) > 0
    counts = np.bincount(parents[keep], minlength=len(texts))
    encoded = pc.dictionary_encode(words.cast(pa.binary()))
    distinct = encoded.dictionary.to_pylist()
    hashes = np.fromiter(
        (xxhash.xxh3_64_intdigest(w, seed=seed) for w in distinct), np.uint64, len(distinct)
    )
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return hashes[indices[keep]], counts


def _exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


def _shingle_hashes(
    word_hashes: np.ndarray, word_counts: np.ndarray, ngram: int
) -> tuple[np.ndarray, np.ndarray]:
    """uint32 hash of every shingle (grouped by document) and the shingle count per document."""
    n_words = len(word_hashes)
    full = word_counts >= ngram
    shingle_counts = np.where(full, word_counts - ngram + 1, np.minimum(word_counts, 1))
    out = np.empty(int(shingle_counts.sum()), dtype=np.uint64)
    shingle_starts = _exclusive_cumsum(shingle_counts)
    word_starts = _exclusive_cumsum(word_counts)

    # Full shingles: Horner over the whole flat word array with shifted slices (no gather), then
    # keep the windows that lie inside one document.
    if n_words >= ngram and full.any():
        windows = n_words - ngram + 1
        acc = word_hashes[:windows].copy()
        for k in range(1, ngram):
            acc *= SHINGLE_MULTIPLIER
            acc += word_hashes[k : k + windows]
        per_doc = np.repeat(np.arange(len(word_counts))[full], shingle_counts[full])
        rank = np.arange(len(per_doc)) - np.repeat(
            _exclusive_cumsum(shingle_counts[full]), shingle_counts[full]
        )
        out[shingle_starts[per_doc] + rank] = acc[word_starts[per_doc] + rank]

    # Short documents (1 .. ngram-1 words): one shingle of all their words.
    short = np.flatnonzero(~full & (word_counts > 0))
    if len(short):
        acc = np.zeros(len(short), dtype=np.uint64)
        for k in range(ngram - 1):
            present = k < word_counts[short]
            index = np.minimum(word_starts[short] + k, n_words - 1)
            acc = np.where(present, acc * SHINGLE_MULTIPLIER + word_hashes[index], acc)
        out[shingle_starts[short]] = acc
    return (fmix64(out) & np.uint64(0xFFFFFFFF)).astype(np.uint32), shingle_counts


def _min_permuted(
    shingles: np.ndarray,
    shingle_counts: np.ndarray,
    coefficients: tuple[np.ndarray, np.ndarray],
    out: np.ndarray,
    chunk: int,
) -> None:
    """out[d] = min over document d's shingles of (a·s + b) mod 2^32, in (num_perm, chunk) blocks.

    The (perm, shingle) layout keeps numpy's inner loops long and the block cache-sized; a
    document spanning two blocks is merged with np.minimum, so memory stays O(num_perm x chunk).
    """
    a, b = coefficients[0][:, None], coefficients[1][:, None]
    doc_of_shingle_end = np.cumsum(shingle_counts)
    buffer = np.empty((len(a), chunk), dtype=np.uint32)
    for lo in range(0, len(shingles), chunk):
        hi = min(lo + chunk, len(shingles))
        block = buffer[:, : hi - lo]
        np.multiply(a, shingles[lo:hi], out=block)
        np.add(block, b, out=block)
        # documents with a shingle in [lo, hi) and where each starts inside the block
        first = int(np.searchsorted(doc_of_shingle_end, lo, side="right"))
        last = int(np.searchsorted(doc_of_shingle_end, hi, side="left"))
        docs = np.arange(first, last + 1)
        docs = docs[shingle_counts[docs] > 0]
        starts = np.maximum(doc_of_shingle_end[docs] - shingle_counts[docs], lo) - lo
        out[docs] = np.minimum(out[docs], np.minimum.reduceat(block, starts, axis=1).T)


def signatures(
    texts: list[str] | pa.Array | pa.ChunkedArray,
    params: MinHashParams = DEFAULT_PARAMS,
    *,
    batch_bytes: int = 4 << 20,
    chunk_shingles: int = 8192,
    compiled: bool = True,
    known: NormalForm | None = None,
) -> np.ndarray:
    """MinHash signatures, shape (len(texts), num_perm), uint32.

    Work happens per batch of about batch_bytes of text, so intermediate memory is a few times the
    batch (or the largest document) plus num_perm x chunk_shingles x 4 bytes. Each row depends on
    its document only: results do not depend on batching. Shingling and the permutations run in
    minhash_kernel's compiled loop where numba is available (`compiled`: unless False), else in
    numpy; both give the same values. `known`: nfc.normal_form of `texts`, where the caller has
    it (the NFC exact dedup's hashes take too): no document is looked at for NFC again.
    """
    # here: importing numba (~0.5 s) is paid by the workers that sign, not by the driver
    from pipeline.dedup import minhash_kernel

    fused = compiled and minhash_kernel.available()
    chunks = _string_chunks(texts)
    out = np.full((sum(map(len, chunks)), params.num_perm), EMPTY_VALUE, dtype=np.uint32)
    coefficients = permutation_coefficients(params)
    first = 0
    for chunk in chunks:
        _sign_chunk(
            chunk,
            params,
            coefficients,
            out[first : first + len(chunk)],
            fused,
            batch_bytes,
            chunk_shingles,
            known,
            first,
        )
        first += len(chunk)
    return out


def _sign_chunk(
    texts: pa.Array,
    params: MinHashParams,
    coefficients: tuple[np.ndarray, np.ndarray],
    out: np.ndarray,
    fused: bool,
    batch_bytes: int,
    chunk_shingles: int,
    known: NormalForm | None = None,
    first: int = 0,
) -> None:
    """Signs `texts`, the documents from `first` on of the column `known` describes."""
    from pipeline.dedup import minhash_kernel, text_kernel
    from pipeline.dedup.nfc import nfc

    for start, stop in text_kernel.batch_bounds(texts, batch_bytes):
        batch = texts.slice(start, stop - start)
        # ASCII documents and the others go through different (equivalent) kernels; a row's
        # signature depends on its document only, so each group is signed on its own
        if known is None:
            is_ascii = pc.string_is_ascii(batch).to_numpy(zero_copy_only=False)
        else:
            is_ascii = known.ascii[first + start : first + stop]
        for ascii_only in (True, False):
            rows = np.flatnonzero(is_ascii == ascii_only)
            if not len(rows):
                continue
            whole = len(rows) == len(batch)
            source = batch if ascii_only or known is None else nfc(batch, known, first + start)
            group = source if whole else source.take(pa.array(rows))
            word_hashes, word_counts = _hashed_words(
                group, params.seed, ascii_only, fused, normalized=known is not None
            )
            block = out[start:stop] if whole else np.full((len(rows), params.num_perm), EMPTY_VALUE)
            if fused:
                minhash_kernel.sign(word_hashes, word_counts, params.ngram, coefficients, block)
            else:
                shingles, shingle_counts = _shingle_hashes(word_hashes, word_counts, params.ngram)
                _min_permuted(shingles, shingle_counts, coefficients, block, chunk_shingles)
            if not whole:
                out[start + rows] = block


def band_hashes(sigs: np.ndarray, params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """uint64 hash of each band's rows, shape (n, bands).

    Band j's hash starts from fmix64(j + 1), so one hash value names one (band, rows) bucket and a
    single table of (hash, doc) rows can hold every band.
    """
    rows = sigs[:, : params.bands * params.rows].reshape(len(sigs), params.bands, params.rows)
    acc = np.broadcast_to(
        fmix64(np.arange(1, params.bands + 1, dtype=np.uint64)), (len(sigs), params.bands)
    ).copy()
    for r in range(params.rows):
        acc *= SHINGLE_MULTIPLIER
        acc += rows[:, :, r].astype(np.uint64)
    return fmix64(acc)


def narrowed(sigs: np.ndarray, bits: int = STORED_BITS) -> np.ndarray:
    """The low `bits` (8 or 16) of each signature value: what near dedup stores and compares
    (b-bit MinHash; see the module docstring). Band hashes come from the full values first."""
    return (np.asarray(sigs) & np.uint32((1 << bits) - 1)).astype(f"<u{bits // 8}")


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray | float:
    """Estimated Jaccard of two signatures; row-wise for 2-D inputs (pairs of signatures).
    Full 32-bit values: the fraction m of equal values. Narrowed ones (uint16, uint8: `narrowed`)
    also match by chance, at 2^-b: the estimate is (m - 2^-b) / (1 - 2^-b) (Li & König's b-bit
    MinHash, its large-set approximation), at least 0."""
    a, b = np.asarray(sig_a), np.asarray(sig_b)
    m = np.mean(a == b, axis=-1)
    if a.dtype.itemsize >= 4:
        return m
    chance = 2.0 ** -(8 * a.dtype.itemsize)
    return np.maximum((m - chance) / (1 - chance), 0.0)


def verified_edges(
    pairs: np.ndarray, keys: np.ndarray, sigs: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """The candidate pairs (rows of keys) whose estimated Jaccard is >= threshold, and that value.

    Banding alone would chain documents through pairs far below the threshold; this check on the
    full signature is what makes an edge mean "near duplicate".
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(keys)
    rows = order[np.searchsorted(keys, pairs, sorter=order)]
    sims = np.asarray(estimated_jaccard(sigs[rows[:, 0]], sigs[rows[:, 1]])).reshape(-1)
    close = sims >= threshold
    return pairs[close], sims[close]


def shingle_set(text: str, ngram: int = 5) -> frozenset[str]:
    """Exact shingles of one text (words joined by a space), by the rule signatures() hashes."""
    (words,) = word_lists([text])
    if 0 < len(words) < ngram:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + ngram]) for i in range(len(words) - ngram + 1))


def exact_jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 1.0 for two empty sets (the convention signatures() follows)."""
    if not a and not b:
        return 1.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)

"""MinHash's inner loop compiled with numba (pure: no I/O), the same arithmetic as minhash.py's
numpy path, value for value.

For each document, from its words' xxh3 hashes: each shingle's hash (Horner over its words with
SHINGLE_MULTIPLIER, fmix64, low 32 bits; a document shorter than ngram words has one shingle of
all its words) and, for every permutation j, the minimum over its shingles of (a_j·s + b_j) mod
2^32. Fused, one pass: a shingle's hash stays in a register and its 256 permuted values never
reach memory, against numpy's three passes over a (num_perm x shingles) block. Measured ~5x
faster than the numpy path for that step (256 permutations, one core).

numba is optional: `available()` is False where it is not installed (or cannot compile), and
minhash.signatures uses the numpy path. Compiled on first use and cached on disk (numba's
cache=True): a process pays `import numba` and a cache load once (~1-2 s), not per task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

try:  # optional: the numpy path gives the same values
    import numba
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # minhash.SHINGLE_MULTIPLIER
_FMIX_1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX_2 = np.uint64(0xC4CEB9FE1A85EC53)
_LOW32 = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(33)


def _sign(word_hashes, word_counts, ngram, a, b, out):  # pragma: no cover - compiled
    """out[d, j] = min(out[d, j], min over document d's shingles of (a_j·s + b_j) mod 2^32)."""
    perms = a.shape[0]
    first = 0
    for doc in range(word_counts.shape[0]):
        n = word_counts[doc]
        windows = n - ngram + 1 if n >= ngram else (1 if n > 0 else 0)
        width = ngram if n >= ngram else n
        row = out[doc]
        for w in range(windows):
            acc = np.uint64(0)
            for k in range(width):
                acc = acc * _MULTIPLIER + word_hashes[first + w + k]
            acc ^= acc >> _SHIFT
            acc *= _FMIX_1
            acc ^= acc >> _SHIFT
            acc *= _FMIX_2
            acc ^= acc >> _SHIFT
            s = np.uint32(acc & _LOW32)
            for j in range(perms):
                v = np.uint32(a[j] * s + b[j])
                if v < row[j]:
                    row[j] = v
        first += n


def _ascii_words(data, offsets, space, punct, out_data, out_offsets, counts):  # pragma: no cover
    """The words of ASCII documents (data: their bytes; offsets: n + 1 document bounds), by
    minhash's rule: lowered, split at `space` bytes, `punct` bytes trimmed from both ends, empty
    ones dropped; written flat into out_data / out_offsets, their number per document in
    `counts`. Returns the number of words."""
    words = 0
    end = 0
    out_offsets[0] = 0
    for doc in range(offsets.shape[0] - 1):
        i, stop = offsets[doc], offsets[doc + 1]
        found = 0
        while i < stop:
            while i < stop and space[data[i]]:
                i += 1
            start = i
            while i < stop and not space[data[i]]:
                i += 1
            lo, hi = start, i
            while lo < hi and punct[data[lo]]:
                lo += 1
            while hi > lo and punct[data[hi - 1]]:
                hi -= 1
            if hi > lo:
                for k in range(lo, hi):
                    c = data[k]
                    out_data[end] = c + 32 if 65 <= c <= 90 else c
                    end += 1
                words += 1
                out_offsets[words] = end
                found += 1
        counts[doc] = found
    return words


_compiled = None
_words_compiled = None
_failed = False


def available() -> bool:
    """Whether the compiled kernel can run here (numba installed and the kernel compiles)."""
    global _compiled, _words_compiled, _failed
    if _compiled is None and not _failed:
        if numba is None:
            _failed = True
        else:
            try:
                _words_compiled = numba.njit(cache=True, nogil=True)(_ascii_words)
                _compiled = numba.njit(cache=True, nogil=True)(_sign)
                _compiled(  # compile (or load from the cache) now, on tiny inputs
                    np.zeros(2, np.uint64),
                    np.array([2], np.int64),
                    2,
                    np.ones(1, np.uint32),
                    np.zeros(1, np.uint32),
                    np.zeros((1, 1), np.uint32),
                )
                ascii_words(pa.array(["A b"], pa.string()), "", "")
            except Exception:  # noqa: BLE001 - any failure to compile: the numpy path
                _compiled, _words_compiled, _failed = None, None, True
    return _compiled is not None


def _byte_table(chars: str) -> np.ndarray:
    table = np.zeros(256, np.bool_)
    table[list(chars.encode("ascii"))] = True
    return table


def ascii_words(texts: pa.Array, spaces: str, punctuation: str) -> tuple[pa.Array, np.ndarray]:
    """The words of ASCII `texts` (lowered, split at `spaces`, `punctuation` trimmed, empty ones
    dropped) as one binary array, and the number of words of each text. Call `available()`
    first."""
    if texts.type != pa.string() or texts.null_count:
        raise ValueError("ascii_words takes a string array without nulls")
    _, offsets_buffer, data_buffer = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[texts.offset : texts.offset + len(texts) + 1]
    data = np.frombuffer(data_buffer or b"", np.uint8)
    size = int(offsets[-1] - offsets[0]) if len(offsets) else 0
    out_data = np.empty(max(size, 1), np.uint8)
    # a word is at least one byte, and two words of a text have a space between them
    out_offsets = np.empty(size // 2 + len(texts) + 2, np.int32)
    counts = np.zeros(len(texts), np.int64)
    n = _words_compiled(
        data,
        offsets.astype(np.int64),
        _byte_table(spaces),
        _byte_table(punctuation),
        out_data,
        out_offsets,
        counts,
    )
    words = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(out_offsets[: n + 1]), pa.py_buffer(out_data)]
    )
    return words, counts


def sign(
    word_hashes: np.ndarray,
    word_counts: np.ndarray,
    ngram: int,
    coefficients: tuple[np.ndarray, np.ndarray],
    out: np.ndarray,
) -> None:
    """Fold the batch's shingles into `out` (rows: its documents, initialised to the empty-set
    value); `word_hashes` flat uint64, `word_counts` per document. Call `available()` first."""
    a, b = coefficients
    _compiled(
        np.ascontiguousarray(word_hashes, np.uint64),
        np.ascontiguousarray(word_counts, np.int64),
        int(ngram),
        np.ascontiguousarray(a, np.uint32),
        np.ascontiguousarray(b, np.uint32),
        out,
    )

"""Dedup's per-byte text loops, compiled: MinHash's word hashes (dedup/minhash.py: xxh3_64 of
each word, seeded), exact dedup's normalisation (core/text.normalize) and the NFC quick check
(nfc_kinds, for dedup/nfc.py), from an Arrow string array's buffers, with no Python call per
word or per document but the final xxh3-128.

One Python call per word (xxhash) cost more than the rest of signing: the loops that find the
words call xxh3_kernel.py's XXH3-64 (bit for bit the xxhash package's) on each. Their cache
folder is keyed on that file too (kernel_cache.key_also): numba's disk cache (cache=True)
notices edits to the file of the function it compiled only, not to the functions that one calls.

The loops are branch-light where text is ASCII: a word of up to 16 bytes is hashed straight
from the document's bytes, lowered inside the hash's loads; normalisation writes every ASCII
byte and advances the output only where it does not extend a space run.

Compiled with numba when it is installed, by `available()` (lazily, on first call) under
kernel_cache's machine-wide lock into its shared cache; `available()` is False without numba
(or where it fails to compile), and callers use their Python paths.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline.dedup import kernel_cache  # before the first njit: where numba caches these loops
from pipeline.dedup import nfc as nfc_rule
from pipeline.dedup.nfc import ASCII, ASK, NFC_ALREADY, NormalForm, nfc

# the hash the word loops call, and its helpers (tests/unit/test_text_kernel.py checks each
# through this module)
from pipeline.dedup.xxh3_kernel import (  # noqa: F401
    SECRET,
    _jit,  # numba's decorators (identity without numba), shared with the hash's loops
    _jit_inline,
    _long,
    _mix16,
    _r32,
    _r64,
    _stripe,
    _upto16,
    _upto240,
    long_secret,
    lowered_upto16,
    numba,
    xxh3_64,
)

kernel_cache.install_locator()
kernel_cache.key_also(__file__, "xxh3_kernel.py", "nfc.py")  # its hash; the kinds nfc.py names

SPACE, PUNCT = 1, 2


@_jit
def _ascii_word_hashes(data, offsets, classes, seed, secret, hashes, counts):
    """The words of ASCII documents (data: their bytes; offsets: n + 1 document bounds), by
    minhash's rule: lowered, split at SPACE bytes, PUNCT bytes trimmed from both ends (`classes`:
    the flags of each byte), empty ones dropped; each hashed (xxh3_64 with `seed`; `secret`:
    long_secret(seed)) into `hashes`, their number per document in `counts`. Returns the number
    of words. A document's words are all found, then all hashed: a word's end, which the text
    decides, is not a branch of the loop that hashes (measured ~15 % faster than one loop)."""
    acc = np.empty(8, np.uint64)
    longest = 0
    for doc in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[doc + 1] - offsets[doc])
    word = np.empty(longest + 1, np.uint8)  # a word over 16 bytes, lowered
    bounds = np.empty(longest + 2, np.int64)
    starts = np.empty(longest // 2 + 1, np.int64)
    sizes = np.empty(longest // 2 + 1, np.int64)
    words = 0
    for doc in range(offsets.shape[0] - 1):
        # runs of non-SPACE bytes, run k from bounds[2k] to bounds[2k+1]: every position is
        # written, and kept where the space flag changes (no branch that a word's end decides)
        edges = 0
        space = 1
        for i in range(offsets[doc], offsets[doc + 1]):
            now = classes[data[i]] & SPACE
            bounds[edges] = i
            edges += now ^ space
            space = now
        bounds[edges] = offsets[doc + 1]
        edges += space ^ 1
        found = 0
        for e in range(0, edges, 2):  # trimmed: one byte at each end without a branch
            lo, hi = bounds[e], bounds[e + 1]
            lo += (classes[data[lo]] & PUNCT) >> 1
            hi -= ((classes[data[hi - 1]] & PUNCT) >> 1) & (lo < hi)
            while lo < hi and classes[data[lo]] & PUNCT:
                lo += 1
            while hi > lo and classes[data[hi - 1]] & PUNCT:
                hi -= 1
            starts[found] = lo
            sizes[found] = hi - lo
            found += hi > lo
        for k in range(found):
            lo, n = starts[k], sizes[k]
            if n <= 16:  # most words: hashed where they lie, lowered as they are loaded
                hashes[words + k] = lowered_upto16(data, lo, n, seed)
            else:
                for j in range(n):
                    c = data[lo + j]
                    word[j] = c + 32 if 65 <= c <= 90 else c
                hashes[words + k] = xxh3_64(word, 0, n, seed, secret, acc)
        words += found
        counts[doc] = found
    return words


def _byte_classes(spaces: str, punctuation: str) -> np.ndarray:
    """SPACE | PUNCT flags of each byte value."""
    table = np.zeros(256, np.uint8)
    table[list(spaces.encode("ascii"))] |= SPACE
    table[list(punctuation.encode("ascii"))] |= PUNCT
    return table


def _string_buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, int64 offsets: n + 1 bounds) of a string or binary array without nulls."""
    if texts.null_count:
        raise ValueError("takes an array without nulls")
    _, offsets_buffer, data_buffer = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[texts.offset : texts.offset + len(texts) + 1]
    return np.frombuffer(data_buffer or b"\0", np.uint8), offsets.astype(np.int64)


def ascii_word_hashes(
    texts: pa.Array, spaces: str, punctuation: str, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """xxh3_64 (`seed`) of each word of ASCII `texts` (_ascii_word_hashes), flat, and the number
    of words of each text."""
    if texts.type != pa.string():
        raise ValueError("ascii_word_hashes takes a string array")
    data, offsets = _string_buffers(texts)
    size = int(offsets[-1] - offsets[0]) if len(offsets) else 0
    # a word is at least one byte, and two words of a text have a space between them
    hashes = np.empty(size // 2 + len(texts) + 1, np.uint64)
    counts = np.zeros(len(texts), np.int64)
    n = _ascii_word_hashes(
        data,
        offsets,
        _byte_classes(spaces, punctuation),
        np.uint64(seed),
        long_secret(seed),
        hashes,
        counts,
    )
    return hashes[:n], counts


# -- UTF-8 text ------------------------------------------------------------------------------
# past the last code point str.isspace accepts (U+3000; tests/unit/test_text_kernel.py)
_CLASSES_SIZE = 0x3001


@functools.lru_cache(maxsize=8)
def char_classes(punctuation: str = "") -> np.ndarray:
    """SPACE (str.isspace) | PUNCT (in `punctuation`) flags of the code points below
    _CLASSES_SIZE; every code point past the table is neither."""
    table = np.zeros(_CLASSES_SIZE, np.uint8)
    table[[c for c in range(_CLASSES_SIZE) if chr(c).isspace()]] |= SPACE
    if any(ord(c) >= _CLASSES_SIZE for c in punctuation):
        raise ValueError("punctuation past the class table")
    table[[ord(c) for c in punctuation]] |= PUNCT
    table.flags.writeable = False  # cached: shared by every caller
    return table


@_jit_inline
def _char_at(d, i, classes):
    """(class flags, byte length) of the UTF-8 character starting at d[i] (valid UTF-8)."""
    c = np.int64(d[i])
    if c < 0x80:
        return classes[c], 1
    if c < 0xE0:
        n, cp = 2, ((c & 0x1F) << 6) | (np.int64(d[i + 1]) & 0x3F)
    elif c < 0xF0:
        n, cp = 3, ((c & 0x0F) << 12) | ((np.int64(d[i + 1]) & 0x3F) << 6) | (d[i + 2] & 0x3F)
    else:
        n, cp = 4, (c & 0x07) << 18 | ((np.int64(d[i + 1]) & 0x3F) << 12)
        cp |= ((np.int64(d[i + 2]) & 0x3F) << 6) | (d[i + 3] & 0x3F)
    return (classes[cp] if cp < classes.shape[0] else np.uint8(0)), n


@_jit
def _utf8_word_hashes(data, offsets, classes, seed, secret, hashes, counts):
    """_ascii_word_hashes for UTF-8 documents already lowered: split at SPACE characters,
    PUNCT characters trimmed from both ends, empty words dropped (str.split, str.strip)."""
    acc = np.empty(8, np.uint64)
    words = 0
    for doc in range(offsets.shape[0] - 1):
        i, stop = offsets[doc], offsets[doc + 1]
        found = 0
        while i < stop:
            while i < stop:
                flags, n = _char_at(data, i, classes)
                if not flags & SPACE:
                    break
                i += n
            lo = i
            while i < stop:
                flags, n = _char_at(data, i, classes)
                if flags & SPACE:
                    break
                i += n
            hi = i
            while lo < hi:
                flags, n = _char_at(data, lo, classes)
                if not flags & PUNCT:
                    break
                lo += n
            while hi > lo:
                last = hi - 1
                while data[last] & 0xC0 == 0x80:  # back to the character's first byte
                    last -= 1
                flags, n = _char_at(data, last, classes)
                if not flags & PUNCT:
                    break
                hi = last
            if hi > lo:
                n = hi - lo
                if n <= 16:  # most words: the branch inlined here (through xxh3_64, a call)
                    hashes[words] = _upto16(data, lo, n, seed)
                else:
                    hashes[words] = xxh3_64(data, lo, n, seed, secret, acc)
                words += 1
                found += 1
        counts[doc] = found
    return words


@_jit
def _collapse_spaces(data, offsets, classes, out, out_offsets):
    """Each document's SPACE runs made one space, none at either end (" ".join(text.split())),
    written flat into `out` with n + 1 bounds in `out_offsets`. An ASCII byte is written as is
    (a space as " ") and kept unless it follows a space: no branch on the text's content."""
    end = 0
    out_offsets[0] = 0
    for doc in range(offsets.shape[0] - 1):
        i, stop = offsets[doc], offsets[doc + 1]
        first = end
        after_space = True  # so that spaces at the start are dropped
        while i < stop:
            c = data[i]
            if c < 0x80:
                space = classes[c] & SPACE != 0
                out[end] = 32 if space else c
                end += not (space and after_space)
                after_space = space
                i += 1
                continue
            flags, n = _char_at(data, i, classes)
            space = flags & SPACE != 0
            if not space:
                for k in range(n):
                    out[end + k] = data[i + k]
                end += n
            elif not after_space:
                out[end] = 32
                end += 1
            after_space = space
            i += n
        if after_space and end > first:  # the one space a trailing run left
            end -= 1
        out_offsets[doc + 1] = end


_SPACES = char_classes()


# below this, the characters whose NFC the quick check knows (past it: CJK and beyond, asked)
_QUICK_NFC_SIZE = 0x3400
# Hangul's vowel and trailing jamo join a syllable before them by rule, not by a decomposition
_HANGUL_JOINING = [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]


@functools.lru_cache(maxsize=1)
def quick_nfc() -> np.ndarray:
    """Per code point below _QUICK_NFC_SIZE: 1 where a text of such characters only is NFC,
    whatever their order (Unicode's NFC quick check says YES): a starter (combining class 0)
    that NFC keeps and that joins no character before it (the second of no canonical pair)."""
    joining = set(_HANGUL_JOINING)
    for c in range(_QUICK_NFC_SIZE):  # a pair's second part precedes the pair's own code point
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            joining.add(int(parts[1], 16))
    table = np.zeros(_QUICK_NFC_SIZE, np.uint8)
    for c in range(_QUICK_NFC_SIZE):
        ch = chr(c)
        ok = not unicodedata.combining(ch) and unicodedata.normalize("NFC", ch) == ch
        table[c] = ok and c not in joining
    table.flags.writeable = False
    return table


@_jit
def _nfc_kinds(data, offsets, quick, kinds):
    """Per document: ASCII, NFC_ALREADY (every character flagged in `quick`), or ASK (Python's
    NFC decides). Eight ASCII bytes are passed at once; past them, only a character's first
    byte (from 0xC0) is looked at."""
    for doc in range(offsets.shape[0] - 1):
        kind = ASCII
        i, stop = offsets[doc], offsets[doc + 1]
        while i < stop:
            if i + 8 <= stop:
                high = data[i] | data[i + 1] | data[i + 2] | data[i + 3]
                high |= data[i + 4] | data[i + 5] | data[i + 6] | data[i + 7]
                if high < 0x80:
                    i += 8
                    continue
            c = np.int64(data[i])
            i += 1
            if c < 0xC0:
                continue
            kind = NFC_ALREADY
            if c < 0xE0:
                cp = ((c & 0x1F) << 6) | (np.int64(data[i]) & 0x3F)
            elif c < 0xF0:
                cp = ((c & 0x0F) << 12) | ((np.int64(data[i]) & 0x3F) << 6)
                cp |= np.int64(data[i + 1]) & 0x3F
            else:
                cp = quick.shape[0]  # past the table
            if cp >= quick.shape[0] or not quick[cp]:
                kind = ASK
                break
        kinds[doc] = kind


def nfc_kinds(texts: pa.Array) -> np.ndarray:
    """_nfc_kinds of each document of a string array without nulls (uint8)."""
    data, offsets = _string_buffers(texts)
    kinds = np.empty(len(texts), np.uint8)
    _nfc_kinds(data, offsets, quick_nfc(), kinds)
    return kinds


def normal_form(texts: pa.Array | pa.ChunkedArray) -> NormalForm:
    """nfc.normal_form, with the compiled quick check (nfc_kinds) where it runs."""
    return nfc_rule.normal_form(texts, nfc_kinds if available() else None)


def utf8_word_hashes(
    lowered: pa.Array, punctuation: str, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """xxh3_64 (`seed`) of each word of `lowered` (lowered NFC documents, any UTF-8; split at
    str.isspace characters, `punctuation` trimmed), flat, and the number of words of each."""
    data, offsets = _string_buffers(lowered)
    size = int(offsets[-1] - offsets[0]) if len(offsets) else 0
    hashes = np.empty(size // 2 + len(lowered) + 1, np.uint64)
    counts = np.zeros(len(lowered), np.int64)
    classes = char_classes(punctuation)
    n = _utf8_word_hashes(
        data, offsets, classes, np.uint64(seed), long_secret(seed), hashes, counts
    )
    return hashes[:n], counts


def batch_bounds(texts: pa.Array, batch_bytes: int) -> list[tuple[int, int]]:
    """Consecutive document ranges of about batch_bytes of text (one document at least)."""
    ends = np.cumsum(pc.binary_length(texts).to_numpy(zero_copy_only=False))
    bounds, start = [], 0
    while start < len(texts):
        base = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, base + batch_bytes, side="right")), start + 1)
        bounds.append((start, stop))
        start = stop
    return bounds


def content_hashes(
    texts: pa.Array | pa.ChunkedArray, batch_bytes: int = 4 << 20, known: NormalForm | None = None
) -> list[bytes]:
    """core/text.content_hash of every document (strings, no nulls): NFC, space runs collapsed,
    ends stripped, xxh3-128. Done about `batch_bytes` of text at a time, so the copies it makes
    (NFC, the normalised bytes) are a batch's, never the unit's. `known`: nfc.normal_form of
    `texts`, where the caller has it (the NFC the signatures take too)."""
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    hashes: list[bytes] = []
    first = 0
    for chunk in chunks:
        for start, stop in batch_bounds(chunk, batch_bytes):
            normal = nfc(chunk.slice(start, stop - start), known, first + start)
            data, offsets = _string_buffers(normal)
            out = np.empty(max(int(offsets[-1] - offsets[0]), 1), np.uint8)
            bounds = np.empty(len(offsets), np.int64)
            _collapse_spaces(data, offsets, _SPACES, out, bounds)
            view, starts, ends = memoryview(out), bounds[:-1].tolist(), bounds[1:].tolist()
            hashes += [xxhash.xxh3_128_digest(view[a:b]) for a, b in zip(starts, ends, strict=True)]
        first += len(chunk)
    return hashes


_usable: bool | None = None


def available() -> bool:
    """Whether these loops run compiled here (numba installed and they compile)."""
    global _usable
    if _usable is None:
        _usable = numba is not None
        if _usable:
            try:  # compile (or load from the cache) now, on tiny inputs
                with kernel_cache.compiling():
                    _compile_now()
            except Exception:  # noqa: BLE001 - any failure to compile: the Python paths
                _usable = False
    return _usable


def _compile_now() -> None:
    """Every loop, for the argument types the callers pass."""
    ascii_word_hashes(pa.array(["A b"], pa.string()), " ", "", 0)
    utf8_word_hashes(pa.array(["é b"], pa.string()), "", 0)
    content_hashes(pa.array([" é  b"], pa.string()))
    nfc_kinds(pa.array(["é", "a"], pa.string()))

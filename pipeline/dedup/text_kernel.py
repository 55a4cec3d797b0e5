"""Dedup's per-byte text loops, compiled: MinHash's word hashes (dedup/minhash.py: xxh3_64 of
each word, seeded) and exact dedup's normalisation (core/text.normalize), both from an Arrow
string array's buffers, with no Python call per word or per document but the final xxh3-128.

One Python call per word (xxhash) cost more than the rest of signing; here XXH3-64 is written
for numba, bit for bit the xxhash package's xxh3_64_intdigest, and called inside the loops that
find the words. It follows the reference implementation (xxHash 0.8, XXH3_64bits_withSeed)
branch by branch: 0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes with the default secret and the seed,
longer inputs with the secret derived from the seed (XXH3_initCustomSecret) and the scalar
stripe loop. tests/unit/test_text_kernel.py checks it against xxhash for every length up to
2,100 bytes and several seeds. All arithmetic is uint64 and wraps: an int64 operand would make
numba compute in float64, so every constant and shift count below is a np.uint64.

The loops live in this file with the hash because numba's disk cache (cache=True) notices edits
to the file of the function it compiled only, not to the functions that one calls.

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

kernel_cache.install_locator()

try:
    import numba

    _jit = numba.njit(cache=True, nogil=True)
    # inlined where it is called: a call that passes arrays costs reference counting, which
    # tripled the time per word
    _jit_inline = numba.njit(cache=True, nogil=True, inline="always")
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function

    _jit_inline = _jit


U = np.uint64
# An int literal passed to a compiled function makes numba compile one copy of that function per
# value (and of everything it calls): offsets go through _I, typed int64 like any other index.
_I = np.int64
_P32_1, _P32_2, _P32_3 = U(0x9E3779B1), U(0x85EBCA77), U(0xC2B2AE3D)
_P64_1, _P64_2, _P64_3 = U(0x9E3779B185EBCA87), U(0xC2B2AE3D27D4EB4F), U(0x165667B19E3779F9)
_P64_4, _P64_5 = U(0x85EBCA77C2B2AE63), U(0x27D4EB2F165667C5)
_MX1, _MX2 = U(0x165667919E3779F9), U(0x9FB21C651E98DF25)
_LOW32 = U(0xFFFFFFFF)
_S8, _S16, _S24, _S28, _S29, _S32 = U(8), U(16), U(24), U(28), U(29), U(32)
_S33, _S35, _S37, _S40, _S47, _S48, _S56 = U(33), U(35), U(37), U(40), U(47), U(48), U(56)
_R24, _R40, _R49, _R15 = U(24), U(40), U(49), U(15)

# XXH3_kSecret, the reference implementation's default secret (192 bytes)
SECRET = np.frombuffer(
    bytes.fromhex(
        "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
        "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
        "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
        "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
        "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
        "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
    ),
    np.uint8,
)


def _secret_word(at: int, size: int = 8) -> np.uint64:
    return U(int.from_bytes(SECRET[at : at + size].tobytes(), "little"))


# The default secret's words that inputs of up to 16 bytes mix in, as constants
_FLIP_9TO16 = (_secret_word(24) ^ _secret_word(32), _secret_word(40) ^ _secret_word(48))
_FLIP_4TO8 = _secret_word(8) ^ _secret_word(16)
_FLIP_1TO3 = _secret_word(0, 4) ^ _secret_word(4, 4)
_FLIP_EMPTY = _secret_word(56) ^ _secret_word(64)
# The default secret's 64-bit word at every byte offset, as inputs of 17-240 bytes read it
_SECRET_AT = np.array([_secret_word(at) for at in range(SECRET.size - 7)], np.uint64)


def long_secret(seed: int) -> np.ndarray:
    """XXH3_initCustomSecret: what inputs over 240 bytes are hashed with under `seed`."""
    words = SECRET.view("<u8").copy()
    with np.errstate(over="ignore"):
        words[0::2] += U(seed)
        words[1::2] -= U(seed)
    return words.view(np.uint8)


@_jit
def _r64(d, i):
    return (
        U(d[i])
        | (U(d[i + 1]) << _S8)
        | (U(d[i + 2]) << _S16)
        | (U(d[i + 3]) << _S24)
        | (U(d[i + 4]) << _S32)
        | (U(d[i + 5]) << _S40)
        | (U(d[i + 6]) << _S48)
        | (U(d[i + 7]) << _S56)
    )


@_jit
def _r32(d, i):
    return U(d[i]) | (U(d[i + 1]) << _S8) | (U(d[i + 2]) << _S16) | (U(d[i + 3]) << _S24)


@_jit
def _swap64(x):
    out = U(0)
    for _ in range(8):
        out = (out << _S8) | (x & U(0xFF))
        x >>= _S8
    return out


@_jit
def _swap32(x):
    return (
        ((x & U(0xFF)) << _S24)
        | ((x & U(0xFF00)) << _S8)
        | ((x >> _S8) & U(0xFF00))
        | ((x >> _S24) & U(0xFF))
    )


@_jit
def _rotl(x, r):
    return (x << r) | (x >> (U(64) - r))


@_jit
def _fold64(a, b):
    """Low and high halves of the 128-bit product a·b, xor-ed (XXH3_mul128_fold64)."""
    a_lo, a_hi, b_lo, b_hi = a & _LOW32, a >> _S32, b & _LOW32, b >> _S32
    lo_lo, hi_lo, lo_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi
    cross = (lo_lo >> _S32) + (hi_lo & _LOW32) + lo_hi
    upper = (hi_lo >> _S32) + (cross >> _S32) + a_hi * b_hi
    lower = (cross << _S32) | (lo_lo & _LOW32)
    return lower ^ upper


@_jit
def _xxh64_avalanche(h):
    h ^= h >> _S33
    h *= _P64_2
    h ^= h >> _S29
    h *= _P64_3
    h ^= h >> _S32
    return h


@_jit
def _avalanche(h):
    h ^= h >> _S37
    h *= _MX1
    h ^= h >> _S32
    return h


@_jit
def _rrmxmx(h, length):
    h ^= _rotl(h, _R49) ^ _rotl(h, _R24)
    h *= _MX2
    h ^= (h >> _S35) + length
    h *= _MX2
    h ^= h >> _S28
    return h


@_jit
def _mix16(d, i, s, seed):
    """XXH3_mix16B of d[i : i + 16] with the default secret at byte s."""
    lo = _r64(d, i) ^ (_SECRET_AT[s] + seed)
    hi = _r64(d, i + 8) ^ (_SECRET_AT[s + 8] - seed)
    return _fold64(lo, hi)


@_jit
def _upto16(d, i, n, seed):
    length = U(n)
    if n > 8:
        flip1 = _FLIP_9TO16[0] + seed
        flip2 = _FLIP_9TO16[1] - seed
        lo = _r64(d, i) ^ flip1
        hi = _r64(d, i + n - 8) ^ flip2
        return _avalanche(length + _swap64(lo) + hi + _fold64(lo, hi))
    if n >= 4:
        seed ^= _swap32(seed & _LOW32) << _S32
        first, last = _r32(d, i), _r32(d, i + n - 4)
        flip = _FLIP_4TO8 - seed
        return _rrmxmx((last + (first << _S32)) ^ flip, length)
    if n > 0:
        combined = (
            (U(d[i]) << _S16) | (U(d[i + (n >> 1)]) << _S24) | U(d[i + n - 1]) | (length << _S8)
        )
        flip = _FLIP_1TO3 + seed
        return _xxh64_avalanche(combined ^ flip)
    return _xxh64_avalanche(seed ^ _FLIP_EMPTY)


@_jit
def _upto240(d, i, n, seed):
    acc = U(n) * _P64_1
    if n <= 128:
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(d, i + 48, _I(96), seed)
                    acc += _mix16(d, i + n - 64, _I(112), seed)
                acc += _mix16(d, i + 32, _I(64), seed)
                acc += _mix16(d, i + n - 48, _I(80), seed)
            acc += _mix16(d, i + 16, _I(32), seed)
            acc += _mix16(d, i + n - 32, _I(48), seed)
        acc += _mix16(d, i, _I(0), seed)
        acc += _mix16(d, i + n - 16, _I(16), seed)
        return _avalanche(acc)
    for r in range(8):
        acc += _mix16(d, i + 16 * r, 16 * r, seed)
    tail = _mix16(d, i + n - 16, _I(136 - 17), seed)
    acc = _avalanche(acc)
    for r in range(8, n // 16):
        tail += _mix16(d, i + 16 * r, 16 * (r - 8) + 3, seed)
    return _avalanche(acc + tail)


@_jit
def _stripe(acc, d, i, secret, s):
    for k in range(8):
        value = _r64(d, i + 8 * k)
        key = value ^ _r64(secret, s + 8 * k)
        acc[k ^ 1] += value
        acc[k] += (key & _LOW32) * (key >> _S32)


@_jit
def _long(d, i, n, secret, acc):
    """Inputs over 240 bytes (`secret`: long_secret(seed), 192 bytes; `acc`: 8 uint64 scratch)."""
    acc[0], acc[1], acc[2], acc[3] = _P32_3, _P64_1, _P64_2, _P64_3
    acc[4], acc[5], acc[6], acc[7] = _P64_4, _P32_2, _P64_5, _P32_1
    per_block = (192 - 64) // 8  # stripes per block: 16
    block = 64 * per_block
    blocks = (n - 1) // block
    for b in range(blocks):
        for s in range(per_block):
            _stripe(acc, d, i + b * block + 64 * s, secret, 8 * s)
        for k in range(8):  # scramble
            a = acc[k]
            a ^= a >> _S47
            a ^= _r64(secret, 192 - 64 + 8 * k)
            acc[k] = a * _P32_1
    for s in range(((n - 1) - block * blocks) // 64):
        _stripe(acc, d, i + blocks * block + 64 * s, secret, 8 * s)
    _stripe(acc, d, i + n - 64, secret, _I(192 - 64 - 7))
    out = U(n) * _P64_1
    for k in range(4):
        lo = acc[2 * k] ^ _r64(secret, 11 + 16 * k)
        out += _fold64(lo, acc[2 * k + 1] ^ _r64(secret, 19 + 16 * k))
    return _avalanche(out)


@_jit_inline
def xxh3_64(d, i, n, seed, secret, acc):
    """xxh3_64 of d[i : i + n] (uint8 array) with `seed` (uint64); `secret` is long_secret(seed)
    and `acc` 8 uint64 of scratch, used only past 240 bytes."""
    if n <= 16:
        return _upto16(d, i, n, seed)
    if n <= 240:
        return _upto240(d, i, n, seed)
    return _long(d, i, n, secret, acc)


@_jit
def _ascii_word_hashes(data, offsets, space, punct, seed, secret, hashes, counts):
    """The words of ASCII documents (data: their bytes; offsets: n + 1 document bounds), by
    minhash's rule: lowered, split at `space` bytes, `punct` bytes trimmed from both ends, empty
    ones dropped; each hashed (xxh3_64 with `seed`; `secret`: long_secret(seed)) into `hashes`,
    their number per document in `counts`. Returns the number of words."""
    acc = np.empty(8, np.uint64)
    longest = 0
    for doc in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[doc + 1] - offsets[doc])
    word = np.empty(longest + 1, np.uint8)  # the current word, lowered
    words = 0
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
                    word[k - lo] = c + 32 if 65 <= c <= 90 else c
                hashes[words] = xxh3_64(word, 0, hi - lo, seed, secret, acc)
                words += 1
                found += 1
        counts[doc] = found
    return words


def _byte_table(chars: str) -> np.ndarray:
    table = np.zeros(256, np.bool_)
    table[list(chars.encode("ascii"))] = True
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
        _byte_table(spaces),
        _byte_table(punctuation),
        np.uint64(seed),
        long_secret(seed),
        hashes,
        counts,
    )
    return hashes[:n], counts


# -- UTF-8 text ------------------------------------------------------------------------------
SPACE, PUNCT = 1, 2
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
                hashes[words] = xxh3_64(data, lo, hi - lo, seed, secret, acc)
                words += 1
                found += 1
        counts[doc] = found
    return words


@_jit
def _collapse_spaces(data, offsets, classes, out, out_offsets):
    """Each document's SPACE runs made one space, none at either end (" ".join(text.split())),
    written flat into `out` with n + 1 bounds in `out_offsets`."""
    end = 0
    out_offsets[0] = 0
    for doc in range(offsets.shape[0] - 1):
        i, stop = offsets[doc], offsets[doc + 1]
        gap = False
        while i < stop:
            c = data[i]
            if c < 0x80:  # most text: one byte, no decoding
                flags, n = classes[c], 1
            else:
                flags, n = _char_at(data, i, classes)
            if flags & SPACE:
                gap = True
                i += n
                continue
            if gap and end > out_offsets[doc]:
                out[end] = 32
                end += 1
            gap = False
            for k in range(n):
                out[end + k] = data[i + k]
            end += n
            i += n
        out_offsets[doc + 1] = end


_SPACES = char_classes()


def nfc(texts: pa.Array) -> pa.Array:
    """NFC of the non-ASCII documents only (ASCII is NFC already; Python's NFC beats Arrow's).
    Most text is NFC already: only the documents NFC changes are written back, and when none
    is, `texts` itself is returned (no copy of the batch)."""
    non_ascii = pc.invert(pc.string_is_ascii(texts))
    if not pc.any(non_ascii).as_py():
        return texts
    rows = np.flatnonzero(non_ascii.to_numpy(zero_copy_only=False))
    changed, normalized = [], []
    for row, text in zip(rows.tolist(), texts.take(rows).to_pylist(), strict=True):
        nfc_text = unicodedata.normalize("NFC", text)  # the same object when already NFC
        if nfc_text is not text and nfc_text != text:
            changed.append(row)
            normalized.append(nfc_text)
    if not changed:
        return texts
    mask = np.zeros(len(texts), bool)
    mask[changed] = True
    return pc.replace_with_mask(texts, pa.array(mask), pa.array(normalized, texts.type))


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


def content_hashes(texts: pa.Array | pa.ChunkedArray, batch_bytes: int = 4 << 20) -> list[bytes]:
    """core/text.content_hash of every document (strings, no nulls): NFC, space runs collapsed,
    ends stripped, xxh3-128. Done about `batch_bytes` of text at a time, so the copies it makes
    (NFC, the normalised bytes) are a batch's, never the unit's."""
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    hashes: list[bytes] = []
    for chunk in chunks:
        for start, stop in batch_bounds(chunk, batch_bytes):
            data, offsets = _string_buffers(nfc(chunk.slice(start, stop - start)))
            out = np.empty(max(int(offsets[-1] - offsets[0]), 1), np.uint8)
            bounds = np.empty(len(offsets), np.int64)
            _collapse_spaces(data, offsets, _SPACES, out, bounds)
            view, starts, ends = memoryview(out), bounds[:-1].tolist(), bounds[1:].tolist()
            hashes += [xxhash.xxh3_128_digest(view[a:b]) for a, b in zip(starts, ends, strict=True)]
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

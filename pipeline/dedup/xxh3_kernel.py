"""XXH3-64 written for numba (pure: no I/O), bit for bit the xxhash package's
xxh3_64_intdigest, for dedup's compiled loops (text_kernel.py) to call once per word with no
Python call.

It follows the reference implementation (xxHash 0.8, XXH3_64bits_withSeed) branch by branch:
0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes with the default secret and the seed, longer inputs
with the secret derived from the seed (XXH3_initCustomSecret) and the scalar stripe loop.
`lowered_upto16` is the 1-16 byte branches of an ASCII word hashed as if lowered: the case is
folded in the 8-byte loads (SWAR), so a short word is neither copied nor lowered byte by byte.
tests/unit/test_text_kernel.py checks both against xxhash for every length class and several
seeds. All arithmetic is uint64 and wraps: an int64 operand would make numba compute in
float64, so every constant and shift count below is a np.uint64.

The loops that call these (text_kernel.py) key their cache folder on this file too
(kernel_cache.key_also): numba's disk cache notices edits to a compiled function's own file only.
Without numba the functions stay plain Python (text_kernel.available() is then False).
"""

from __future__ import annotations

import numpy as np

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


@_jit_inline  # called with the input array: a call would count its references
def _mix16(d, i, s, seed):
    """XXH3_mix16B of d[i : i + 16] with the default secret at byte s."""
    lo = _r64(d, i) ^ (_SECRET_AT[s] + seed)
    hi = _r64(d, i + 8) ^ (_SECRET_AT[s + 8] - seed)
    return _fold64(lo, hi)


@_jit_inline  # most words: a call (the array's reference counts) cost more than the hash
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


_HIGH_BITS = U(0x8080808080808080)
_FROM_A = U(0x3F3F3F3F3F3F3F3F)  # + this sets a byte's high bit from "A" (0x41) up
_PAST_Z = U(0x2525252525252525)  # + this sets a byte's high bit from "[" (0x5B) up
_S2 = U(2)


@_jit
def _lower8(x):
    """The bytes of x (each an ASCII byte, below 0x80) with A-Z made a-z: no byte carries into
    the next, since every sum stays below 0x100."""
    upper = (x + _FROM_A) & ~(x + _PAST_Z) & _HIGH_BITS
    return x | (upper >> _S2)


@_jit
def _lower1(c):
    return c + U(32) if U(65) <= c <= U(90) else c


@_jit_inline
def lowered_upto16(d, i, n, seed):
    """xxh3_64 (`seed`) of ASCII d[i : i + n] lowered, 1 <= n <= 16 (_upto16's branches)."""
    length = U(n)
    if n > 8:
        lo = _lower8(_r64(d, i)) ^ (_FLIP_9TO16[0] + seed)
        hi = _lower8(_r64(d, i + n - 8)) ^ (_FLIP_9TO16[1] - seed)
        return _avalanche(length + _swap64(lo) + hi + _fold64(lo, hi))
    if n >= 4:
        seed ^= _swap32(seed & _LOW32) << _S32
        first, last = _lower8(_r32(d, i)), _lower8(_r32(d, i + n - 4))
        return _rrmxmx((last + (first << _S32)) ^ (_FLIP_4TO8 - seed), length)
    combined = (
        (_lower1(U(d[i])) << _S16)
        | (_lower1(U(d[i + (n >> 1)])) << _S24)
        | _lower1(U(d[i + n - 1]))
        | (length << _S8)
    )
    return _xxh64_avalanche(combined ^ (_FLIP_1TO3 + seed))

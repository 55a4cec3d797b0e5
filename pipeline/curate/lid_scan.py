"""A text's tokens for the compiled predict (curate/lid_kernel.py's loop calls `_scan`; pure:
no I/O): fastText's split at space, \\n, \\r, \\t, \\v, \\f and NUL, found 64 bytes at a time.

A block's separators are one 64-lane byte comparison (an AVX-512 or AVX2 compare where the
machine has one; LLVM picks), a bit per byte; the tokens then come from the bits (the first
clear bit, the next set one) without a branch per byte, and a token's key (its first 16 bytes
packed, a hash of the rest) from 8-byte loads. Near the end of the buffer, where 64 bytes
cannot be read, the bits are formed byte by byte: the same bits.
"""

from __future__ import annotations

import numpy as np

from pipeline.curate.lid_ops import (
    _MIX1,
    _element_pointer,
    _inline,
    _jit,
    _leaf,
    _load8,
    _low_zeros,
    _prefetch,
)
from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops
kernel_cache.key_also(__file__, "lid_ops.py")  # the loops below call lid_ops's

try:
    import numba
    import numba.extending
    from llvmlite import ir

    _intrinsic = numba.extending.intrinsic
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None
    _intrinsic = _jit

BLOCK = 64  # bytes whose separators are found at once (a bit each in a uint64)
SLOT = 16  # int32 per cache slot (lid_kernel's layout): a slot's line is asked for here
MORE, EOL, LONG = 0, 1, 2  # a scan stopped: chunk full or text done, the line's \n, a long token
_MIX0 = np.uint64(0x9E3779B97F4A7C15)  # a slot from a token's key, with lid_ops's _MIX1
_U0, _U1, _U8 = np.uint64(0), np.uint64(1), np.uint64(8)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def _bytes_in(builder, v, low, count):
    """The lanes of byte vector v in [low, low + count) (unsigned), as an <N x i1>."""
    lanes = v.type
    splat = lambda c: ir.Constant(lanes, [ir.Constant(ir.IntType(8), c)] * lanes.count)  # noqa: E731
    return builder.icmp_unsigned("<", builder.sub(v, splat(low)), splat(count))


@_intrinsic
def _separator_bits(typingctx, data, i):
    """Bit k set where data[i + k] (k < 64; i + 64 within data) separates tokens: a space,
    \\t, \\n, \\v, \\f, \\r or NUL."""
    sig = numba.types.uint64(data, i)

    def codegen(context, builder, sig, args):
        lanes = ir.VectorType(ir.IntType(8), BLOCK)
        at = builder.bitcast(_element_pointer(context, builder, sig, args), lanes.as_pointer())
        v = builder.load(at, align=1)
        found = builder.or_(_bytes_in(builder, v, 32, 1), _bytes_in(builder, v, 0, 1))
        found = builder.or_(found, _bytes_in(builder, v, 9, 5))  # \t \n \v \f \r
        return builder.zext(builder.bitcast(found, ir.IntType(BLOCK)), ir.IntType(64))

    return sig, codegen


@_intrinsic
def _newline_bits(typingctx, data, i):
    """Bit k set where data[i + k] is \\n (k < 64; i + 64 within data)."""
    sig = numba.types.uint64(data, i)

    def codegen(context, builder, sig, args):
        lanes = ir.VectorType(ir.IntType(8), BLOCK)
        at = builder.bitcast(_element_pointer(context, builder, sig, args), lanes.as_pointer())
        found = _bytes_in(builder, builder.load(at, align=1), 10, 1)
        return builder.zext(builder.bitcast(found, ir.IntType(BLOCK)), ir.IntType(64))

    return sig, codegen


@_jit
def _is_separator(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@_inline
def _block(data, at, end, text):
    """The bits of data[at:at + 64]: (separators, the \\n among them where not `text`, else 0);
    a byte at or past `end` counts as a separator (and not as a \\n)."""
    if at >= end:
        return _ALL, _U0
    if at + BLOCK <= data.shape[0]:
        spaces = _separator_bits(data, at)
        lines = _U0 if text else _newline_bits(data, at)
        if at + BLOCK > end:
            past = _ALL << np.uint64(end - at)  # end - at < 64
            spaces |= past
            lines &= ~past
        return spaces, lines
    spaces, lines = _U0, _U0
    for k in range(BLOCK):
        bit = _U1 << np.uint64(k)
        if at + k >= end:
            spaces |= bit
        elif _is_separator(data[at + k]):
            spaces |= bit
            if data[at + k] == 10 and not text:
                lines |= bit
    return spaces, lines


@_inline
def _piece(data, at, n):
    """data[at:at + n] (n <= 8; none where n <= 0), little-endian, zero-padded, as a uint64."""
    n = min(max(n, 0), 8)
    if at + 8 <= data.shape[0]:  # the mask without a branch: 4n + 4n bits (64 wraps to 0)
        half = np.uint64(4 * n)
        return _load8(data, at) & (((_U1 << half) << half) - _U1)
    packed = _U0
    for k in range(n):
        packed |= np.uint64(data[at + k]) << np.uint64(8 * k)
    return packed


@_inline
def _key(data, first, length):
    """A token's key: its first 16 bytes (two uint64, zero-padded) and a hash of its other 8-byte
    pieces (each zero-padded; a token of 8k bytes ends with an empty piece)."""
    w0, w1, tail = _piece(data, first, length), _piece(data, first + 8, length - 8), _U0
    for k in range(16, length + 1, 8):
        tail = (tail ^ _piece(data, first + k, min(8, length - k))) * _MIX1
    return w0, w1, tail


@_leaf
def _scan(data, i, end, text, shift, longest, cells, found):
    """The tokens from data[i] until `end`, the line's \\n (not `text`), a token over `longest`
    bytes or len(found) tokens: each one's start, length, first 16 bytes (two uint64) and home
    slot (the top bits of a product; `shift` = 64 - the slot bits) in `found`, its slot's line
    in `cells` asked for (prefetched) so that the look-ups that follow find it near. Returns
    (offset, tokens, why it stopped, the end of the LONG token at offset)."""
    t = 0
    base = i
    spaces, lines = _block(data, base, end, text)
    while t < found.shape[0]:
        if i >= end:
            return end, t, MORE, 0
        if i - base >= BLOCK:
            base = i
            spaces, lines = _block(data, base, end, text)
        rel = np.uint64(i - base)
        free = ~spaces >> rel
        if free == _U0:  # separators to the block's end
            if lines >> rel:
                return i + np.int64(_low_zeros(lines >> rel)) + 1, t, EOL, 0
            i = base + BLOCK
            if i >= end:
                return end, t, MORE, 0
            continue
        skip = _low_zeros(free)
        if skip and (lines >> rel) & ((_U1 << skip) - _U1):
            return i + np.int64(_low_zeros(lines >> rel)) + 1, t, EOL, 0
        first = i + np.int64(skip)
        rest = spaces >> np.uint64(first - base)
        if rest == _U0:  # the token runs past the block: the blocks from its start
            base = first
            spaces, lines = _block(data, base, end, text)
            while spaces == _U0:
                base += BLOCK
                spaces, lines = _block(data, base, end, text)
            i = base + np.int64(_low_zeros(spaces))
        else:
            i = first + np.int64(_low_zeros(rest))
        length = i - first
        if length > longest:
            return first, t, LONG, i
        w0, w1, tail = _key(data, first, length)
        s = np.int64((((w0 + np.uint64(length)) * _MIX0) ^ ((w1 ^ tail) * _MIX1)) >> shift)
        _prefetch(cells, s * SLOT)
        found[t, 0], found[t, 1], found[t, 2], found[t, 3] = first, length, w0, w1
        found[t, 4] = s
        t += 1
    return i, t, MORE, 0

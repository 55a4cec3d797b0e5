"""The compiled pieces of fastText's predict for the language model (curate/lid_kernel.py's loop
calls them; pure: no I/O): a token found 8 bytes at a time, a token's row ids in fastText's
order, a row added as one vector, the output layer. Each gives fastText's values.

A token is split at space, \\n, \\r, \\t, \\v, \\f and NUL. Its rows: a word of the dictionary
adds its row, then its character n-grams of "<word>" (FNV-1a of the bytes, sign-extended, modulo
the buckets, kept buckets only: curate/lid_model.py's bitmap and rank); an unknown word its
n-grams; a label token nothing; "</s>" its row, and ends the line. Hidden = the rows summed in
that order in float32, times 1/count: a row is added as one DIM-lane vector, each lane's float32
additions those of the scalar loop (numba leaves that loop scalar). The output layer is a
depth-first walk of the Huffman tree of the labels (left first, pruned by the best leaf so far),
scores summed as log(p + 1e-5). numba is optional: without it lid_kernel.load gives None.
"""

from __future__ import annotations

import math

import numpy as np

from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops

try:
    import numba
    import numba.extending
    from llvmlite import ir

    _jit = numba.njit(cache=True, nogil=True)
    _inline = numba.njit(cache=True, nogil=True, inline="always")
    _intrinsic = numba.extending.intrinsic
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function

    _inline = _intrinsic = _jit

DIM = 16  # the model's dimension the additions are vectors of (lid.176's)
SKIP, WORD, END = 0, 1, 2  # a token adds nothing (a label), its rows, or its rows and ends
SHAPE_BITS = 16  # the dictionary's shape filter: 2**16 bits, about one in ten set

_LOW32 = np.uint64(0xFFFFFFFF)
_FNV_OFFSET = np.uint64(2166136261)
_FNV_PRIME = np.uint64(16777619)
_MIX1 = np.uint64(0xC2B2AE3D27D4EB4F)  # folds a long token's bytes past the first 16
_BELOW_21 = np.uint64(0x2121212121212121)  # bytes under 0x21: the spaces and control bytes
_HIGH_BITS = np.uint64(0x8080808080808080)
_U0, _U1, _U3, _U6, _U8 = np.uint64(0), np.uint64(1), np.uint64(3), np.uint64(6), np.uint64(8)
_U63, _U64 = np.uint64(63), np.uint64(64)
_LABEL = np.frombuffer(b"__label__", np.uint8).copy()  # fastText's label prefix


@_intrinsic
def _add(typingctx, x, rows, t):
    """x += rows[t] as one addition of DIM-lane vectors: lane by lane the float32 additions of
    the scalar loop (vectorised by hand: numba leaves that loop scalar)."""
    sig = numba.types.void(x, rows, t)

    def codegen(context, builder, sig, args):
        lanes = ir.VectorType(ir.FloatType(), DIM)
        start = builder.mul(context.cast(builder, args[2], sig.args[2], numba.types.int64),
                            ir.Constant(ir.IntType(64), DIM))  # fmt: skip
        row = context.make_array(sig.args[1])(context, builder, args[1]).data
        row = builder.bitcast(builder.gep(row, [start]), lanes.as_pointer())
        acc = builder.bitcast(context.make_array(sig.args[0])(context, builder, args[0]).data,
                              lanes.as_pointer())  # fmt: skip
        total = builder.fadd(builder.load(acc, align=4), builder.load(row, align=4))
        builder.store(total, acc, align=4)
        return context.get_dummy_value()

    return sig, codegen


def _element_pointer(context, builder, sig, args):
    """In an intrinsic's codegen whose first two arguments are (array, i): the address of the
    array's element i (flat, C order)."""
    at = context.cast(builder, args[1], sig.args[1], numba.types.int64)
    return builder.gep(context.make_array(sig.args[0])(context, builder, args[0]).data, [at])


@_intrinsic
def _load8(typingctx, data, i):
    """data[i:i + 8] (uint8, i + 8 within it) as a little-endian uint64: one unaligned load."""
    sig = numba.types.uint64(data, i)

    def codegen(context, builder, sig, args):
        byte = _element_pointer(context, builder, sig, args)
        return builder.load(builder.bitcast(byte, ir.IntType(64).as_pointer()), align=1)

    return sig, codegen


@_intrinsic
def _prefetch(typingctx, array, i):
    """Ask for the cache line of array's element i (flat, C order) now: a hint, no value."""
    sig = numba.types.void(array, i)

    def codegen(context, builder, sig, args):
        byte = ir.IntType(8).as_pointer()
        hint = ir.FunctionType(ir.VoidType(), [byte, *[ir.IntType(32)] * 3])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [byte], hint)
        flags = [ir.Constant(ir.IntType(32), v) for v in (0, 3, 1)]  # read, keep, data
        element = _element_pointer(context, builder, sig, args)
        builder.call(fn, [builder.bitcast(element, byte), *flags])
        return context.get_dummy_value()

    return sig, codegen


@_intrinsic
def _high_product(typingctx, a, b):
    """The high 64 bits of the 128-bit product of two uint64."""
    sig = numba.types.uint64(a, b)

    def codegen(context, builder, sig, args):
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        return builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))

    return sig, codegen


@_intrinsic
def _low_zeros(typingctx, v):
    """The trailing zero bits of a uint64 (64 for 0)."""
    sig = numba.types.uint64(v)

    def codegen(context, builder, sig, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


@_intrinsic
def _ones(typingctx, v):
    """The set bits of a uint64."""
    sig = numba.types.uint64(v)

    def codegen(context, builder, sig, args):
        return builder.ctpop(args[0])

    return sig, codegen


@_jit
def _add_all(x, rows, ids, a, b):
    """x += rows[ids[a]], ..., rows[ids[b - 1]], in that order (x stays in a register here)."""
    for r in range(a, b):
        _add(x, rows, ids[r])


@_jit
def _is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@_jit
def _same(a, a0, b, b0, n):
    for k in range(n):  # noqa: SIM110 - numba compiles the loop, not a generator
        if a[a0 + k] != b[b0 + k]:
            return False
    return True


@_jit
def _bytes(data, i, end):
    """Up to 8 bytes of a token from data[i], packed: (them, the next offset, whether all 8
    were token bytes)."""
    packed, shift = _U0, _U0
    while shift < _U64:
        if i == end or _is_space(data[i]):
            return packed, i, False
        packed |= np.uint64(data[i]) << shift
        shift += _U8
        i += 1
    return packed, i, True


@_inline
def _token(data, i, end):
    """The token from data[i] (not a space) to the next space or `end`: (its end, its first 16
    bytes packed little-endian and zero-padded (two uint64), a hash of its other bytes)."""
    w0, w1, tail, k, more = _U0, _U0, _U0, 0, True
    while more:
        if i + 8 <= end:
            v = _load8(data, i)
            low = (v - _BELOW_21) & ~v & _HIGH_BITS  # exact at its lowest set bit
            if low == _U0:
                packed = v
                i += 8
            else:
                j = _low_zeros(low) >> _U3
                if _is_space(data[i + np.int64(j)]):
                    packed, more = v & ((_U1 << (j << _U3)) - _U1), False
                    i += np.int64(j)
                else:  # a control byte inside the token
                    packed, i, more = _bytes(data, i, end)
        else:
            packed, i, more = _bytes(data, i, end)
        if k == 0:
            w0 = packed
        elif k == 1:
            w1 = packed
        else:
            tail = (tail ^ packed) * _MIX1
        k += 1
    return i, w0, w1, tail


@_jit
def _shape_bit(length, first, last):
    """A token's bit in the dictionary's shape filter (curate/lid_kernel.py builds it from the
    dictionary's words): from its length and its first and last bytes."""
    key = (np.uint64(length) << np.uint64(16)) | (np.uint64(first) << _U8) | np.uint64(last)
    return (key * _MIX1) >> np.uint64(64 - SHAPE_BITS)


@_inline
def _word_id(data, start, end, w):
    """The dictionary id of data[start:end], or -1: looked up only when its shape bit is set
    (most tokens seen for the first time are not words, and fastText's hash of a word is one
    multiplication after another)."""
    length = end - start
    s = _shape_bit(length, data[start], data[end - 1])
    if not (w.shapes[s >> _U6] >> (s & _U63)) & _U1:
        return -1
    h = _FNV_OFFSET
    for k in range(start, end):
        h = (h ^ (np.uint64(np.int64(np.int8(data[k]))) & _LOW32)) * _FNV_PRIME
    h &= _LOW32
    table, wbytes, woff = w.table, w.wbytes, w.woff
    mask = table.shape[0] - 1
    s = np.int64(h) & mask
    while table[s] >= 0:
        t = table[s]
        if woff[t + 1] - woff[t] == length and _same(wbytes, woff[t], data, start, length):
            return t
        s = (s + 1) & mask
    return -1


@_inline
def _kept_row(gh, w, out, n):
    """The n-gram of FNV hash gh: its row written to out[n] if its bucket is kept (about one
    in fifty), and the rows written then. b = gh mod bucket without a division (Lemire, Kaser
    and Kurz 2019)."""
    b = _high_product(w.magic * (gh & _LOW32), w.bucket)
    bits, bit = w.kept[b >> _U6], b & _U63
    if (bits >> bit) & _U1:
        rank = np.int64(w.before[b >> _U6]) + np.int64(_ones(bits & ((_U1 << bit) - _U1)))
        out[n] = w.ranked[rank]
        return n + 1
    return n


@_jit
def _token_rows(data, start, end, w, word, out):
    """What the token data[start:end] does, and its row ids in fastText's order written to
    out (room for maxn * (length + 2) + 2): (kind, rows written)."""
    minn, maxn = w.minn, w.maxn
    length = end - start
    wid = _word_id(data, start, end, w)
    if wid >= 0 and w.types[wid] != 0:
        return SKIP, 0  # a label of the dictionary
    if wid < 0 and length >= 9 and _same(data, start, _LABEL, 0, 9):
        return SKIP, 0
    n = 0
    if wid >= 0:
        out[0] = wid
        n = 1
        if wid == w.eos:  # "</s>" in the text: a word without n-grams that ends the line
            return END, n
    size = length + 2
    word[0] = 60  # "<"
    high = 0
    for k in range(length):
        word[k + 1] = data[start + k]
        high |= data[start + k]
    word[size - 1] = 62  # ">"
    if high < 0x80:  # ASCII: a character is a byte, and sign-extends to itself
        for a in range(size):
            gh = _FNV_OFFSET
            for g in range(1, min(maxn, size - a) + 1):
                gh = (gh ^ np.uint64(word[a + g - 1])) * _FNV_PRIME
                if g >= minn and not (g == 1 and (a == 0 or a + 1 == size)):
                    n = _kept_row(gh, w, out, n)
        return WORD, n
    for a in range(size):
        if (word[a] & 0xC0) == 0x80:
            continue
        j, g, gh = a, 1, _FNV_OFFSET
        while j < size and g <= maxn:
            gh = (gh ^ (np.uint64(np.int64(np.int8(word[j]))) & _LOW32)) * _FNV_PRIME
            j += 1
            while j < size and (word[j] & 0xC0) == 0x80:
                gh = (gh ^ (np.uint64(np.int64(np.int8(word[j]))) & _LOW32)) * _FNV_PRIME
                j += 1
            if g >= minn and not (g == 1 and (a == 0 or j == size)):
                n = _kept_row(gh, w, out, n)
            g += 1
    return WORD, n


@_jit
def _top(x, count, out, left, right, nodes, scores):
    """fastText's HierarchicalSoftmaxLoss::predict (k = 1, threshold 0): (leaf, score)."""
    labels = left.shape[0] // 2 + 1
    scale = np.float32(1.0 / count)
    for j in range(DIM):
        x[j] *= scale
    floor = np.float32(math.log(np.float64(np.float32(0.0)) + 1e-5))
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
        for j in range(DIM):
            d += out[node - labels, j] * x[j]
        f = np.float32(1.0 / (np.float32(1.0) + np.float32(math.exp(-d))))
        nodes[depth] = right[node]
        scores[depth] = np.float32(score + np.float32(math.log(np.float64(f) + 1e-5)))
        nodes[depth + 1] = left[node]
        not_f = np.float32(1.0 - np.float64(f))
        scores[depth + 1] = np.float32(score + np.float32(math.log(np.float64(not_f) + 1e-5)))
        depth += 2
    return best_node, np.float32(math.exp(best))


@_jit
def _char_end(data, start, end, chars):
    """The byte offset after the first `chars` characters of UTF-8 data[start:end]."""
    seen = 0
    for i in range(start, end):
        if (data[i] & 0xC0) != 0x80:
            if seen == chars:
                return i
            seen += 1
    return end

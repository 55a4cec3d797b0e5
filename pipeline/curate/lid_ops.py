"""The compiled pieces of fastText's supervised predict (curate/lid_kernel.py's loop calls them;
pure: no I/O): a token's row ids in fastText's order, its word n-grams, a row added as vectors,
the output layer. Each gives fastText's values.

A token (split at space, \\n, \\r, \\t, \\v, \\f and NUL: curate/lid_scan.py) has rows: a word
of the dictionary adds its row, then its character n-grams of "<word>" (FNV-1a of the bytes,
sign-extended, modulo the buckets, kept buckets only: curate/lid_model.py's bitmap and rank); an
unknown word its n-grams; a label token nothing; "</s>" its row, and ends the line. After the
line's tokens, its word n-grams (Dictionary::addWordNgrams): over the word hashes of its word
tokens (labels left out, sign-extended from int32), h = h * 116049371 + next, row of bucket h %
bucket (a pruned model: kept buckets only). Hidden = the rows summed in that order in float32,
times 1/count: a row is added as LANES-lane vectors, each lane's float32 additions those of the
scalar loop (numba leaves that loop scalar). The output layer: hierarchical softmax, a depth-
first walk of the Huffman tree of the labels (left first, pruned by the best leaf so far),
scores summed as log(p + 1e-5); softmax (exp(o - max) / sum) or one-vs-all and negative sampling
(fastText's sigmoid table of 512 steps over [-8, 8]) over the output rows' dot products (a
quantized row's times its norm), the score exp(log(p + 1e-5)). numba is optional: without it
lid_kernel.load gives None.
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
    # A loop that allocates nothing, compiled without reference counts: numba counts a
    # reference to each array it takes from a tuple (an atomic add, and another to let it go),
    # and where it cannot prove them redundant, inside a loop, they cost more than the work
    # (a new token's look-up: ~130 ns of ~200). Values never change; `_nrt` is numba's own
    # option (its tests use it), and a numba without it compiles the loop as _jit does.
    try:
        _leaf = numba.njit(cache=True, nogil=True, _nrt=False)
    except (KeyError, TypeError):  # pragma: no cover - a numba without the option
        _leaf = _jit
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function

    _inline = _intrinsic = _leaf = _jit

LANES = 16  # a row is added LANES floats at a time (lid.176's dimension: one addition)
SKIP, WORD, END = 0, 1, 2  # a token adds nothing (a label), its rows, or its rows and ends
HS, NS, SOFTMAX, OVA = 1, 2, 3, 4  # fastText's losses (curate/lid_model.py)
MAX_SIGMOID, SIGMOID_TABLE = 8, 512  # fastText's Loss sigmoid table
_NGRAM_MIX = np.uint64(116049371)  # Dictionary::addWordNgrams
AHEAD = 16  # a row is asked for this many rows before it is added
FAR = 48  # and a word n-gram's (rarely in the cache) into L2 this many rows before
SHAPE_BITS = 16  # the dictionary's shape filter: 2**16 bits, about one in ten set

_LOW32 = np.uint64(0xFFFFFFFF)
_FNV_OFFSET = np.uint64(2166136261)
_FNV_PRIME = np.uint64(16777619)
_MIX1 = np.uint64(0xC2B2AE3D27D4EB4F)  # folds a long token's bytes past the first 16
_U0, _U1, _U6, _U8 = np.uint64(0), np.uint64(1), np.uint64(6), np.uint64(8)
_U63, _U64 = np.uint64(63), np.uint64(64)
_LABEL = np.frombuffer(b"__label__", np.uint8).copy()  # fastText's label prefix


@_intrinsic
def _add_lanes(typingctx, x, j, rows, start):
    """x[j:j + LANES] += rows.flat[start:start + LANES] as one addition of LANES-lane vectors:
    lane by lane the float32 additions of the scalar loop (vectorised by hand: numba leaves
    that loop scalar)."""
    sig = numba.types.void(x, j, rows, start)

    def codegen(context, builder, sig, args):
        lanes = ir.VectorType(ir.FloatType(), LANES)
        at = context.cast(builder, args[3], sig.args[3], numba.types.int64)
        row = context.make_array(sig.args[2])(context, builder, args[2]).data
        row = builder.bitcast(builder.gep(row, [at]), lanes.as_pointer())
        acc = context.make_array(sig.args[0])(context, builder, args[0]).data
        j = context.cast(builder, args[1], sig.args[1], numba.types.int64)
        acc = builder.bitcast(builder.gep(acc, [j]), lanes.as_pointer())
        total = builder.fadd(builder.load(acc, align=4), builder.load(row, align=4))
        builder.store(total, acc, align=4)
        return context.get_dummy_value()

    return sig, codegen


@_inline
def _add(x, rows, t):
    """x += rows[t] (rows C-contiguous, x of its width), in float32, element by element."""
    dim = x.shape[0]
    start = np.int64(t) * dim
    if dim == LANES:  # lid.176: one vector addition
        _add_lanes(x, 0, rows, start)
        return
    j = 0
    while j + LANES <= dim:
        _add_lanes(x, j, rows, start + j)
        j += LANES
    while j < dim:
        x[j] += rows[t, j]
        j += 1


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
def _same(a, a0, b, b0, n):
    for k in range(n):  # noqa: SIM110 - numba compiles the loop, not a generator
        if a[a0 + k] != b[b0 + k]:
            return False
    return True


@_jit
def _shape_bit(length, first, last):
    """A token's bit in the dictionary's shape filter (curate/lid_kernel.py builds it from the
    dictionary's words): from its length and its first and last bytes."""
    key = (np.uint64(length) << np.uint64(16)) | (np.uint64(first) << _U8) | np.uint64(last)
    return (key * _MIX1) >> np.uint64(64 - SHAPE_BITS)


@_inline
def _word_hash(data, start, end):
    """fastText's word hash of data[start:end]: FNV-1a over the bytes, each sign-extended (32
    bits, in a uint64)."""
    h = _FNV_OFFSET
    for k in range(start, end):
        h = (h ^ (np.uint64(np.int64(np.int8(data[k]))) & _LOW32)) * _FNV_PRIME
    return h & _LOW32


@_inline
def _may_be_word(data, start, end, w):
    """Whether data[start:end] may be a word of the dictionary: its shape bit is set (most
    tokens seen for the first time are not words, and fastText's hash of a word is one
    multiplication after another)."""
    s = _shape_bit(end - start, data[start], data[end - 1])
    return (w.shapes[s >> _U6] >> (s & _U63)) & _U1 != _U0


@_inline
def _word_id(data, start, end, w, h):
    """The dictionary id of data[start:end], whose word hash is h, or -1. A slot of the table
    holds an entry's id and hash (curate/lid_model.py): a probe reads an entry's bytes only
    where the hashes are equal."""
    length = end - start
    table, wbytes, woff = w.table, w.wbytes, w.woff
    mask = table.shape[0] - 1
    s = np.int64(h) & mask
    while table[s] >= 0:
        t, th = table[s] >> 32, np.uint64(table[s]) & _LOW32
        if (th == h and woff[t + 1] - woff[t] == length
                and _same(wbytes, woff[t], data, start, length)):  # fmt: skip
            return t
        s = (s + 1) & mask
    return -1


@_inline
def _kept_row(gh, w, out, n):
    """The n-gram of FNV hash gh: its row written to out[n] if its bucket is kept (about one
    in fifty in lid.176), and the rows written then. b = gh mod bucket without a division
    (Lemire, Kaser and Kurz 2019)."""
    return _bucket_row(_high_product(w.magic * (gh & _LOW32), w.bucket), w, out, n)


@_inline
def _bucket_row(b, w, out, n):
    """Bucket b's row written to out[n] (an unpruned model: every bucket's; a pruned one: a
    kept bucket's), and the rows written then (fastText's Dictionary::pushHash)."""
    if not w.pruned:
        out[n] = w.nwords + np.int64(b)
        return n + 1
    bits, bit = w.kept[b >> _U6], b & _U63
    if (bits >> bit) & _U1:
        rank = np.int64(w.before[b >> _U6]) + np.int64(_ones(bits & ((_U1 << bit) - _U1)))
        out[n] = w.ranked[rank]
        return n + 1
    return n


@_leaf
def _token_rows(data, start, end, w, word, out):
    """What the token data[start:end] does, its row ids in fastText's order written to out
    (room for maxn * (length + 2) + 2) and its word hash (0 unless the model has word n-grams):
    (kind, rows written, hash)."""
    minn, maxn = w.minn, w.maxn
    length = end - start
    maybe = _may_be_word(data, start, end, w)
    hashed = _word_hash(data, start, end) if maybe or w.word_ngrams > 1 else _U0
    wid = _word_id(data, start, end, w, hashed) if maybe else -1
    if wid >= 0 and w.types[wid] != 0:
        return SKIP, 0, np.int32(0)  # a label of the dictionary
    if wid < 0 and length >= 9 and _same(data, start, _LABEL, 0, 9):
        return SKIP, 0, np.int32(0)
    h = np.int32(hashed) if w.word_ngrams > 1 else np.int32(0)  # as addWordNgrams reads it
    n = 0
    if wid >= 0:
        out[0] = wid
        n = 1
        if wid == w.eos:  # "</s>" in the text: a word without n-grams that ends the line
            return END, n, h
    if maxn <= 0:  # no character n-grams (fastText adds none)
        return WORD, n, h
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
        return WORD, n, h
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
    return WORD, n, h


@_inline
def _remainder(h, d, m):
    """h % d for uint64 h, with m = (2**64 - 1) // d: q = the high half of h * m is the
    quotient or up to two less (Barrett), so at most two subtractions correct the remainder;
    no division, and no branch (a select each: whether one is due is a coin toss)."""
    r = h - _high_product(h, m) * d
    r = r - d if r >= d else r
    return r - d if r >= d else r


@_leaf
def _word_ngram_rows(hashes, nh, w, found):
    """The rows of the line's word n-grams (2..word_ngrams words) over the word hashes
    hashes[:nh], in fastText's order, to found (room for nh * (word_ngrams - 1)); returns how
    many (curate/lid_sum.py adds them after the line's tokens)."""
    n = 0
    for i in range(nh):
        h = np.uint64(np.int64(hashes[i]))  # int32 to uint64: sign-extended, as in fastText
        for j in range(i + 1, min(nh, i + w.word_ngrams)):
            h = h * _NGRAM_MIX + np.uint64(np.int64(hashes[j]))
            n = _bucket_row(_remainder(h, w.bucket, w.barrett), w, found, n)
    return n


@_inline
def _std_log(p):
    """fastText's std_log: log(p + 1e-5), the argument a float32, the sum in double."""
    return np.float32(math.log(np.float64(np.float32(p)) + 1e-5))


@_inline
def _dot(out, i, x, norm):
    """fastText's dotRow: the float32 sum of out[i, j] * x[j] in order, times the row's norm."""
    d = np.float32(0.0)
    for j in range(x.shape[0]):
        d += out[i, j] * x[j]
    return np.float32(d * norm)


@_inline
def _exact_sigmoid(d):
    """HierarchicalSoftmaxLoss::dfs's f = 1. / (1 + std::exp(-f))."""
    return np.float32(1.0 / np.float64(np.float32(1.0) + np.float32(math.exp(-d))))


@_inline
def _table_sigmoid(d, table):
    """Loss::sigmoid: fastText's table of SIGMOID_TABLE + 1 values over [-8, 8]."""
    if d < np.float32(-MAX_SIGMOID):
        return np.float32(0.0)
    if d > np.float32(MAX_SIGMOID):
        return np.float32(1.0)
    at = np.float32(np.float32(d + np.float32(MAX_SIGMOID)) * np.float32(SIGMOID_TABLE))
    return table[np.int64(np.float32(np.float32(at / np.float32(MAX_SIGMOID)) / np.float32(2)))]


@_jit
def _top(x, count, net, want, nodes, scores):
    """fastText's predict: (the top label, its score, the score of label `want` in predict(k=-1,
    threshold=0): 0.0 where fastText leaves it out; want -1: not asked), after x *= 1/count."""
    _, out, norms, left, right, parent, table, loss = net
    labels = out.shape[0]
    scale = np.float32(1.0 / count)
    for j in range(x.shape[0]):
        x[j] *= scale
    if loss == HS:
        top, best = _hs_top(x, out, norms, left, right, nodes, scores)
        return top, best, _hs_score(x, out, norms, left, right, parent, want, nodes)
    for i in range(labels):
        scores[i] = _dot(out, i, x, norms[i])
    if loss == SOFTMAX:
        most = scores[0]
        for i in range(labels):
            most = max(scores[i], most)
        z = np.float32(0.0)
        for i in range(labels):
            scores[i] = np.float32(math.exp(np.float64(np.float32(scores[i] - most))))
            z = np.float32(z + scores[i])
        for i in range(labels):
            scores[i] = np.float32(scores[i] / z)
    else:
        for i in range(labels):
            scores[i] = _table_sigmoid(scores[i], table)
    top, best = -1, np.float32(0.0)
    for i in range(labels):  # findKBest (k = 1): a tie goes to the later label
        s = _std_log(scores[i])
        if top < 0 or s >= best:
            top, best = i, s
    named = np.float32(0.0)
    if want >= 0:
        named = np.float32(math.exp(_std_log(scores[want])))
    return top, np.float32(math.exp(best)), named


@_jit
def _hs_top(x, out, norms, left, right, nodes, scores):
    """HierarchicalSoftmaxLoss::predict (k = 1, threshold 0): (leaf, score)."""
    labels = left.shape[0] // 2 + 1
    floor = _std_log(0.0)
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
        f = _exact_sigmoid(_dot(out, node - labels, x, norms[node - labels]))
        nodes[depth] = right[node]
        scores[depth] = np.float32(score + _std_log(f))
        nodes[depth + 1] = left[node]
        scores[depth + 1] = np.float32(score + _std_log(np.float32(1.0 - np.float64(f))))
        depth += 2
    return best_node, np.float32(math.exp(best))


@_jit
def _hs_score(x, out, norms, left, right, parent, want, path):
    """The score fastText's predict(k=-1, threshold=0) gives leaf `want` of the tree: its
    path's log(p + 1e-5) summed from the root, 0.0 where a node on it falls under the floor
    (the walk prunes it there)."""
    if want < 0:
        return np.float32(0.0)
    labels = left.shape[0] // 2 + 1
    k, node = 0, want
    while node != 2 * labels - 2:
        path[k] = node
        k += 1
        node = parent[node]
    floor, score = _std_log(0.0), np.float32(0.0)
    for step in range(k - 1, -1, -1):
        if score < floor:
            return np.float32(0.0)
        f = _exact_sigmoid(_dot(out, node - labels, x, norms[node - labels]))
        child = path[step]
        if child == left[node]:
            score = np.float32(score + _std_log(np.float32(1.0 - np.float64(f))))
        else:
            score = np.float32(score + _std_log(f))
        node = child
    if score < floor:
        return np.float32(0.0)
    return np.float32(math.exp(score))


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

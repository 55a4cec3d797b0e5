"""fastText's supervised predict (top 1) for the language model (read by curate/lid_model.py),
compiled with numba: the same label and float32 score as fastText-predict's C++, value for value.

Predict, as fastText's C++ does it: tokens are split at space, \\n, \\r, \\t, \\v, \\f and NUL, the
line ending at \\n (EOS); a word of the dictionary adds its row, then its character n-grams of
"<word>" (FNV-1a of the bytes, sign-extended, modulo the buckets, kept buckets only); an unknown
word its n-grams; a label token nothing. Hidden = the rows summed in that order in float32, times
1/count; then a depth-first walk of the Huffman tree of the labels (left first, pruned by the
best leaf so far), scores summed as log(p + 1e-5).

Faster, same values: `_predict_all` takes many texts' UTF-8 bytes and offsets (an Arrow array's
buffers, read in place) in one call, and forms the language step's line in the loop (the first
`max_chars` characters, newlines as spaces, then EOS) instead of copying it. Tokens are found 8
bytes at a time. A token's row ids (its dictionary row, then its kept n-gram rows, in fastText's
order) are found once per distinct token and kept in a word cache; a repeated token adds those
same rows in the same order, so every float32 sum is fastText's. The cache is an
open-addressing table of 64-byte slots keyed by the token's first 16 bytes (a shorter token is
compared whole there) and its length, with up to 9 row ids in the slot; more rows, and a longer
token's bytes, go to an arena; a token over 64 bytes is not kept, and the cache is emptied when
full. A row is added as one 16-lane vector (lid.176's dimension; each lane's float32 additions,
and the rows' order, are the scalar loop's). The cache changes speed only, never a value.
`load` checks predictions against fastText's on probe texts and returns None where one differs
or numba is missing (the caller then uses fastText). Kernels compile on first use, cached on disk.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from pipeline.curate import lid_model
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
LONGEST_CACHED = 256  # bytes; a longer token's rows are found each time it occurs
CHUNK = 1024  # tokens looked up, then their new rows found, then their rows added
INLINE_BYTES = 16  # a longer token's bytes are kept in the arena and compared there
# a slot, as int32: 0-3 the token's first 16 bytes (uint64 x 2, zero-padded), 4 its length
# (0: empty), 5 its row count | kind << 16 (PENDING: not found yet), 6 where its rows are in
# the arena, or -1: in the slot (8-15, at most INLINE_ROWS), 7 where its bytes are in the
# arena (int32 units) when it is longer than INLINE_BYTES
SLOT, LENGTH, HEAD, RECORD, BYTES, ROWS, INLINE_ROWS = 16, 4, 5, 6, 7, 8, 8
SKIP, WORD, END = 0, 1, 2  # a token adds nothing (a label), its rows, or its rows and ends
PENDING = -1
MORE, EOL, LONG = 0, 1, 2  # a look-up stopped: chunk full or text done, the line's \n, a long token

_LOW32 = np.uint64(0xFFFFFFFF)
_FNV_OFFSET = np.uint64(2166136261)
_FNV_PRIME = np.uint64(16777619)
_MIX0 = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xC2B2AE3D27D4EB4F)
_BELOW_21 = np.uint64(0x2121212121212121)  # bytes under 0x21: the spaces and control bytes
_HIGH_BITS = np.uint64(0x8080808080808080)
_U0, _U1, _U3, _U6, _U8 = np.uint64(0), np.uint64(1), np.uint64(3), np.uint64(6), np.uint64(8)
_U32, _U63, _U64 = np.uint64(32), np.uint64(63), np.uint64(64)
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


@_intrinsic
def _load8(typingctx, data, i):
    """data[i:i + 8] (uint8, i + 8 within it) as a little-endian uint64: one unaligned load."""
    sig = numba.types.uint64(data, i)

    def codegen(context, builder, sig, args):
        at = context.cast(builder, args[1], sig.args[1], numba.types.int64)
        byte = builder.gep(context.make_array(sig.args[0])(context, builder, args[0]).data, [at])
        return builder.load(builder.bitcast(byte, ir.IntType(64).as_pointer()), align=1)

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
def _token_rows(data, start, end, w, word, out):
    """What the token data[start:end] does, and its row ids in fastText's order written to
    out (room for maxn * (length + 2) + 2): (kind, rows written)."""
    table, wbytes, woff, types, kept, ranked, minn, maxn, bucket, magic, eos = w
    h = _FNV_OFFSET
    for k in range(start, end):
        h = (h ^ (np.uint64(np.int64(np.int8(data[k]))) & _LOW32)) * _FNV_PRIME
    h &= _LOW32
    length = end - start
    mask = table.shape[0] - 1
    s, wid = np.int64(h) & mask, -1
    while table[s] >= 0:
        t = table[s]
        if woff[t + 1] - woff[t] == length and _same(wbytes, woff[t], data, start, length):
            wid = t
            break
        s = (s + 1) & mask
    if wid >= 0 and types[wid] != 0:
        return SKIP, 0  # a label of the dictionary
    if wid < 0 and length >= 9 and _same(data, start, _LABEL, 0, 9):
        return SKIP, 0
    n = 0
    if wid >= 0:
        out[0] = wid
        n = 1
        if wid == eos:  # "</s>" in the text: a word without n-grams that ends the line
            return END, n
    size = length + 2
    word[0] = 60  # "<"
    for k in range(length):
        word[k + 1] = data[start + k]
    word[size - 1] = 62  # ">"
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
                # b = gh mod bucket without a division (Lemire, Kaser and Kurz 2019), then its
                # row if kept, written in any case and counted only then
                b = _high_product(magic * (gh & _LOW32), bucket)
                bits, bit = kept[b >> _U6, 0], b & _U63
                rank = np.int64(kept[b >> _U6, 1]) + np.int64(_ones(bits & ((_U1 << bit) - _U1)))
                out[n] = ranked[rank]
                n += np.int64((bits >> bit) & _U1)
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


@_jit
def _most_room(maxn, length):
    """The arena int32s a new token of `length` bytes may take: its rows and its bytes."""
    return maxn * (length + 2) + 2 + (length + 3) // 4


@_jit
def _look_up(data, i, end, text, cache, shift, maxn, slot_of, miss_at, miss_slot):
    """The slots of the tokens from data[i] until `end`, the line's \\n (not `text`), a token
    over LONGEST_CACHED bytes, len(slot_of) tokens or a full arena: a token not in the cache
    gets a PENDING slot (its bytes, for a long one, in the arena; room for its rows kept) and a
    place in miss_at/miss_slot, so that its next occurrences find it. Returns (offset, tokens,
    new tokens, why it stopped, the end of the LONG token at offset)."""
    keys, cells, arena, abytes, fill = cache
    mask = cells.shape[0] - 1
    t, m, kept_room = 0, 0, 0
    while i < end and t < slot_of.shape[0]:
        c = data[i]
        if _is_space(c):
            if c == 10 and not text:
                return i + 1, t, m, EOL, 0
            i += 1
            continue
        first = i
        i, w0, w1, tail = _token(data, i, end)
        length = i - first
        if length > LONGEST_CACHED:
            return first, t, m, LONG, i
        s = np.int64((((w0 + np.uint64(length)) * _MIX0) ^ ((w1 ^ tail) * _MIX1)) >> shift)
        while cells[s, LENGTH] != 0:
            if (cells[s, LENGTH] == length and keys[s, 0] == w0 and keys[s, 1] == w1
                    and (length <= INLINE_BYTES
                         or _same(abytes, 4 * cells[s, BYTES], data, first, length))):  # fmt: skip
                break
            s = (s + 1) & mask
        if cells[s, LENGTH] == 0:
            room = _most_room(maxn, length)
            if fill[1] + kept_room + room > arena.shape[0]:
                return first, t, m, MORE, 0  # the next chunk starts with an empty cache
            kept_room += room
            keys[s, 0], keys[s, 1] = w0, w1
            cells[s, LENGTH], cells[s, HEAD] = length, PENDING
            if length > INLINE_BYTES:
                a = fill[1]
                cells[s, BYTES] = a
                for k in range(length):
                    abytes[4 * a + k] = data[first + k]
                fill[1] = a + (length + 3) // 4
            fill[0] += 1
            miss_at[m], miss_slot[m] = first, s
            m += 1
        slot_of[t] = s
        t += 1
    return i, t, m, MORE, 0


@_jit
def _find_rows(data, miss_at, miss_slot, m, w, word, scratch, cache):
    """The rows of the first m PENDING tokens, into their slots or the arena."""
    _, cells, arena, _, fill = cache
    for k in range(m):
        s, first = miss_slot[k], miss_at[k]
        kind, n = _token_rows(data, first, first + cells[s, LENGTH], w, word, scratch)
        if n > INLINE_ROWS:
            a = fill[1]
            for r in range(n):
                arena[a + r] = scratch[r]
            cells[s, RECORD] = a
            fill[1] = a + n
        else:
            for r in range(n):
                cells[s, ROWS + r] = scratch[r]
            cells[s, RECORD] = -1
        cells[s, HEAD] = n | kind << 16


@_jit
def _sum_rows(x, rows, cells, arena, slot_of, t):
    """x += the rows of the tokens in slots slot_of[:t], in order, up to an END token: (rows
    added, whether one ended the line)."""
    count = 0
    for k in range(t):
        s = slot_of[k]
        n, at = cells[s, HEAD] & 0xFFFF, cells[s, RECORD]
        if at < 0:
            for r in range(ROWS, ROWS + n):
                _add(x, rows, cells[s, r])
        else:
            for r in range(at, at + n):
                _add(x, rows, arena[r])
        count += n
        if cells[s, HEAD] >> 16 == END:
            return count, True
    return count, False


@_jit
def _predict_all(data, offsets, max_chars, text, w, net, cache, node, score):
    """node[d], score[d] for each line data[offsets[d]:offsets[d + 1]] (node -1: no words).
    `text`: the language step's line (\\n a space, EOS at the end); else a line as given, that
    ends at its first \\n. A chunk of tokens is looked up, its new tokens' rows found, then
    its rows added: each loop small, and a token's look-up does not wait for the one before."""
    rows, out, left, right = net
    keys, cells, arena, abytes, fill = cache
    maxn, eos = w[7], w[10]
    bits = 1
    while (1 << bits) < cells.shape[0]:
        bits += 1
    shift = np.uint64(64 - bits)  # a slot from the top bits of a product
    chunk = min(CHUNK, cells.shape[0] // 4)  # the cache is at most half full after a chunk
    slot_of, miss_at = np.empty(chunk, np.int64), np.empty(chunk, np.int64)
    miss_slot = np.empty(chunk, np.int64)
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    word = np.empty(max(longest, LONGEST_CACHED) + 2, np.uint8)
    scratch = np.empty(maxn * (max(longest, LONGEST_CACHED) + 2) + 2, np.int32)
    x = np.empty(DIM, np.float32)
    nodes = np.empty(left.shape[0] + 1, np.int64)
    scores = np.empty(left.shape[0] + 1, np.float32)
    for d in range(offsets.shape[0] - 1):
        i, end = offsets[d], offsets[d + 1]
        if max_chars >= 0 and end - i > max_chars:
            end = _char_end(data, i, end, max_chars)
        x[:] = 0
        count, ended = 0, False
        while not ended and i < end:
            if (2 * (fill[0] + chunk) > cells.shape[0]
                    or fill[1] + _most_room(maxn, LONGEST_CACHED) > arena.shape[0]):  # fmt: skip
                cells[:, LENGTH] = 0  # full: emptied between chunks
                fill[:] = 0
            i, t, m, why, after = _look_up(data, i, end, text, cache, shift, maxn, slot_of,
                                           miss_at, miss_slot)  # fmt: skip
            _find_rows(data, miss_at, miss_slot, m, w, word, scratch, cache)
            n, ended = _sum_rows(x, rows, cells, arena, slot_of, t)
            count += n
            if not ended and why == EOL:  # the line's end: EOS, a word without n-grams
                _add(x, rows, eos)
                count += 1
                ended = True
            elif not ended and why == LONG:
                kind, n = _token_rows(data, i, after, w, word, scratch)
                _add_all(x, rows, scratch, 0, n)
                count += n
                i, ended = after, kind == END
        if text and not ended:
            _add(x, rows, eos)
            count += 1
        if count == 0:
            node[d], score[d] = -1, 0.0
        else:
            node[d], score[d] = _top(x, count, out, left, right, nodes, scores)


PROBES = (
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun saute par-dessus le chien paresseux. Ça va très bien, merci !",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。 日本語のテキストも少し。",
    "zzqx __label__en x\t\ty\r\x0bz\x0c\x00 naïve ＡＢＣ 🙂 عربى",
    "a </s> b",
    "an-uncommonly-long-token-that-the-arena-holds, naïvetés-über-straße",
    "",
)


class _Words(NamedTuple):
    """The dictionary and the kept buckets, as the kernels read them (curate/lid_model.py)."""

    table: np.ndarray
    wbytes: np.ndarray
    woff: np.ndarray
    types: np.ndarray
    kept: np.ndarray  # uint64 (words, 2): lid_model's kept bits and before, side by side
    ranked: np.ndarray  # lid_model's, and one more: a bucket that is not kept reads it
    minn: int
    maxn: int
    bucket: np.uint64
    magic: np.uint64  # (2**64 - 1) // bucket + 1: a remainder without a division
    eos: int


def _lines(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed C array that starts on a 64-byte line: a row, a slot, is one line, not two."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    raw = np.empty(size + 64, np.uint8)
    raw[:] = 0  # written now: its pages are mapped here, not one by one in the kernel
    start = -raw.ctypes.data % 64
    return raw[start : start + size].view(dtype).reshape(shape)


def _empty_cache(words: int, maxn: int) -> tuple:
    """The word cache for about `words` distinct tokens (then emptied): slots (a power of two,
    at most half full; uint64 and int32 views of one array), the arena (int32 and bytes views)
    and its fill (tokens held, arena int32s used)."""
    slots = _lines((1 << (2 * words - 1).bit_length(), SLOT), np.int32)
    arena = _lines((words * 8 + maxn * (LONGEST_CACHED + 2) + 3 + LONGEST_CACHED // 4,), np.int32)
    return slots.view(np.uint64), slots, arena, arena.view(np.uint8), np.zeros(2, np.int64)


class Predictor:
    """fastText's `predict(line, 1, 0.0)` for the model at `path`; `cache_words`: distinct
    tokens the word cache holds before it is emptied (2**18: 32 MiB of slots, 8 MiB of arena)."""

    def __init__(self, path: str, cache_words: int = 1 << 18) -> None:
        model = lid_model.read(path)
        if model.rows.shape[1] != DIM or sys.byteorder != "little":  # the vectors, _load8
            raise ValueError(f"a model of dimension {model.rows.shape[1]}, not {DIM}")
        self.labels = model.labels
        kept = np.stack([model.kept, model.before.astype(np.uint64)], axis=1)
        self._words = _Words(model.table, model.wbytes, model.woff, model.types, kept,
                             np.append(model.ranked, np.int32(-1)), model.minn, model.maxn,
                             np.uint64(model.bucket), np.uint64((2**64 - 1) // model.bucket + 1),
                             model.eos)  # fmt: skip
        rows = _lines(model.rows.shape, np.float32)
        rows[:] = model.rows
        self._net = (rows, model.out, model.left, model.right)
        self._cache = _empty_cache(cache_words, model.maxn)
        self._lock = threading.Lock()  # the cache is written in place: one call at a time

    def predict(self, line: str) -> tuple[str, float]:
        """(label, score) of one line, read up to its first \\n."""
        data = np.frombuffer(line.encode("utf-8"), np.uint8)
        node, score = self._run(data, np.array([0, len(data)], np.int64), -1, False)
        if node[0] < 0:
            raise ValueError("no words to predict from")
        return self.labels[node[0]], float(score[0])

    def predict_texts(self, data: np.ndarray, offsets: np.ndarray, max_chars: int
                      ) -> tuple[list[str], np.ndarray]:  # fmt: skip
        """(labels, float32 scores) of texts data[offsets[i]:offsets[i + 1]] (UTF-8), each read
        as the line `text[:max_chars].replace("\\n", " ") + "\\n"`."""
        node, score = self._run(data, offsets.astype(np.int64, copy=False), max_chars, True)
        return [self.labels[i] for i in node.tolist()], score

    def forget(self) -> None:
        """Empty the word cache (a benchmark's cold start); its memory is kept."""
        with self._lock:
            self._cache[1][:, LENGTH] = 0
            self._cache[4][:] = 0

    def held(self) -> int:
        """The distinct tokens the word cache holds now."""
        return int(self._cache[4][0])

    def _run(self, data, offsets, max_chars, text) -> tuple[np.ndarray, np.ndarray]:
        data = data.view()
        data.flags.writeable = False  # one compiled signature, whoever owns the bytes
        node = np.empty(len(offsets) - 1, np.int64)
        score = np.empty(len(offsets) - 1, np.float32)
        with self._lock:
            _predict_all(data, offsets, max_chars, text, self._words, self._net, self._cache,
                         node, score)  # fmt: skip
        return node, score


def load(path: str, reference: Any) -> Predictor | None:
    """The compiled predictor of the model at `path`, or None (numba missing, another kind of
    model, or a probe text on which it and `reference` (fastText's `f`) disagree)."""
    if numba is None:
        return None
    try:
        predictor = Predictor(path)
        for text in PROBES:
            line = text.replace("\n", " ") + "\n"
            ((score, label),) = reference.predict(line, 1, 0.0, "replace")
            if predictor.predict(line) != (label, float(score)):
                return None
    except Exception:  # noqa: BLE001 - whatever fails here, fastText itself answers
        return None
    return predictor

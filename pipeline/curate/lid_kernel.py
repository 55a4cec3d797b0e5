"""fastText's supervised predict, compiled with numba, for the language model (lid.176) and any
supervised classifier (curate/classifier.py): the top label and its float32 score, and the score
of one named label, as fastText's C++ gives them, value for value (its pieces: lid_ops.py; the
tokens: lid_scan.py; the model file: lid_model.py). `Predictor` holds the model's arrays and a
word cache; `load` checks it against fastText's own predict on probe texts and returns None
where one differs or numba is missing (the caller then uses fastText).

`_predict_all` reads many texts' UTF-8 bytes and offsets (an Arrow array's buffers) in one call
and forms the line in the loop (the first `max_chars` characters; TEXT: newlines as spaces,
then EOS; FIRST_LINE: up to the first newline, then EOS; LINE: as fastText reads a stream). A
token's row ids (its dictionary row, then its kept n-gram rows, in fastText's order) and its
word hash are found once per distinct token and kept in the word cache, so a repeated token
adds the same rows in the same order and every float32 sum is fastText's; a model with word
n-grams adds their rows after the line's tokens, from the hashes. A text is read in chunks of
tokens: the chunk's tokens are found (64 bytes' separators at once) and their slots' lines
prefetched, then each
token's slot is looked up (a new token gets a PENDING slot that its next occurrences find), then
the new tokens' rows are found, then the chunk's rows added: four small loops, and a token's
look-up neither waits for the one before it nor for memory.

The cache: an open-addressing table of 64-byte slots (a power of two, at most half full) keyed
by a token's first 16 bytes (a shorter token is compared whole there) and its length, with up
to 8 row ids in the slot; more rows, and a longer token's bytes, in an arena; tokens up to
LONGEST_CACHED bytes. 2**18 tokens by default: 32 MiB of slots, 8 MiB of arena per process,
emptied between chunks when full. It changes speed only, never a value.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from pipeline.curate import huge_pages, lid_model
from pipeline.curate.lid_ops import (
    AHEAD,
    END,
    FAR,
    MAX_SIGMOID,
    SHAPE_BITS,
    SIGMOID_TABLE,
    SKIP,
    _add,
    _add_all,
    _char_end,
    _leaf,
    _same,
    _shape_bit,
    _token_rows,
    _top,
    _word_ngram_rows,
)
from pipeline.curate.lid_scan import EOL, LONG, MORE, SLOT, _scan
from pipeline.curate.lid_sum import _add_rows
from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops
kernel_cache.key_also(__file__, "lid_ops.py", "lid_scan.py", "lid_sum.py")  # called below

try:
    import numba

    _jit = numba.njit(cache=True, nogil=True)
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function


LONGEST_CACHED = 256  # bytes; a longer token's rows are found each time it occurs
CHUNK = 1024  # tokens looked up, then their new rows found, then their rows added
INLINE_BYTES = 16  # a longer token's bytes are kept in the arena and compared there
# a slot, as int32: 0-3 the token's first 16 bytes (uint64 x 2, zero-padded), 4 its length
# (0: empty), 5 its row count | kind << 16 (PENDING: not found yet), 6 where its rows are in
# the arena, or -1: in the slot (8-15, at most INLINE_ROWS), 7 where its bytes are in the
# arena (int32 units) when it is longer than INLINE_BYTES, 15 its word hash (word n-grams)
LENGTH, HEAD, RECORD, BYTES, ROWS, INLINE_ROWS, HASH = 4, 5, 6, 7, 8, 7, 15  # SLOT: 16
LINE, TEXT, FIRST_LINE = 0, 1, 2  # how a text is read (_predict_all's mode)
PENDING = -1


@_jit
def _most_room(maxn, length):
    """The arena int32s a new token of `length` bytes may take: its rows and its bytes."""
    return maxn * (length + 2) + 2 + (length + 3) // 4


@_leaf
def _look_up(data, t, found, cache, maxn, slot_of, miss_at, miss_slot):
    """The slots of the first t tokens `_scan` found, until the arena has no room for a new
    one: a token not in the cache gets a PENDING slot (its bytes, for a long one, in the arena;
    room for its rows kept) and a place in miss_at/miss_slot, so that its next occurrences find
    it. Returns (tokens looked up, new tokens)."""
    keys, cells, arena, abytes, fill = cache
    mask = cells.shape[0] - 1
    m, kept_room = 0, 0
    for k in range(t):
        first, length = found[k, 0], found[k, 1]
        w0, w1, s = np.uint64(found[k, 2]), np.uint64(found[k, 3]), found[k, 4]
        while cells[s, LENGTH] != 0:
            differ = (keys[s, 0] ^ w0) | (keys[s, 1] ^ w1) | np.uint64(cells[s, LENGTH] ^ length)
            if differ == 0 and (length <= INLINE_BYTES
                                or _same(abytes, 4 * cells[s, BYTES], data, first, length)):
                break  # one branch for the key: a token's home slot usually holds it
            s = (s + 1) & mask
        if cells[s, LENGTH] == 0:
            room = _most_room(maxn, length)
            if fill[1] + kept_room + room > arena.shape[0]:
                return k, m  # the next chunk starts with an empty cache
            kept_room += room
            keys[s, 0], keys[s, 1] = w0, w1
            cells[s, LENGTH], cells[s, HEAD] = length, PENDING
            if length > INLINE_BYTES:
                a = fill[1]
                cells[s, BYTES] = a
                for b in range(length):
                    abytes[4 * a + b] = data[first + b]
                fill[1] = a + (length + 3) // 4
            fill[0] += 1
            miss_at[m], miss_slot[m] = first, s
            m += 1
        slot_of[k] = s
    return t, m


@_leaf
def _find_rows(data, miss_at, miss_slot, m, w, word, scratch, cache):
    """The rows of the first m PENDING tokens, into their slots or the arena."""
    _, cells, arena, _, fill = cache
    for k in range(m):
        s, first = miss_slot[k], miss_at[k]
        kind, n, h = _token_rows(data, first, first + cells[s, LENGTH], w, word, scratch)
        cells[s, HASH] = h
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


@_leaf
def _sum_rows(x, rows, cells, arena, slot_of, t, hashes, nh, ids):
    """x += the rows of the tokens in slots slot_of[:t], in order, up to an END token, their
    word hashes (labels left out) to hashes[nh:] where the model has word n-grams: (rows
    added, whether one ended the line, hashes held). A slot's rows are gathered in ids, then
    added together (lid_sum: the sum held in registers); an arena's rows from there."""
    count, gathered, ended = 0, 0, False
    for k in range(t):
        s = slot_of[k]
        head = cells[s, HEAD]
        if hashes.shape[0] and head >> 16 != SKIP:
            hashes[nh] = cells[s, HASH]
            nh += 1
        n, at = head & 0xFFFF, cells[s, RECORD]
        if at < 0:
            if gathered + n > ids.shape[0]:
                _add_rows(x, rows, ids, 0, gathered, AHEAD, 0)
                gathered = 0
            for r in range(n):
                ids[gathered + r] = cells[s, ROWS + r]
            gathered += n
        else:
            _add_rows(x, rows, ids, 0, gathered, AHEAD, 0)
            gathered = 0
            _add_rows(x, rows, arena, at, at + n, AHEAD, 0)
        count += n
        if head >> 16 == END:
            ended = True
            break
    _add_rows(x, rows, ids, 0, gathered, AHEAD, 0)
    return count, ended, nh


@_jit
def _predict_all(data, offsets, max_chars, mode, want, w, net, cache, node, score, named):
    """node[d], score[d] (the top label), named[d] (label want's score) for each text
    data[offsets[d]:offsets[d + 1]] (node -1: no rows, as fastText predicts nothing), read as
    `mode` says (LINE, TEXT, FIRST_LINE). A chunk of tokens is looked up, its new tokens' rows
    found, then its rows added: each loop small, and a token's look-up does not wait for the
    one before."""
    rows = net[0]
    keys, cells, arena, abytes, fill = cache
    maxn, eos = w.maxn, w.eos
    text = mode == TEXT
    bits = 1
    while (1 << bits) < cells.shape[0]:
        bits += 1
    shift = np.uint64(64 - bits)  # a slot from the top bits of a product
    chunk = min(CHUNK, cells.shape[0] // 4)  # the cache is at most half full after a chunk
    slot_of, miss_at = np.empty(chunk, np.int64), np.empty(chunk, np.int64)
    miss_slot, found = np.empty(chunk, np.int64), np.empty((chunk, 5), np.int64)
    ids = np.empty(chunk * INLINE_ROWS, np.int32)  # a chunk's rows, gathered from its slots
    longest = 0
    for d in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    word = np.empty(max(longest, LONGEST_CACHED) + 2, np.uint8)
    scratch = np.empty(maxn * (max(longest, LONGEST_CACHED) + 2) + 2, np.int32)
    hashes = np.empty(longest // 2 + 2 if w.word_ngrams > 1 else 0, np.int32)
    grams = np.empty(hashes.shape[0] * max(w.word_ngrams - 1, 0), np.int64)
    x = np.empty(rows.shape[1], np.float32)
    nodes = np.empty(2 * net[1].shape[0] + 1, np.int64)
    scores = np.empty(2 * net[1].shape[0] + 1, np.float32)
    for d in range(offsets.shape[0] - 1):
        i, end = offsets[d], offsets[d + 1]
        if max_chars >= 0 and end - i > max_chars:
            end = _char_end(data, i, end, max_chars)
        x[:] = 0
        count, ended, nh = 0, False, 0
        while not ended and i < end:
            if (2 * (fill[0] + chunk) > cells.shape[0]
                    or fill[1] + _most_room(maxn, LONGEST_CACHED) > arena.shape[0]):  # fmt: skip
                cells[:, LENGTH] = 0  # full: emptied between chunks
                fill[:] = 0
            i, t, why, after = _scan(data, i, end, text, shift, LONGEST_CACHED, cells, found)
            looked, m = _look_up(data, t, found, cache, maxn, slot_of, miss_at, miss_slot)
            if looked < t:  # the arena is full: the rest of the chunk after it is emptied
                i, t, why = found[looked, 0], looked, MORE
            _find_rows(data, miss_at, miss_slot, m, w, word, scratch, cache)
            n, ended, nh = _sum_rows(x, rows, cells, arena, slot_of, t, hashes, nh, ids)
            count += n
            if not ended and why == EOL:  # the line's end: EOS, a word without n-grams
                _add(x, rows, eos)
                count += 1
                nh = _hash_eos(hashes, nh, w)
                ended = True
            elif not ended and why == LONG:
                kind, n, h = _token_rows(data, i, after, w, word, scratch)
                _add_all(x, rows, scratch, 0, n)
                count += n
                if hashes.shape[0] and kind != SKIP:
                    hashes[nh] = h
                    nh += 1
                i, ended = after, kind == END
        if mode != LINE and not ended:
            _add(x, rows, eos)
            count += 1
            nh = _hash_eos(hashes, nh, w)
        if nh > 1:
            n = _word_ngram_rows(hashes, nh, w, grams)
            _add_rows(x, rows, grams, 0, n, AHEAD, FAR)
            count += n
        if count == 0:
            node[d], score[d], named[d] = -1, 0.0, 0.0
        else:
            node[d], score[d], named[d] = _top(x, count, net, want, nodes, scores)


@_jit
def _hash_eos(hashes, nh, w):
    """The line's EOS word hash added where the model has word n-grams."""
    if hashes.shape[0]:
        hashes[nh] = w.eos_hash
        nh += 1
    return nh


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
    kept: np.ndarray  # uint64: lid_model's kept bits
    before: np.ndarray  # int32: lid_model's
    ranked: np.ndarray  # int32: lid_model's
    shapes: np.ndarray  # uint64 bits: lid_ops._shape_bit of each dictionary entry set
    minn: int
    maxn: int
    bucket: np.uint64
    magic: np.uint64  # (2**64 - 1) // bucket + 1: a remainder without a division
    eos: int
    nwords: int
    word_ngrams: int
    pruned: bool  # lid_model's: only the kept buckets have rows
    eos_hash: np.int32  # fastText's word hash of "</s>"
    barrett: np.uint64  # (2**64 - 1) // bucket: a word n-gram's bucket without a division


def _shapes(model: lid_model.LidModel) -> np.ndarray:
    """The dictionary's shape filter: the bits lid_ops._word_id tests before it hashes a
    token (a token whose bit is clear is no word of the dictionary)."""
    shapes = np.zeros((1 << SHAPE_BITS) // 64, np.uint64)
    for t in range(len(model.woff) - 1):
        entry = model.wbytes[model.woff[t] : model.woff[t + 1]]
        if len(entry):
            bit = int(_shape_bit(len(entry), entry[0], entry[-1]))
            shapes[bit // 64] |= np.uint64(1) << np.uint64(bit % 64)
    return shapes


def _empty_cache(words: int, maxn: int) -> tuple:
    """The word cache for about `words` distinct tokens (then emptied): slots (a power of two,
    at most half full; uint64 and int32 views of one array), the arena (int32 and bytes views)
    and its fill (tokens held, arena int32s used)."""
    slots = huge_pages.zeros((1 << (2 * words - 1).bit_length(), SLOT), np.int32)  # a slot a line
    arena = huge_pages.zeros((words * 8 + maxn * (LONGEST_CACHED + 2) + 3 + LONGEST_CACHED // 4,),
                             np.int32)  # fmt: skip
    return slots.view(np.uint64), slots, arena, arena.view(np.uint8), np.zeros(2, np.int64)


def _sigmoid_table() -> np.ndarray:
    """fastText's Loss::t_sigmoid_: 1 / (1 + exp(-x)) at SIGMOID_TABLE + 1 points over [-8, 8]
    (x in float32, exp in float32, the rest in double, stored as float32)."""
    table = np.empty(SIGMOID_TABLE + 1, np.float32)
    for i in range(SIGMOID_TABLE + 1):
        x = np.float32(np.float32(i * 2 * MAX_SIGMOID) / np.float32(SIGMOID_TABLE))
        x = np.float32(x - np.float32(MAX_SIGMOID))
        table[i] = 1.0 / (1.0 + float(np.float32(math.exp(-float(x)))))
    return table


def _parents(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    parent = np.full(len(left), -1, np.int64)
    inner = np.flatnonzero(left >= 0)
    parent[left[inner]] = inner
    parent[right[inner]] = inner
    return parent


class Predictor:
    """fastText's predict for the supervised model at `path`: the top label and its score
    (`predict(line, 1, 0.0)`), and a named label's score (`predict(line, -1, 0.0)`);
    `cache_words`: distinct tokens the word cache holds before it is emptied (2**18: 32 MiB
    of slots, 8 MiB of arena)."""

    def __init__(self, path: str, cache_words: int = 1 << 18) -> None:
        model = lid_model.read(path)
        if sys.byteorder != "little":  # _load8, the file's numbers
            raise ValueError("a big-endian machine")
        if model.bucket == 0 and (model.maxn > 0 or model.word_ngrams > 1):
            raise ValueError("n-grams without buckets")
        self.labels = model.labels
        bucket = max(model.bucket, 1)
        eos_hash = np.array(lid_model.fnv(b"</s>"), np.uint32).view(np.int32)[()]
        big = huge_pages.copy  # the tables read at random: on huge pages where they are large
        self._words = _Words(big(model.table), big(model.wbytes), big(model.woff), model.types,
                             big(model.kept), big(model.before), big(model.ranked),
                             _shapes(model), model.minn, model.maxn,
                             np.uint64(bucket), np.uint64(((2**64 - 1) // bucket + 1) % 2**64),
                             model.eos, model.nwords, model.word_ngrams, model.pruned,
                             eos_hash, np.uint64((2**64 - 1) // bucket))  # fmt: skip
        self._net = (big(model.rows), big(model.out), model.out_norms, model.left, model.right,
                     _parents(model.left, model.right), _sigmoid_table(), model.loss)  # fmt: skip
        self._cache = _empty_cache(cache_words, model.maxn)
        self._lock = threading.Lock()  # the cache is written in place: one call at a time

    def predict(self, line: str) -> tuple[str, float]:
        """(label, score) of one line, read up to its first \\n."""
        data = np.frombuffer(line.encode("utf-8"), np.uint8)
        node, score, _ = self._run(data, np.array([0, len(data)], np.int64), -1, LINE, -1)
        if node[0] < 0:
            raise ValueError("no words to predict from")
        return self.labels[node[0]], float(score[0])

    def predict_texts(self, data: np.ndarray, offsets: np.ndarray, max_chars: int
                      ) -> tuple[list[str], np.ndarray]:  # fmt: skip
        """(labels, float32 scores) of texts data[offsets[i]:offsets[i + 1]] (UTF-8), each read
        as the line `text[:max_chars].replace("\\n", " ") + "\\n"`."""
        node, score, _ = self._run(data, offsets.astype(np.int64, copy=False), max_chars, TEXT,
                                   -1)  # fmt: skip
        return [self.labels[i] for i in node.tolist()], score

    def score_texts(self, data: np.ndarray, offsets: np.ndarray, max_chars: int, mode: int,
                    label: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """For texts data[offsets[i]:offsets[i + 1]] (UTF-8) read as `mode` says (TEXT: the
        line `text[:max_chars].replace("\\n", " ") + "\\n"`; FIRST_LINE: `text[:max_chars]`
        up to its first \\n, then "\\n"): the top label's index (-1: nothing to predict
        from), its float32 score, and the float32 score of label index `label` that fastText's
        predict(line, -1, 0.0) reports (0.0 where it leaves the label out)."""
        if not 0 <= label < len(self.labels):
            raise ValueError(f"no label {label}")
        return self._run(data, offsets.astype(np.int64, copy=False), max_chars, mode, label)

    def forget(self) -> None:
        """Empty the word cache (a benchmark's cold start); its memory is kept."""
        with self._lock:
            self._cache[1][:, LENGTH] = 0
            self._cache[4][:] = 0

    def held(self) -> int:
        """The distinct tokens the word cache holds now."""
        return int(self._cache[4][0])

    def _run(self, data, offsets, max_chars, mode, label
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        data = data.view()
        data.flags.writeable = False  # one compiled signature, whoever owns the bytes
        node = np.empty(len(offsets) - 1, np.int64)
        score = np.empty(len(offsets) - 1, np.float32)
        named = np.empty(len(offsets) - 1, np.float32)
        with self._lock:
            _predict_all(data, offsets, max_chars, mode, label, self._words, self._net,
                         self._cache, node, score, named)  # fmt: skip
        return node, score, named


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

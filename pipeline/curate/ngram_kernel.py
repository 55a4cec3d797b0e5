"""Gopher repetition's n-gram rules compiled with numba (pure: no I/O), value for value the
numpy path of gopher.NGrams, in one call per document: hashes counted in a hash table (linear
in the words) where the numpy path sorts, and no numpy call per rule.

For each rule in order (n, kind, bound): the n-gram hashes (h_1 = word ids, h_n = h_(n-1) · MUL
+ the next word id, wrapping mod 2^64), then kind 0: the most frequent hash's count times its
n-gram's word characters (among equally frequent ones, the one of most characters; 0 when none
occurs twice), kind 1: the word characters inside any occurrence of a hash that occurs twice,
kind 2: inside its occurrences after the first (gopher.REPEATED), each character counted once;
all over all word characters. Returns the first rule whose fraction
exceeds its bound and that fraction, or (-1, 0.0).

`first_exceeded_batch` answers for every document of a batch in one call, each level n tallying
only the positions where both (n-1)-grams it holds repeat (every occurrence of a repeated
n-gram is among them): the same answers, unless two different n-grams share a 64-bit hash that
their (n-1)-grams do not, where the full tally would count the collision as a repeat.

numba is optional: `available()` is False where it is not installed (or cannot compile), and
gopher.py uses NGrams. Compiled on first use into kernel_cache's shared folder, under its lock.
"""

from __future__ import annotations

import numpy as np

from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops

try:  # optional: gopher.NGrams gives the same values
    import numba

    _jit = numba.njit(cache=True, nogil=True)
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function


MUL = np.uint64(0x9E3779B97F4A7C15)  # gopher.NGrams._MUL
_SPREAD = np.uint64(0xBF58476D1CE4E5B9)  # a table slot from a hash's top bits, times this


@_jit
def _tally(grams):  # pragma: no cover - compiled
    """An open-addressing table of the distinct hashes: (each n-gram's slot, count per slot,
    hash per slot, first position per slot); a count of 0 marks an empty slot."""
    m = grams.shape[0]
    bits = 1
    while (1 << bits) < 2 * m:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    keys = np.empty(1 << bits, np.uint64)  # read only where counts says a slot is taken
    counts = np.zeros(1 << bits, np.int64)
    first = np.empty(1 << bits, np.int64)
    slot_of = np.empty(m, np.int64)
    for i in range(m):
        s = np.int64((grams[i] * _SPREAD) >> shift)
        while counts[s] != 0 and keys[s] != grams[i]:
            s = (s + 1) & mask
        if counts[s] == 0:
            keys[s] = grams[i]
            first[s] = i
        counts[s] += 1
        slot_of[i] = s
    return slot_of, counts, keys, first


@_jit
def _ends(lengths):  # pragma: no cover - compiled
    """ends[i]: the characters of the words before word i (an n-gram at i holds
    ends[i + n] - ends[i])."""
    ends = np.zeros(lengths.shape[0] + 1, np.int64)
    for i in range(lengths.shape[0]):
        ends[i + 1] = ends[i] + lengths[i]
    return ends


@_jit
def _top(grams, ends, n, total):  # pragma: no cover - compiled
    _, counts, _, first = _tally(grams)
    best, chars = -1, 0
    for s in range(counts.shape[0]):  # the most frequent; of equally frequent, the longest
        if counts[s] != 0:
            held = ends[first[s] + n] - ends[first[s]]
            if best < 0 or counts[s] > counts[best] or (
                counts[s] == counts[best] and held > chars
            ):  # fmt: skip
                best, chars = s, held
    if counts[best] < 2:
        return 0.0
    return float(counts[best] * chars) / float(total)


@_jit
def _duplicated(grams, lengths, n, total, later_only):  # pragma: no cover - compiled
    slot_of, counts, _, first = _tally(grams)
    depth = np.zeros(lengths.shape[0] + 1, np.int64)  # +1: a repeated n-gram opens, -1: ends
    for j in range(grams.shape[0]):
        if counts[slot_of[j]] > 1 and not (later_only and first[slot_of[j]] == j):
            depth[j] += 1
            depth[j + n] -= 1
    open_, chars = 0, 0
    for k in range(lengths.shape[0]):
        open_ += depth[k]
        if open_ > 0:
            chars += lengths[k]
    return float(chars) / float(total)


@_jit
def _first_exceeded(ids, lengths, ns, kinds, bounds):  # pragma: no cover - compiled
    words = ids.shape[0]
    total = 0
    for i in range(words):
        total += lengths[i]
    h = ids.copy()
    ends = _ends(lengths)
    at_n = 1
    for r in range(ns.shape[0]):
        n = ns[r]
        if words < n or total == 0:
            if bounds[r] < 0.0:  # fraction 0 exceeds no bound of 0 or more
                return r, 0.0
            continue
        if n < at_n:
            h[:] = ids
            at_n = 1
        while at_n < n:
            at_n += 1
            for i in range(words - at_n + 1):
                h[i] = h[i] * MUL + ids[i + at_n - 1]
        grams = h[: words - n + 1]
        if kinds[r] == 0:
            value = _top(grams, ends, n, total)
        else:
            value = _duplicated(grams, lengths, n, total, kinds[r] == 2)
        if value > bounds[r]:
            return r, value
    return -1, 0.0


@_jit
def _unigrams(ids, lengths, rep):  # pragma: no cover - compiled
    """Level 1 from the word ids (1..distinct): rep[i] = 0 where word i occurs once, 1 at the
    first occurrence of a word that occurs twice or more, 2 at its later ones; returns (the
    most frequent word's count, its first position), the longest among equals."""
    counts = np.zeros(ids.shape[0] + 2, np.int64)
    at = np.zeros(ids.shape[0] + 2, np.int64)  # each id's first position
    seen = 0
    for i in range(ids.shape[0]):
        counts[ids[i]] += 1
        rep[i] = 0
        if ids[i] > seen:  # ids are numbered in order of first occurrence
            at[ids[i]] = i
            seen = ids[i]
    best = 1
    for v in range(2, seen + 1):
        if counts[v] > counts[best] or (
            counts[v] == counts[best] and lengths[at[v]] > lengths[at[best]]
        ):  # fmt: skip
            best = v
    for i in range(ids.shape[0]):
        if counts[ids[i]] > 1:
            rep[i] = 1 if at[ids[i]] == i else 2
    return counts[best], at[best]


@_jit
def _level(h, m, n, ends, rep, scratch, tick):  # pragma: no cover - compiled
    """From rep (level n-1: its n-gram at i occurs twice or more where rep[i] > 0: 1 at its
    first occurrence, 2 at the later ones) to level n over h[:m]: an
    n-gram occurs twice only where both (n-1)-grams it holds do, so only those positions are
    tallied, and every occurrence of a repeated n-gram is among them. Returns (the most
    frequent hash's count, its first position), of equally frequent ones the one of most
    characters (ends: _ends) (count 1: no n-gram repeats). The table lives in `scratch`
    (_scratch), its slots valid where their stamp is `tick` (no clearing between levels); the
    most frequent is kept up to date as it goes."""
    keys, counts, first, stamp, slot_of, where = scratch
    c = 0
    for i in range(m):
        if rep[i] and rep[i + 1]:
            where[c] = i
            c += 1
    if c == 0:
        for i in range(m):
            rep[i] = 0
        return 1, 0
    bits = 1
    while (1 << bits) < 2 * c:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    best, chars = -1, 0
    for j in range(c):
        g = h[where[j]]
        s = np.int64((g * _SPREAD) >> shift)
        while stamp[s] == tick and keys[s] != g:
            s = (s + 1) & mask
        if stamp[s] != tick:
            stamp[s], keys[s], counts[s], first[s] = tick, g, 0, j
        counts[s] += 1
        slot_of[j] = s
        if s != best:  # counts only grow: the best so far is overtaken only by the slot counted
            held = ends[where[j] + n] - ends[where[j]]
            if best < 0 or counts[s] > counts[best] or (
                counts[s] == counts[best] and held > chars
            ):  # fmt: skip
                best, chars = s, held
    for i in range(m):
        rep[i] = 0
    for j in range(c):  # candidates in text order: a slot's first candidate is its first
        if counts[slot_of[j]] > 1:
            rep[where[j]] = 1 if first[slot_of[j]] == j else 2
    return counts[best], where[first[best]]


@_jit
def _scratch(words):  # pragma: no cover - compiled
    """_level's table (hash, count, first candidate and stamp per slot) for up to `words`
    candidates, and its per-candidate slot and position."""
    size = 2
    while size < 2 * words:
        size *= 2
    return (np.empty(size, np.uint64), np.empty(size, np.int64), np.empty(size, np.int64),
            np.full(size, -1, np.int64), np.empty(max(words, 1), np.int64),
            np.empty(max(words, 1), np.int64))  # fmt: skip


@_jit
def _pruned(ids, lengths, ns, kinds, bounds, rest, scratch, clock):  # pragma: no cover
    """_first_exceeded's answer (every n at least 1), each level tallying only the positions
    where the level below repeats (clock[0]: the last table stamp used). A repeated
    (n+1)-gram is two overlapping repeated n-grams, so the words it covers are covered at level
    n: the duplicated fraction never grows with n, and once a duplicated rule's fraction is at
    most rest[r] (`first_exceeded_batch`), no later rule can exceed its bound."""
    words = ids.shape[0]
    total = 0
    for i in range(words):
        total += lengths[i]
    h = ids.copy()
    ends = _ends(lengths)
    rep = np.empty(words + 1, np.int8)
    at_n = 0
    best_count, best_at = 1, 0
    for r in range(ns.shape[0]):
        n = ns[r]
        if words < n or total == 0:
            if bounds[r] < 0.0:  # fraction 0 exceeds no bound of 0 or more
                return r, 0.0
            continue
        if n < at_n or at_n == 0:
            h[:] = ids
            best_count, best_at = _unigrams(ids, lengths, rep)
            rep[words] = 0
            at_n = 1
        while at_n < n:
            if best_count < 2:  # nothing repeats at this level: nothing longer does (rep is
                at_n = n  # all 0, h is not needed: a shorter n starts again from ids)
                break
            at_n += 1
            m = words - at_n + 1
            for i in range(m):
                h[i] = h[i] * MUL + ids[i + at_n - 1]
            clock[0] += 1  # a new table: every slot's stamp is older
            best_count, best_at = _level(h, m, at_n, ends, rep, scratch, clock[0])
            rep[m] = 0
        value = 0.0
        if kinds[r] == 0:
            if best_count >= 2:
                value = float(best_count * (ends[best_at + n] - ends[best_at])) / float(total)
        else:
            chars, open_ = 0, 0
            least = 1 if kinds[r] == 1 else 2  # kind 2: the later occurrences only
            for k in range(words):
                if k < words - n + 1 and rep[k] >= least:
                    open_ = n
                if open_ > 0:
                    chars += lengths[k]
                    open_ -= 1
            value = float(chars) / float(total)
        if value > bounds[r]:
            return r, value
        if kinds[r] != 0 and value <= rest[r]:
            return -1, 0.0
    return -1, 0.0


@_jit
def _batch(ids, lengths, first, todo, ns, kinds, bounds, rest, out_rule, out_value):
    longest = 0  # pragma: no cover - compiled
    for d in range(first.shape[0] - 1):
        if todo[d]:
            longest = max(longest, first[d + 1] - first[d])
    scratch, clock = _scratch(longest), np.zeros(1, np.int64)
    for d in range(first.shape[0] - 1):
        if todo[d]:
            a, b = first[d], first[d + 1]
            out_rule[d], out_value[d] = _pruned(ids[a:b], lengths[a:b], ns, kinds, bounds, rest,
                                                scratch, clock)  # fmt: skip


def first_exceeded_batch(
    ids: np.ndarray, lengths: np.ndarray, first: np.ndarray, todo: np.ndarray,
    rules: list[tuple[int, int, float]],
) -> tuple[list[int], list[float]]:  # fmt: skip
    """first_exceeded for each document d with todo[d] (its words ids[first[d]:first[d+1]]),
    in one call; (-1, 0.0) for the others. Every n of the rules is 1 or more."""
    n = len(first) - 1
    out_rule, out_value = np.full(n, -1, np.int64), np.zeros(n, np.float64)
    ns = np.array([r[0] for r in rules], np.int64)
    kinds = np.array([r[1] for r in rules], np.int8)
    bounds = np.array([r[2] for r in rules], np.float64)
    _batch(ids, lengths, first, todo, ns, kinds, bounds, _rest(rules), out_rule, out_value)
    return out_rule.tolist(), out_value.tolist()


def _rest(rules: list[tuple[int, int, float]]) -> np.ndarray:
    """rest[r]: for a duplicated rule (kind 1 or 2) followed only by rules of its kind and of
    n as large or larger, the smallest of their bounds (a fraction at most this at r exceeds
    none of them: a repeated (n+1)-gram occurrence is two overlapping ones of n, later ones
    where it is a later one); -inf elsewhere."""
    rest = np.full(len(rules), -np.inf)
    for r, (n, kind, _) in enumerate(rules):
        later = rules[r + 1 :]
        if kind != 0 and later and all(k == kind and m >= n for m, k, _ in later):
            rest[r] = min(b for _, _, b in later)
    return rest


_usable: bool | None = None


def available() -> bool:
    """Whether the kernel runs compiled here (numba installed and it compiles)."""
    global _usable
    if _usable is None:
        _usable = numba is not None
        if _usable:
            try:  # compile (or load from the cache) the batch path now, on tiny inputs, with
                # the types curate/measures.py passes (first_exceeded compiles on its first call)
                with kernel_cache.compiling():  # one compiling process per machine
                    first_exceeded_batch(np.arange(1, 4, dtype=np.uint64), np.ones(3, np.int32),
                                         np.array([0, 3]), np.ones(1, np.bool_),
                                         [(2, 0, 0.5), (3, 1, 0.5)])  # fmt: skip
            except Exception:  # noqa: BLE001 - any failure to compile: the numpy path
                _usable = False
    return _usable


def first_exceeded(
    ids: np.ndarray, lengths: np.ndarray, rules: list[tuple[int, int, float]]
) -> tuple[int, float]:
    """(index of the first rule (n, kind 0 top / 1 duplicated, bound) whose fraction exceeds
    its bound, that fraction), or (-1, 0.0)."""
    ns = np.array([n for n, _, _ in rules], np.int64)
    kinds = np.array([k for _, k, _ in rules], np.int8)
    bounds = np.array([b for _, _, b in rules], np.float64)
    r, value = _first_exceeded(ids, lengths, ns, kinds, bounds)
    return int(r), float(value)

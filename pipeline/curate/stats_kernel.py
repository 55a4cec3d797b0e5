"""The compiled loops of curate/measures.py (numba; pure: no I/O): over a batch's UTF-8 bytes
and document offsets, each word's byte span, code points and hash, lines and paragraphs grouped
from the words, items numbered by first occurrence (hash matches confirmed byte for byte),
duplicates, items starting or ending with given patterns, and the Gopher quality word classes.
Every table they read (whitespace, letters, punctuation, stop words) is an argument, built by
measures.py. The loops that call one another live in this one file: numba's disk cache notices
edits to the file of the function it compiled only.

numba is optional: without it the functions below are plain Python (measures.available() is
then False and the filters judge each document with text.py).
"""

from __future__ import annotations

import numpy as np

from pipeline.dedup import kernel_cache

kernel_cache.install_locator()  # before the first njit: where numba caches these loops

try:
    import numba

    _jit = numba.njit(cache=True, nogil=True)
except ImportError:  # pragma: no cover - exercised where numba is not installed
    numba = None

    def _jit(function):
        return function


_MUL = np.uint64(0x9E3779B97F4A7C15)
_SPREAD = np.uint64(0xBF58476D1CE4E5B9)  # a table slot from a hash's top bits, times this


@_jit
def _words(data, offsets, kinds, space, classes, starts, ends, cps, hashes, gap_cps, gap_lines,
           first, per_doc):  # fmt: skip
    """Each word's byte span, code points and hash (of its bytes; equal hashes are compared
    byte for byte where it matters), and the code points and newlines of the gap before it
    (from the previous word, or the document's start); `first[d]`: document d's first word
    (first[n] = all words). per_doc[d] (measures.PER_DOC): newlines, words, word code points,
    words ending in "." "!" or "?" (C4's sentence ends: a run of them followed by whitespace
    or the end), and, with `classes`, "#" and ellipses ("..." non-overlapping, and "…"; the
    word classes: _word_classes). kinds[c] for an ASCII byte: 0 a word's, 1
    whitespace (str.isspace), 2 "#" or "." with `classes`; space[cp]: str.isspace up to
    U+3000. One loop, characters decoded in it (a decoding helper returning a tuple ran 3x
    slower)."""
    w = 0
    for doc in range(offsets.shape[0] - 1):
        i, stop = offsets[doc], offsets[doc + 1]
        first[doc] = w
        newlines, gap, lines, chars, sentences = 0, 0, 0, 0, 0
        while True:
            while i < stop:  # the gap: whitespace up to the next word
                c = np.int64(data[i])
                if c < 0x80:
                    if kinds[c] != 1:
                        break
                    gap += 1
                    lines += c == 10
                    i += 1
                elif c < 0xF0:  # past U+FFFF: no whitespace
                    if c < 0xE0:
                        cp = ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
                    else:
                        cp = ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6)
                        cp |= np.int64(data[i + 2]) & 0x3F
                    if cp >= space.shape[0] or not space[cp]:
                        break
                    gap += 1
                    i += 2 if c < 0xE0 else 3
                else:
                    break
            if i >= stop:
                break
            starts[w], gap_cps[w], gap_lines[w] = i, gap, lines
            newlines += lines
            gap, lines, k = 0, 0, 0
            h = np.uint64(0)
            while i < stop:  # the word
                c = np.int64(data[i])
                if c < 0x80:
                    kind = kinds[c]
                    if kind == 1:
                        break
                    if kind == 2:  # with classes only
                        if c == 35:
                            per_doc[doc, 4] += 1
                        else:  # a run of dots, whole: its "..." do not overlap
                            run = 0
                            while i < stop and data[i] == 46:
                                h = ((h << np.uint64(8)) | (h >> np.uint64(56))) ^ np.uint64(46)
                                i += 1
                                run += 1
                            per_doc[doc, 5] += run // 3
                            k += run
                            continue
                    h = ((h << np.uint64(8)) | (h >> np.uint64(56))) ^ np.uint64(c)
                    i += 1
                else:
                    if c < 0xE0:
                        cp = ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
                        n = 2
                    elif c < 0xF0:
                        cp = ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6)
                        cp |= np.int64(data[i + 2]) & 0x3F
                        n = 3
                    else:
                        cp, n = space.shape[0], 4  # past U+FFFF: no whitespace
                    if cp < space.shape[0] and space[cp]:
                        break
                    if classes and cp == 0x2026:
                        per_doc[doc, 5] += 1
                    for j in range(n):
                        h = ((h << np.uint64(8)) | (h >> np.uint64(56))) ^ np.uint64(data[i + j])
                    i += n
                k += 1
            ends[w], cps[w], hashes[w] = i, k, (h ^ (h >> np.uint64(29))) * _MUL
            chars += k
            last = data[i - 1]  # a character's last byte: ASCII only when the character is
            sentences += last == 46 or last == 33 or last == 63
            w += 1
        per_doc[doc, 0], per_doc[doc, 1], per_doc[doc, 2] = newlines + lines, w - first[doc], chars
        per_doc[doc, 3] = sentences
    first[offsets.shape[0] - 1] = w
    return w


@_jit
def _decode(data, i):
    """The code point of the UTF-8 character at data[i] (not ASCII)."""
    c = np.int64(data[i])
    if c < 0xE0:
        return ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
    if c < 0xF0:
        return ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (data[i + 2] & 0x3F)
    return ((c & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | (
        (np.int64(data[i + 2]) & 0x3F) << 6) | (data[i + 3] & 0x3F)  # fmt: skip


@_jit
def _size(c):
    return 1 if c < 0x80 else (2 if c < 0xE0 else (3 if c < 0xF0 else 4))


@_jit
def _word_classes(data, starts, ends, first, alpha_table, punct, stop_keys, longest, todo,
                  per_doc):  # fmt: skip
    """per_doc[d, 6:8]: document d's words holding a letter (alpha_table: str.isalpha per code
    point), and the distinct stop words among its words stripped of `punct` characters at both
    ends and lower-cased (text.bare; stop_keys as measures.packed: ASCII, so a character lowers
    into one only when it is ASCII or U+212A, KELVIN SIGN, "k"), each counted once (Gopher's
    "at least two of"); `longest`: the longest stop word's characters (7 at most). Only the
    documents d with todo[d]."""
    seen = np.full(stop_keys.shape[0], -1, np.int64)  # the last document each was found in
    for doc in range(first.shape[0] - 1):
        if not todo[doc]:
            continue
        alpha, stop = 0, 0
        for w in range(first[doc], first[doc + 1]):
            s, e = starts[w], ends[w]
            i = s
            while i < e:
                c = np.int64(data[i])
                if c < 0x80:
                    if 97 <= (c | 0x20) <= 122:
                        alpha += 1
                        break
                    i += 1
                else:
                    if alpha_table[_decode(data, i)]:
                        alpha += 1
                        break
                    i += _size(c)
            while s < e:  # bare: punctuation stripped from both ends
                cp = np.int64(data[s]) if data[s] < 0x80 else _decode(data, s)
                if cp >= punct.shape[0] or not punct[cp]:
                    break
                s += _size(data[s])
            while e > s:
                last = e - 1
                while data[last] & 0xC0 == 0x80:
                    last -= 1
                cp = np.int64(data[last]) if data[last] < 0x80 else _decode(data, last)
                if cp >= punct.shape[0] or not punct[cp]:
                    break
                e = last
            key, n = 0, 0  # the bare word lowered, packed as stop_keys are
            i = s
            while i < e and n <= longest:
                c = np.int64(data[i])
                if c >= 0x80:
                    if _decode(data, i) != 0x212A:
                        break
                    c, i = 107, i + 3
                else:
                    if 65 <= c <= 90:
                        c += 32
                    i += 1
                key |= c << (8 * n)
                n += 1
            if i == e and n <= longest:
                key |= n << 56
                for p in range(stop_keys.shape[0]):
                    if stop_keys[p] == key:
                        if seen[p] != doc:
                            seen[p] = doc
                            stop += 1
                        break
        per_doc[doc, 6], per_doc[doc, 7] = alpha, stop


@_jit
def _groups(words, gap_cps, gap_lines, min_newlines, out_s, out_e, out_c, out_h, out_first):
    """Words grouped into items (lines: min_newlines 1, paragraphs: 2): an item ends where the
    gap before the next word holds min_newlines newlines or more. An item's hash is of its
    words' hashes (items with the same words and other gaps share it: _ids compares bytes)."""
    starts, ends, cps, hashes, first = words
    m = 0
    for doc in range(first.shape[0] - 1):
        out_first[doc] = m
        for w in range(first[doc], first[doc + 1]):
            if w == first[doc] or gap_lines[w] >= min_newlines:
                out_s[m], out_e[m], out_c[m], out_h[m] = starts[w], ends[w], cps[w], hashes[w]
                m += 1
            else:
                out_e[m - 1] = ends[w]
                out_c[m - 1] += gap_cps[w] + cps[w]
                out_h[m - 1] = out_h[m - 1] * _MUL + hashes[w]
    out_first[first.shape[0] - 1] = m
    return m


@_jit
def _same(data, a_s, a_e, b_s, b_e):
    if a_e - a_s != b_e - b_s:
        return False
    for k in range(a_e - a_s):  # noqa: SIM110 - compiled: no generator
        if data[a_s + k] != data[b_s + k]:
            return False
    return True


@_jit
def _ids(data, items, todo, ids):
    """ids[i]: 1, 2, ... per document, in order of first occurrence of each distinct item (equal
    bytes: a hash match is confirmed byte for byte), for the documents d with todo[d]."""
    starts, ends, _, hashes, first = items
    for doc in range(first.shape[0] - 1):
        if not todo[doc]:
            continue
        a, b = first[doc], first[doc + 1]
        bits = 1
        while (1 << bits) < 2 * (b - a):
            bits += 1
        mask = (1 << bits) - 1
        slot_item = np.full(1 << bits, -1, np.int64)
        distinct = 0
        for i in range(a, b):
            h = hashes[i]
            s = np.int64((h * _SPREAD) >> np.uint64(64 - bits))
            while slot_item[s] >= 0:
                j = slot_item[s]
                if hashes[j] == h and _same(data, starts[j], ends[j], starts[i], ends[i]):
                    break
                s = (s + 1) & mask
            if slot_item[s] < 0:
                slot_item[s] = i
                distinct += 1
                ids[i] = distinct
            else:
                ids[i] = ids[slot_item[s]]


@_jit
def _duplicates(ids, cps, first, out):
    """Per document: items that repeat an earlier one and their code points (text.duplicates),
    and the code points of all items."""
    for doc in range(first.shape[0] - 1):
        seen = 0
        dup, dup_chars, chars = 0, 0, 0
        for i in range(first[doc], first[doc + 1]):
            chars += cps[i]
            if ids[i] <= seen:
                dup += 1
                dup_chars += cps[i]
            else:
                seen = ids[i]
        out[doc, 0], out[doc, 1], out[doc, 2] = dup, dup_chars, chars


@_jit
def _affixed(data, starts, ends, first, pat_data, pat_offsets, at_end, edge, out):
    """Per document: items that start (at_end False) or end with any of the patterns; edge[b]:
    whether a pattern starts (ends) with byte b (items are never empty)."""
    for doc in range(first.shape[0] - 1):
        hits = 0
        for i in range(first[doc], first[doc + 1]):
            if not edge[data[ends[i] - 1] if at_end else data[starts[i]]]:
                continue
            for p in range(pat_offsets.shape[0] - 1):
                ps, pe = pat_offsets[p], pat_offsets[p + 1]
                size = pe - ps
                if size > ends[i] - starts[i]:
                    continue
                at = ends[i] - size if at_end else starts[i]
                match = True
                for k in range(size):
                    if data[at + k] != pat_data[ps + k]:
                        match = False
                        break
                if match:
                    hits += 1
                    break
        out[doc] = hits

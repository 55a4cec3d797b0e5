"""dedup/nfc.py: NFC found once for a column (normal_form) gives each batch what NFC of the
batch gives, and both dedup rules return the same values with it as without it."""

import random
import unicodedata

import pyarrow as pa

from pipeline.core.text import content_hash
from pipeline.dedup import minhash, text_kernel
from pipeline.dedup.nfc import nfc, normal_form

# NFC changes the first four; the rest are NFC already (ASCII, or not)
CHANGED = ["e\u0301t\u00e9", "A\u030a", "\u1e9b\u0323 x", "Ki\u0301lo\u0301 words here"]
UNCHANGED = ["plain ascii words", "caf\u00e9 na\u00efve", "", "\u65e5\u672c \u201cquoted\u201d"]


def column(seed: int) -> pa.ChunkedArray:
    """Documents of both kinds in random order, in chunks (one empty), the NFC-changed ones in
    every chunk: a batch's rows must be found at its place in the column."""
    rng = random.Random(seed)
    texts = [rng.choice(CHANGED + UNCHANGED) + " " + str(i) for i in range(60)]
    for at in (0, 17, 31, 44, 59):
        texts[at] = CHANGED[at % len(CHANGED)]
    return pa.chunked_array([texts[:20], [], texts[20:45], texts[45:]], pa.string())


def test_each_batch_gets_the_nfc_of_its_own_documents():
    texts = column(0)
    known = normal_form(texts)
    flat = texts.combine_chunks()
    assert known.ascii.tolist() == [t.isascii() for t in flat.to_pylist()]
    assert len(known.rows) >= 5
    for start in range(0, 60, 7):
        for length in (0, 1, 9, 60 - start):
            batch = flat.slice(start, length)
            want = [unicodedata.normalize("NFC", t) for t in batch.to_pylist()]
            assert nfc(batch, known, start).to_pylist() == want
            assert nfc(batch).to_pylist() == want


def test_a_batch_nfc_leaves_alone_is_not_copied():
    texts = pa.array(["caf\u00e9", "plain", "e\u0301"])
    batch = texts.slice(0, 2)
    assert nfc(batch, normal_form(texts), 0) is batch


def test_signatures_and_content_hashes_with_the_column_nfc_equal_those_without():
    """Small batches, so that batches start inside chunks and the changed documents sit in
    batches other than the first."""
    texts = column(1)
    known = normal_form(texts)
    want = minhash.signatures(texts, batch_bytes=64)
    assert (minhash.signatures(texts, batch_bytes=64, known=known) == want).all()
    assert (minhash.signatures(texts, batch_bytes=64, compiled=False, known=known) == want).all()
    hashes = text_kernel.content_hashes(texts, batch_bytes=64, known=known)
    assert hashes == [content_hash(t) for t in texts.to_pylist()]


def test_the_quick_check_passes_only_characters_nfc_never_changes_in_any_company():
    """Every code point of the table, against Unicode's whole decomposition data: a flagged one
    is a starter NFC keeps, and no canonical pair anywhere ends with it (it joins nothing before
    it), Hangul's joining jamo included."""
    table = text_kernel.quick_nfc()
    second = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    for c in range(0x110000):
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            second.add(int(parts[1], 16))
    flagged = [c for c in range(len(table)) if table[c]]
    assert len(flagged) > 10_000  # Latin, Greek, Cyrillic, punctuation...: the usual text
    for c in flagged:
        ch = chr(c)
        assert not unicodedata.combining(ch) and unicodedata.normalize("NFC", ch) == ch, hex(c)
        assert c not in second, hex(c)


def test_the_compiled_quick_check_finds_what_python_finds():
    """Characters that join the one before them (combining marks, Hangul jamo, Oriya's AA
    sign), characters past the table (CJK, emoji), each at the start, the end and across the
    eight bytes passed at once, in a sliced array."""
    joiners = ["e\u0301", "\u1100\u1161", "\u0b47\u0b3e", "A\u030a", "\u212b", "\u0344"]
    kept = ["caf\u00e9", "\u65e5\u672c", "\U0001f600", "\u2019quote\u201d", "\u00c5", "\u1100"]
    texts = ["plain ascii", ""]
    for piece in joiners + kept:
        for pad in (0, 3, 7, 8, 15):
            texts += [piece + "x" * pad, "y" * pad + piece, "z" * pad + piece + "w" * (pad + 1)]
    array = pa.array(["drop me", *texts]).slice(1)
    with_kernel, without = text_kernel.normal_form(array), normal_form(array)
    assert with_kernel.ascii.tolist() == without.ascii.tolist()
    assert with_kernel.rows.tolist() == without.rows.tolist() and len(without.rows) >= 40
    assert with_kernel.texts.to_pylist() == without.texts.to_pylist()
    kinds = text_kernel.nfc_kinds(array).tolist()
    assert kinds[:2] == [text_kernel.ASCII] * 2
    assert text_kernel.NFC_ALREADY in kinds and text_kernel.ASK in kinds

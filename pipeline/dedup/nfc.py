"""NFC of documents, as both of dedup's text rules take it (pure: Arrow and Python, no I/O):
exact dedup's content hash (core/text.content_hash) and MinHash's words (dedup/minhash.py) each
start from NFC(text).

`nfc` normalises a batch. `normal_form` finds, once for a whole column (a unit's texts), which
documents are ASCII and the NFC of the few that NFC changes; each consumer then takes
`nfc(batch, known, start)`, which writes those back into its batch with no second look at the
text. Contract: `nfc(batch, normal_form(column), start)` equals `nfc(batch)` where batch is the
column's documents from `start` on; what is held is the changed documents' NFC only, never a
copy of the column. Where numba runs, text_kernel.normal_form gives it a compiled quick check
(`kinds`: ASCII, NFC_ALREADY or ASK per document), so that Python decodes and normalises only
the documents it cannot vouch for.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ASCII, NFC_ALREADY, ASK = 0, 1, 2  # what a quick check says of a document


@dataclass(frozen=True)
class NormalForm:
    """Of a column of texts (its chunks end to end): which documents are ASCII (`ascii`, a bool
    per document), and the documents NFC changes (`rows`, ascending) with their NFC (`texts`)."""

    ascii: np.ndarray
    rows: np.ndarray
    texts: pa.Array


Kinds = Callable[[pa.Array], np.ndarray]  # a quick check: ASCII, NFC_ALREADY or ASK each


def _changed(texts: pa.Array, kinds: Kinds | None = None) -> tuple[np.ndarray, list, list]:
    """(is ASCII per document, the rows NFC changes, their NFC) of a batch without nulls.
    `kinds`: a quick check that sorts out the documents NFC leaves alone for sure; Python's NFC
    sees only the others."""
    if kinds is not None:
        said = kinds(texts)
        is_ascii, ask = said == ASCII, said == ASK
    else:
        is_ascii = pc.string_is_ascii(texts).to_numpy(zero_copy_only=False)
        ask = ~is_ascii
    changed, normalized = [], []
    if not ask.any():
        return is_ascii, changed, normalized
    rows = np.flatnonzero(ask)
    for row, text in zip(rows.tolist(), texts.take(rows).to_pylist(), strict=True):
        nfc_text = unicodedata.normalize("NFC", text)  # the same object when already NFC
        if nfc_text is not text and nfc_text != text:
            changed.append(row)
            normalized.append(nfc_text)
    return is_ascii, changed, normalized


def normal_form(texts: pa.Array | pa.ChunkedArray, kinds: Kinds | None = None) -> NormalForm:
    """What NFC changes in `texts` (strings; a null reads as ""); `kinds`: a quick check."""
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    flags, rows, normalized, first = [], [], [], 0
    for chunk in chunks:
        chunk = chunk.fill_null("") if chunk.null_count else chunk
        is_ascii, changed, nfc_texts = _changed(chunk, kinds)
        flags.append(is_ascii)
        rows += [first + row for row in changed]
        normalized += nfc_texts
        first += len(chunk)
    return NormalForm(
        np.concatenate(flags) if flags else np.empty(0, bool),
        np.array(rows, np.int64),
        pa.array(normalized, pa.string()),
    )


def nfc(texts: pa.Array, known: NormalForm | None = None, start: int = 0) -> pa.Array:
    """NFC of the non-ASCII documents only (ASCII is NFC already; Python's NFC beats Arrow's).
    Most text is NFC already: only the documents NFC changes are written back, and when none
    is, `texts` itself is returned (no copy of the batch). `known`: normal_form of a column
    whose documents from `start` on are `texts`; the text is then not looked at again."""
    if known is None:
        _, changed, normalized = _changed(texts)
        normalized = pa.array(normalized, texts.type)
    else:
        lo, hi = np.searchsorted(known.rows, [start, start + len(texts)])
        changed, normalized = known.rows[lo:hi] - start, known.texts[lo:hi].cast(texts.type)
    if not len(changed):
        return texts
    mask = np.zeros(len(texts), bool)
    mask[changed] = True
    return pc.replace_with_mask(texts, pa.array(mask), normalized)

"""Equality of tokenizer engines, proven on the data rather than assumed (pure core).

A fast engine is used only while it gives the reference engine's (Hugging Face tokenizers) ids:

- the probe, before the tokenize stage: a fixed set of hard strings (`hard_strings`: scripts,
  emoji sequences, combining marks, bidi and control characters, long runs, code, and the text of
  every special/added token inside prose) plus the first documents of several units; any
  difference and the whole run uses the reference;
- in every tokenize task, a deterministic sample of the documents (`sample_rows`: chosen by the
  document's shuffle key, a hash of its stable id) is re-encoded with the reference before the
  task commits anything; a difference fails the task (EngineMismatch, naming the document).
  The reference is ~100x slower per byte than fastokens (one core each), so the sample is
  small (tokenize.verify_fraction, default 0.1 % of the documents) and held to a byte budget per
  task (`tokenize.verify_bytes`, default 32 KiB): under 10 % of the engine's time from ~16 MiB
  units up (1 % of the documents, uncapped, cost about as much CPU as the engine's whole unit).
  A sampled document larger than the budget (the one a task checks when none fits) is checked
  on its leading piece (tokens/pieces.py `leading_piece`): the reference's ids of that piece
  against the engine's first ids of the document.
  `SampleCheck` runs the re-encoding on a thread of its own while the engine encodes the
  unit, or inline after it where a task keeps one thread busy (PIPELINE_TASK_THREADS=1, as Ray
  tasks do: encode.task_threads).
"""

from __future__ import annotations

import numpy as np

from pipeline.tokens.encode import Encoder, task_threads, threads

SAMPLE_SCALE = 1 << 20  # resolution of tokenize.verify_fraction


class EngineMismatch(Exception):
    """Two engines gave different ids for the same document."""


def first_difference(
    a_ids: np.ndarray, a_lens: np.ndarray, b_ids: np.ndarray, b_lens: np.ndarray
) -> tuple[int, int] | None:
    """(document, token position) of the first difference between two encodings, or None."""
    if np.array_equal(a_lens, b_lens) and np.array_equal(a_ids, b_ids):
        return None
    a_off = np.concatenate([[0], np.cumsum(a_lens)])
    b_off = np.concatenate([[0], np.cumsum(b_lens)])
    for doc in range(len(a_lens)):  # only on a difference: find where
        a = a_ids[a_off[doc] : a_off[doc + 1]]
        b = b_ids[b_off[doc] : b_off[doc + 1]]
        if not np.array_equal(a, b):
            n = min(len(a), len(b))
            unequal = np.flatnonzero(a[:n] != b[:n])
            return doc, int(unequal[0]) if len(unequal) else n
    raise AssertionError("encodings differ but no document does")  # lengths sum differ only


def describe(
    doc: int, pos: int, name: str, ref: tuple, got: tuple, engine: str
) -> str:
    """One line naming the document, the position and both engines' ids there."""
    def at(ids, lens):
        start = int(np.sum(lens[:doc]))
        seq = ids[start : start + int(lens[doc])]
        return int(seq[pos]) if pos < len(seq) else "end of document"

    return (
        f"document {name!r} differs at token {pos}: {engine} {at(*got)},"
        f" tokenizers {at(*ref)}"
    )


class SampleCheck:
    """One task's sampled re-encoding, overlapped with the engine's encoding of the whole unit.

    Built with the sample's texts and names, it starts `reference` on them at once on a thread of
    its own (tokenizers releases the GIL while it encodes), unless the task keeps one thread
    busy (task_threads() == 1): then `finish` encodes them. As the engine's batches go by,
    `collect` keeps the engine's ids of the sampled documents (copies: a few % of the tokens at
    most); `finish` waits for the reference and compares both, raising EngineMismatch on the
    first differing document. Callers call `finish` before committing anything."""

    def __init__(
        self,
        reference: Encoder,
        engine: str,
        texts: list[str],
        names: list[str],
        leading: list[bool] | None = None,
    ):
        """`leading[i]`: texts[i] is only the leading piece of the document the engine encodes
        (pieces.leading_piece), so only the engine's first ids are compared."""
        self.engine, self.names = engine, names
        self._leading = leading or [False] * len(texts)
        self._got: list[np.ndarray | None] = [None] * len(texts)
        self._encode, self._texts = reference.encode_flat, texts
        self._reference = None
        if task_threads() != 1:
            self._reference = threads("tokenize-check", 1).submit(self._encode, texts)

    def collect(self, check: list[tuple[int, int]], ids: np.ndarray, lengths: np.ndarray) -> None:
        """The engine's ids of a batch (`ids`, `lengths`): keep those of the `check` documents,
        given as (row in the batch, position in the sample)."""
        if not check:
            return
        ends = np.cumsum(lengths)
        for row, at in check:
            self._got[at] = ids[int(ends[row] - lengths[row]) : int(ends[row])].copy()

    def finish(self) -> int:
        """Compare (EngineMismatch on a difference); the number of documents checked."""
        if self._reference is None:  # one thread: the reference after the engine
            ref_ids, ref_lens = self._encode(self._texts)
        else:
            ref_ids, ref_lens = self._reference.result()
        missing = [self.names[i] for i, got in enumerate(self._got) if got is None]
        if missing:
            raise RuntimeError(f"sampled document {missing[0]!r} was never encoded")
        got = [
            g[: int(n)] if lead else g
            for g, n, lead in zip(self._got, ref_lens, self._leading, strict=True)
        ]
        got_lens = np.array([len(g) for g in got], dtype=np.int64)
        got_ids = np.concatenate(got) if got else np.empty(0, np.uint32)
        diff = first_difference(ref_ids, ref_lens, got_ids, got_lens)
        if diff is not None:
            doc, pos = diff
            raise EngineMismatch(
                describe(doc, pos, self.names[doc], (ref_ids, ref_lens), (got_ids, got_lens),
                         self.engine)
            )
        return len(self._got)


def confirm_with_reference(
    reference: Encoder, engine: str, texts: list[str], names: list[str], got: list[np.ndarray]
) -> None:
    """The engine's ids (`got`) of documents about to be quarantined because they hold the EOS
    or BOS id, against the reference's: a document is quarantined only on the reference's word
    (EngineMismatch otherwise). Such documents are rare; all of them are checked."""
    if not texts:
        return
    ref = reference.encode_flat(texts)
    lens = np.array([len(g) for g in got], dtype=np.int64)
    ids = np.concatenate(got)
    diff = first_difference(*ref, ids, lens)
    if diff is not None:
        doc, pos = diff
        raise EngineMismatch(describe(doc, pos, names[doc], ref, (ids, lens), engine))


def sample_rows(
    keys: np.ndarray, fraction: float, sizes: np.ndarray | None = None, budget: int | None = None
) -> np.ndarray:
    """Rows to re-encode, in row order: those whose uint64 shuffle key (a hash of the document's
    stable id) falls in the lowest `fraction` of its low bits; when none does, row 0 (the
    shortest row, given `sizes`), so that every task checks at least one document (unless the
    fraction or the budget is 0).

    With `sizes` (text bytes of each row) and a byte `budget`, only as many of them as fit the
    budget, lowest key bits first (a document larger than what is left is passed over); when
    none fits, the shortest of them. A property of the documents: the same rows whatever the
    workers."""
    if len(keys) == 0 or fraction <= 0 or budget == 0:
        return np.empty(0, np.int64)
    low = keys.astype(np.uint64) % np.uint64(SAMPLE_SCALE)
    chosen = np.flatnonzero(low < np.uint64(max(1, round(fraction * SAMPLE_SCALE))))
    if sizes is not None:
        sizes = np.asarray(sizes, np.int64)
    if not len(chosen):  # the shortest document where sizes are known: the cheapest check
        chosen = np.array([0 if sizes is None else int(np.argmin(sizes))], np.int64)
    if sizes is None or budget is None:
        return chosen
    ranked = chosen[np.argsort(low[chosen], kind="stable")]
    kept, left = [], int(budget)
    for row in ranked.tolist():  # a few hundred rows at most
        if sizes[row] <= left:
            kept.append(row)
            left -= int(sizes[row])
    if not kept:
        kept = [int(chosen[np.argmin(sizes[chosen])])]
    return np.array(sorted(kept), np.int64)


def compare_engines(
    reference: Encoder, encoder: Encoder, texts: list[str], names: list[str]
) -> str | None:
    """The probe: None when both engines give the same ids for every text, else a line naming
    the first differing document and position."""
    ref = reference.encode_flat(texts)
    got = encoder.encode_flat(texts)
    diff = first_difference(*ref, *got)
    if diff is None:
        return None
    doc, pos = diff
    return describe(doc, pos, names[doc], ref, got, encoder.name)


def hard_strings(special_tokens: list[str]) -> list[tuple[str, str]]:
    """(name, text) pairs that tokenizers get wrong in different ways; the special tokens' text
    is placed inside prose, at the start, at the end, and glued to words."""
    cases = {
        "cjk": "漢字かなカナ한국어 中文文本，标点。日本語の文章です。",
        "emoji-zwj": "family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 keycap 1️⃣ rainbow 🏳️‍🌈",
        "combining": "e\u0301 a\u0308 n\u0303 Z\u0351\u0334\u0335a\u0317\u0318lgo \u1e9b\u0323",
        "rtl": "English عربي עברית mixed \u202eevil\u202c \u200fmark\u200e fin",
        "control": "nul\x00tab\tbell\x07esc\x1b[0mform\x0cvt\x0bcr\r\nend\x7f\x85",
        "long-word": "a" * 5000 + " " + "xyz" * 3000,
        "long-line": ("lorem ipsum dolor sit amet " * 800).strip(),
        "whitespace": " " * 3000 + "\t" * 500 + "\n" * 500 + "\u00a0\u2003\u3000" * 100,
        "digits": "1234567890" * 500 + " 3.14159e-10 0x1F -42 1,000,000",
        "code": (
            "def f(x: int) -> int:\n    return x ** 2  # square\n\n"
            "int main(void) { printf(\"%d\\n\", 42); return 0; }\n"
            "fn main() { let v: Vec<u8> = vec![1, 2]; }\n<div class=\"a\">&amp;</div>\n"
        ),
        "surrogate-range": "\ud7ff\ue000\uffff\U0001f600\U0010ffff",
        "mixed-case": "HTTPServer getHTTPResponseCode iPhone McDonald's don't I'M",
        "empty": "",
        # SentencePiece/Unigram vocabularies hold these as pieces: the model itself may pick
        # them from text even where added-token matching is off (x</s>y -> ▁ x </s> y)
        "sentencepiece-pieces": "x</s>y <s>z</s> <unk> \u2581x\u2581</s>\u2581 a\u2581\u2581b </s",
    }
    out = list(cases.items())
    for token in special_tokens:
        out += [
            (f"special-in-prose {token}", f"The end {token} and a new start."),
            (f"special-edges {token}", f"{token}begin{token}middle {token}{token} end{token}"),
            (f"special-alone {token}", token),
            (f"special-partial {token}", token[:-1] + " " + token[1:]),
        ]
    return out

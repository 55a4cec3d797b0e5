"""The compiled measures (curate/measures.py) are curate/text.py's, and the steps that use
them over a batch give, document for document, the reasons of their plain per-document
definitions (`judge`): on ASCII and non-ASCII text, empty and whitespace-only documents,
every whitespace str.split knows, and documents on both sides of the thresholds."""

from __future__ import annotations

import random
import re

import pyarrow as pa
import pytest

from pipeline.curate import measures
from pipeline.curate import text as t
from pipeline.curate.base import REGISTRY

pytestmark = pytest.mark.skipif(not measures.available(), reason="numba is not installed")

SPACES = [chr(c) for c in range(0x110000) if chr(c).isspace()]
PIECES = (
    ["the", "of", "and", "with", "to", "The", "THE", "word", "é", "naïve", "日本", "x", "#", "...",
     "…", "•", "-", "*", "‣", "'the'", "(to)", "“of”", "1234", "a.b", "!", "?", ".", "”", "’",
     "\U0001f600", "İ", "\u212a"]
    + [" "] * 12 + ["\n"] * 6 + ["\n\n", " \n \n", "\r\n", "\t"] + SPACES
)  # fmt: skip


def random_texts(rng: random.Random, count: int, ascii_only: bool = False) -> list[str]:
    pieces = [p for p in PIECES if p.isascii()] if ascii_only else PIECES
    texts = ["", " ", "\n\n\n", " \t\u3000\n", "word", "- a\n- a\n"]
    for _ in range(count):
        chosen = [rng.choice(pieces) for _ in range(rng.randint(0, 120))]
        texts.append("".join(chosen))
    return texts


def spans(m: measures.Measured, items: measures.Items, doc: int) -> list[str]:
    a, b = items.first[doc], items.first[doc + 1]
    return [bytes(m.data[s:e]).decode() for s, e in zip(items.starts[a:b], items.ends[a:b],
                                                         strict=True)]  # fmt: skip


def test_space_table_is_str_isspace_and_re_whitespace():
    assert [chr(c) for c in range(len(measures.SPACE)) if measures.SPACE[c]] == SPACES
    assert all(re.fullmatch(r"\s", c) for c in SPACES)


def test_letter_table_is_str_isalpha():
    table = measures._alpha()
    assert len(table) == 0x110000
    points = [*range(0x10000), *range(0x10000, 0x110000, 7)]
    assert table[points].tolist() == [chr(c).isalpha() for c in points]


def test_words_lines_and_paragraphs_are_text_pys():
    texts = random_texts(random.Random(0), 400)
    m = measures.measure(pa.array(texts, pa.string()))
    lines, paras = m.lines(), m.paragraphs()
    for d, text in enumerate(texts):
        assert spans(m, m.words, d) == t.words(text), text
        assert spans(m, lines, d) == t.lines(text), text
        assert spans(m, paras, d) == t.paragraphs(text), text
        a, b = m.words.first[d], m.words.first[d + 1]
        assert m.words.cps[a:b].tolist() == list(map(len, t.words(text)))
        assert lines.cps[lines.first[d] : lines.first[d + 1]].tolist() == list(
            map(len, t.lines(text)))  # fmt: skip
        assert m.newlines[d] == text.count("\n")
        dup, dup_chars, chars = m.duplicates(lines)[d]
        assert (dup, dup_chars, chars) == (*t.duplicates(t.lines(text)),
                                           sum(map(len, t.lines(text))))  # fmt: skip


@pytest.mark.parametrize("name", ["gopher_quality", "gopher_repetition", "fineweb_quality"])
@pytest.mark.parametrize("ascii_only", [True, False])
def test_batch_reasons_are_the_per_document_reasons(name, ascii_only):
    rng = random.Random(1)
    texts = random_texts(rng, 300, ascii_only)
    # documents near each default threshold: many short lines, repeats, bullets, ellipses
    line = "the cat sat with the dog and that was good to see."
    texts += ["\n".join([line] * k + [f"{line} {i}" for i in range(10 - k)]) for k in range(8)]
    texts += ["\n".join(["- " + line] * k + [line] * (10 - k)) for k in range(8, 11)]
    texts += ["\n".join([line + "..."] * k + [line] * (10 - k)) for k in range(2, 5)]
    texts += [(line + " ") * 4 + "#" * k for k in range(3, 8)]
    texts += [" ".join(["the", "of"] * k + [f"w{i}" for i in range(40)]) for k in range(30)]
    cls = REGISTRY[name]
    step = cls(cls.Params())
    table = pa.table({"text": pa.chunked_array([texts[:100], texts[100:]], pa.string())})
    assert step(table).why == [step.judge(x) for x in texts]
    # and where bounds make the later rules decide
    loose = {"gopher_quality": {"min_words": 0, "max_mean_word_length": 100},
             "gopher_repetition": {"max_dup_lines": 1.0, "max_dup_paragraphs": 1.0},
             "fineweb_quality": {"min_punct_lines": 0.0, "max_short_lines": 1.0}}[name]  # fmt: skip
    step = cls(cls.Params(**loose))
    got = step(table).why
    assert got == [step.judge(x) for x in texts]
    assert len(set(got)) > 3  # several rules decide


@pytest.mark.parametrize("name", ["gopher_quality", "gopher_repetition", "fineweb_quality"])
def test_batch_reasons_hold_across_batches_sharing_buffers(name, monkeypatch):
    """Many batches of a few hundred bytes, larger and smaller than the first: each writes its
    words over the previous one's."""
    monkeypatch.setattr(measures, "BATCH_BYTES", 300)
    texts = random_texts(random.Random(6), 200)
    texts[10] = "the cat sat with the dog. " * 200  # a batch larger than the buffers so far
    cls = REGISTRY[name]
    step = cls(cls.Params())
    assert len(list(measures.batches(pa.array(texts)))) > 20
    assert step(pa.table({"text": texts})).why == [step.judge(x) for x in texts]


def test_gopher_quality_stop_words_lower_as_python_does():
    """A stop word holding "k" matches a word with U+212A (KELVIN SIGN), which lowers to "k";
    "İ" lowers to two characters and matches nothing; each stop word counts once."""
    cls = REGISTRY["gopher_quality"]
    loose = {"min_words": 0, "min_mean_word_length": 0, "max_ellipsis_word_ratio": 1.0,
             "max_ellipsis_lines": 1.0, "min_alpha_words": 0.0}  # fmt: skip
    step = cls(cls.Params(**loose, min_stop_words=3, stop_words=("ok", "k", "i", "the")))
    texts = ["o\u212a \u212a x", "\u212a ok (O\u212a) the", "İ i the", "“the” «ok» k…",
             "the the the (the) ok"]
    texts += random_texts(random.Random(2), 300)
    table = pa.table({"text": texts})
    got = step(table).why
    assert got == [step.judge(x) for x in texts]
    assert got[:5] == ["stop_words=2 < 3", None, "stop_words=2 < 3", None, "stop_words=2 < 3"]


def test_gopher_quality_judges_in_python_only_stop_words_it_cannot_pack(monkeypatch):
    cls = REGISTRY["gopher_quality"]
    judged = []
    plain = cls.judge
    monkeypatch.setattr(cls, "judge", lambda self, x: judged.append(x) or plain(self, x))
    texts = ["the cat and the dog. " * 20, "naïve the of and to " * 20, ""]
    for stop_words, python in ((STOP, []), ((*STOP, "naïve"), texts), ((*STOP, "although"), texts)):
        step = cls(cls.Params(stop_words=stop_words))
        judged.clear()
        assert step(pa.table({"text": texts})).why == [plain(step, x) for x in texts]
        assert judged == python


STOP = ("the", "be", "to", "of", "and", "that", "have", "with")

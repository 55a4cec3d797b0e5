"""A chain's Gopher, FineWeb and C4 filters share one DocStats per batch (curate/doc_stats.py):
the text is scanned once for all of them, a removed document is never measured again, a
rewritten one is measured again, and every decision, reason and text is the one each step
gives alone, document by document (`judge`, `rewrite`); the fast paths of C4, of the n-gram
rules and of PII give their plain definitions' answers at the edges."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from pipeline.curate import chain, measures, ngram_kernel
from pipeline.curate.gopher import DUPLICATED, REPEATED, TOP, NGrams

pytestmark = pytest.mark.skipif(not measures.available(), reason="numba is not installed")

SHARED = ["gopher_repetition", "gopher_quality", "c4", "fineweb_quality"]
LINE = "The cat sat with the dog and that was good to see, said the man of the house."


PIECES = ["the", "of", "and", "The", "word", "é", "naïve", "日本", "#", "...", "…", "•", "-",
          "'the'", "“of”", "a.b", "!", "?", ".", "{", "\U0001f600", "İ", "\u212a", "lorem",
          "ipsum", " ", " ", " ", "\n", "\n", "\n\n", " \n \n", "\t", "\u3000", "\xa0"]


def random_texts(rng: random.Random, count: int) -> list[str]:
    texts = ["", " ", "\n\n\n", " \t\u3000\n", "word", "- a\n- a\n"]
    return texts + ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 120)))
                    for _ in range(count)]  # fmt: skip


def docs_of(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table({"doc_id": [f"d{i}" for i in range(n)], "source": ["s"] * n,
                     "row": list(range(n)), "text": texts})  # fmt: skip


def corpus(seed: int) -> list[str]:
    """Random pieces (empty, whitespace-only, non-ASCII), and pages near the thresholds: kept
    prose, repeated lines, bullets, e-mail and IP addresses, braces, few sentences."""
    rng = random.Random(seed)
    texts = random_texts(rng, 150)
    def word() -> str:
        return "".join(rng.choice("abcdefghijklmnoprstuvwy") for _ in range(rng.randint(2, 8)))

    prose = [" ".join([word() for _ in range(9)] + ["of", "the", word()]) + "." for _ in range(60)]
    for k in range(40):
        lines = rng.sample(prose, 12)
        lines[: k % 6] = [lines[0]] * (k % 6)  # some repeated lines
        if k % 5 == 0:
            lines.append(f"Write to user{k}@mail.example.org or 8.8.{k}.4 or 2001:4860::{k:x}.")
        if k % 7 == 0:
            lines.append("- a bullet\n- another bullet\n- " + LINE)
        if k % 9 == 0:
            lines.append("code { here }")
        texts.append("\n".join(lines) + ("\n\n" + LINE) * (k % 3))
    for k in range(6):  # short lines (FineWeb), "#" (Gopher quality), no stop word (Gopher)
        texts.append("\n".join([f"{word()} of the {word()}." for _ in range(20)] + prose[k:k + 2]))
        texts.append("\n".join(f"{x} #{word()}" for x in prose[k : k + 12]))
        texts.append(" ".join(word() for _ in range(80)) + ". A b. C d. E f. G h.")
    texts += ["\u3000".join([LINE] * 8), "naïve café résumé " * 30 + ". ok!", LINE * 3]
    return texts


def one_by_one(names: list[str], texts: list[str]) -> tuple[list, list[str]]:
    """Each step's own decision on the documents the steps before it kept: (removals as
    (row, rule, reason), texts kept), from judge and rewrite."""
    steps = chain.build(chain.parse([{n: {}} for n in names]))
    rows, removed = list(range(len(texts))), []
    texts = list(texts)
    for step in steps:
        if step.kind == "transform":
            texts = [step.rewrite(x, Counter()) for x in texts]
            continue
        why = [step.judge(x) for x in texts]
        removed += [(r, step.name, w) for r, w in zip(rows, why, strict=True) if w is not None]
        rows = [r for r, w in zip(rows, why, strict=True) if w is None]
        texts = [x for x, w in zip(texts, why, strict=True) if w is None]
    return sorted(removed), texts


def counting_measures(monkeypatch) -> list[int]:
    """The number of documents each measuring pass reads, in order."""
    passes: list[int] = []
    measured = measures.measured

    def spy(texts, *args, **kwargs):
        passes.append(len(texts))
        return measured(texts, *args, **kwargs)

    monkeypatch.setattr(measures, "measured", spy)
    return passes


@pytest.mark.parametrize(
    "order", [SHARED, SHARED[::-1], ["c4", "pii", *SHARED[:2], "fineweb_quality"]]
)
def test_a_shared_chain_decides_as_each_step_alone(order):
    texts = corpus(3)
    out = chain.apply(chain.build(chain.parse([{n: {}} for n in order])), docs_of(texts))
    removed, kept = one_by_one(order, texts)
    assert sorted(zip(out.removed["row"].to_pylist(), out.removed["rule"].to_pylist(),
                      out.removed["detail"].to_pylist(), strict=True)) == removed  # fmt: skip
    assert out.kept["text"].to_pylist() == kept
    assert len(set(out.removed["rule"].to_pylist())) == len([n for n in order if n != "pii"])


def test_the_text_is_scanned_once_for_every_shared_filter(monkeypatch):
    texts = corpus(4)
    passes = counting_measures(monkeypatch)
    out = chain.apply(chain.build(chain.parse([{n: {}} for n in SHARED])), docs_of(texts))
    assert out.removed.num_rows and out.kept.num_rows
    assert passes == [len(texts)]  # one pass, the n-gram rules' included


def test_removed_documents_are_not_measured_again_and_rewritten_ones_are(monkeypatch):
    """gopher_repetition measures the batch; pii then rewrites some of the documents it kept:
    those only are measured again, for the filters after it."""
    texts = corpus(5)
    names = ["gopher_repetition", "pii", "gopher_quality", "fineweb_quality"]
    steps = chain.build(chain.parse([{n: {}} for n in names]))
    passes = counting_measures(monkeypatch)
    out = chain.apply(steps, docs_of(texts))
    changed = out.changed_by_rule["pii"]
    assert 0 < changed < out.kept.num_rows
    assert passes == [len(texts), changed]
    removed, kept = one_by_one(names, texts)
    assert out.kept["text"].to_pylist() == kept
    assert sorted(zip(out.removed["row"].to_pylist(), out.removed["detail"].to_pylist(),
                      strict=True)) == [(r, w) for r, _, w in removed]  # fmt: skip


def test_no_pass_after_the_last_step_that_reads_the_numbers(monkeypatch):
    texts = corpus(6)
    passes = counting_measures(monkeypatch)
    out = chain.apply(chain.build(chain.parse([{"fineweb_quality": {}}, {"pii": {}}])),
                      docs_of(texts))  # fmt: skip
    assert out.changed_by_rule["pii"] > 0
    assert passes == [len(texts)]


def test_empty_and_blank_batches():
    steps = chain.build(chain.parse([{n: {}} for n in [*SHARED, "pii"]]))
    for texts in ([""], [" ", "\n\n", "\u3000"], ["", "x"]):
        out = chain.apply(steps, docs_of(texts))
        removed, kept = one_by_one([*SHARED, "pii"], texts)
        assert out.kept["text"].to_pylist() == kept
        assert sorted(zip(out.removed["row"].to_pylist(), out.removed["detail"].to_pylist(),
                          strict=True)) == [(r, w) for r, _, w in removed]  # fmt: skip


def test_c4_sentence_ends_lorem_ipsum_and_braces_at_their_edges(tmp_path):
    """Sentence ends before every whitespace str.isspace knows, and at the end; "lorem ipsum"
    in any case, and the letters Arrow's case folding takes for one (ſ, K) but lower() does
    not; a brace anywhere; the bad-word list."""
    words = tmp_path / "bad.txt"
    words.write_text("badword\nvery bad phrase\n")
    spaces = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    texts = ["a." + s + "b!" + s + "c?" + s + "d...e. f.!?" for s in spaces]
    texts += ["One. Two! Three? Four. Five.", "One. Two! Three? Four. Five", "x.y.z. a!b ?"]
    texts += ["LoReM IpSuM. " * 5, "lorem ipſum. " * 5, "lorem  ipsum. " * 5, "İorem ipsum."]
    texts += ["x{. " * 5, "a very bad phrase. " * 5, "Badword. " * 5, "badwords. " * 5, ""]
    for params in ({}, {"min_sentences": 2}, {"bad_words_file": str(words)},
                   {"drop_lorem_ipsum": False, "drop_curly_bracket": False}):  # fmt: skip
        (c4,) = chain.build(chain.parse([{"c4": params}]))
        assert c4(docs_of(texts)).why == [c4.judge(x) for x in texts], params


def test_ngram_rules_stop_early_with_the_same_answers():
    """Duplicated rules whose bounds fall with n, so that a fraction under every later bound
    ends the search: the answers are the numpy path's."""
    rng = random.Random(7)
    vocab = ["a", "bb", "ccc", "the", "of", "q"]
    docs = [[rng.choice(vocab[: rng.randint(1, 6)]) for _ in range(rng.randint(0, 60))]
            for _ in range(300)]  # fmt: skip
    grams = [NGrams(words) for words in docs]
    ids = np.concatenate([g.ids for g in grams])
    lengths = np.concatenate([g.lengths for g in grams])
    first = np.cumsum([0] + [len(words) for words in docs])
    todo = np.ones(len(docs), np.bool_)
    for bounds, kind in itertools.product(
        ([0.9, 0.7, 0.5, 0.4, 0.3, 0.2], [0.3] * 6, [0.2, 0.4, 0.6, 0.8, 0.9, 0.95]),
        (DUPLICATED, REPEATED),
    ):  # fmt: skip
        rules = [(2, TOP, 0.6)] + [(n, kind, b) for n, b in zip(range(5, 11), bounds,
                                                                strict=True)]  # fmt: skip
        got = ngram_kernel.first_exceeded_batch(ids, lengths, first, todo, rules)
        want = [_numpy_answer(g, rules) for g in grams]
        assert list(zip(*got, strict=True)) == want, (bounds, kind)


def _numpy_answer(grams: NGrams, rules) -> tuple[int, float]:
    for r, (n, kind, bound) in enumerate(rules):
        value = grams.top_fraction(n) if kind == TOP else grams.duplicated_fraction(
            n, first_too=kind == DUPLICATED)
        if value > bound:
            return r, value
    return -1, 0.0


def test_pii_looks_for_addresses_an_earlier_replacement_made():
    """A document without an IP hint is searched for addresses once an e-mail placeholder
    has put one there (a placeholder is any string): as rewrite does."""
    texts = ["mail a@b.org now", "mail a@b.org or 8.8.8.8", "no address", "x@y.io:a::"]
    for params in ({}, {"email_placeholder": "8.8.4.4"}, {"email_placeholder": "::2001:4860::1"},
                   {"ipv4_placeholder": "2001:4860::8", "email_placeholder": "1.1.1.1"}):
        (step,) = chain.build(chain.parse([{"pii": params}]))
        spans: Counter = Counter()
        want = [step.rewrite(x, spans) for x in texts]
        out = step(docs_of(texts))
        assert out.texts.to_pylist() == want, params
        assert out.spans == spans


def test_word_classes_only_for_the_documents_the_first_filter_keeps(monkeypatch):
    """gopher_repetition measures the batch for gopher_quality too, but the word classes (a
    pass over every word) only of the documents it keeps: the others are removed next."""
    texts = corpus(8)
    classified: list[int] = []
    word_classes = measures.Measured.word_classes

    def spy(self, classes, todo=None):
        classified.append(len(self.offsets) - 1 if todo is None else int(todo.sum()))
        return word_classes(self, classes, todo)

    monkeypatch.setattr(measures.Measured, "word_classes", spy)
    names = ["gopher_repetition", "gopher_quality"]
    out = chain.apply(chain.build(chain.parse([{n: {}} for n in names])), docs_of(texts))
    kept_by_first = len(texts) - out.removed_by_rule["gopher_repetition"]
    assert 0 < kept_by_first < len(texts)
    assert sum(classified) == kept_by_first
    removed, kept = one_by_one(names, texts)
    assert out.kept["text"].to_pylist() == kept

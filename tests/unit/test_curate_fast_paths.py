"""The curation steps' fast paths give what their plain definitions give: the compiled language
model and fastText, the compiled n-gram rules and the numpy ones, the e-mail search anchored at
"@" and the regex's own scan, the IP hints and the IP regexes; and `bench curate` prints the
language step's opt-in prefix with its agreement against the whole text."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from pipeline.bench import curate as bench
from pipeline.curate import language, lid_kernel, ngram_kernel, pii
from pipeline.curate.gopher import DUPLICATED, REPEATED, TOP, NGrams
from pipeline.curate.language import _model, identify, model_path


def random_words(rng: random.Random) -> list[str]:
    """Few distinct words, so that n-grams repeat and frequencies tie."""
    vocab = ["a", "bb", "ccc", "the", "of", "xyzzy", "q"][: rng.randint(1, 7)]
    return [rng.choice(vocab) for _ in range(rng.randint(0, 40))]


@pytest.mark.skipif(not ngram_kernel.available(), reason="numba is not installed")
def test_compiled_ngram_rules_give_the_numpy_fractions():
    rng = random.Random(0)
    for _ in range(300):
        grams = NGrams(random_words(rng))
        for n in range(1, 11):
            for kind, numpy_value in ((TOP, grams.top_fraction(n)),
                                      (DUPLICATED, grams.duplicated_fraction(n, first_too=True)),
                                      (REPEATED, grams.duplicated_fraction(n))):  # fmt: skip
                # bound -1: every fraction exceeds it, so the kernel returns its value
                rule, value = ngram_kernel.first_exceeded(
                    grams.ids, grams.lengths, [(n, kind, -1.0)]
                )
                assert (rule, value) == (0, numpy_value), (grams.ids, n, kind)


@pytest.mark.skipif(not ngram_kernel.available(), reason="numba is not installed")
def test_compiled_ngram_rules_stop_at_the_first_rule_exceeded():
    words = ["one", "two", "one", "two", "one", "two", "one", "two", "three", "four"]
    rules = [(2, TOP, 0.9), (2, DUPLICATED, 0.5), (3, TOP, 0.0)]
    grams = NGrams(words)
    assert ngram_kernel.first_exceeded(grams.ids, grams.lengths, rules) == (
        1, grams.duplicated_fraction(2, first_too=True))  # fmt: skip
    repeats = [(2, TOP, 0.9), (2, REPEATED, 0.5), (2, REPEATED, 0.4), (3, TOP, 0.0)]
    # the repeats of "one two" after its first occurrence: words 2..7, 18 of 33 characters
    assert ngram_kernel.first_exceeded(grams.ids, grams.lengths, repeats) == (1, 18 / 33)
    assert grams.duplicated_fraction(2) == 18 / 33
    assert ngram_kernel.first_exceeded(grams.ids, grams.lengths, rules[:1]) == (-1, 0.0)


def test_email_search_at_each_at_sign_finds_the_regex_matches():
    rng = random.Random(1)
    pieces = list("ab.@_%+-x1 \n:eE9") + ["a@b.co", "x.y@q-r.org", "@@", "..", "é", "_@_"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert [m.span() for m in pii._emails(text)] == [
            m.span() for m in pii.EMAIL.finditer(text)
        ], text


@pytest.mark.skipif(not ngram_kernel.available(), reason="numba is not installed")
def test_batched_ngram_rules_give_the_per_document_answers():
    """One call for a batch, each level tallying only where the level below repeats: the
    per-document kernel's rule and value, for every rule order (n going down resets)."""
    rng = random.Random(4)
    docs = [random_words(rng) for _ in range(400)] + [[], ["a"], ["a", "a"]]
    grams = [NGrams(words) for words in docs]
    ids = np.concatenate([g.ids for g in grams])
    lengths = np.concatenate([g.lengths for g in grams])
    first = np.cumsum([0] + [len(words) for words in docs])
    default = [(2, TOP, 0.5), (3, TOP, 0.45), (4, TOP, 0.4)]
    default += [(n, DUPLICATED, 1.5 - n / 10) for n in range(5, 11)]
    seen = set()
    repeats = [(n, REPEATED if k == DUPLICATED else k, b) for n, k, b in default]
    every = [(n, k, -1.0) for n in (1, 3, 2, 10) for k in (TOP, DUPLICATED, REPEATED)]
    for rules in (default, default[::-1], repeats, repeats[::-1], every):
        todo = np.array([i % 5 != 0 for i in range(len(docs))])
        want = [ngram_kernel.first_exceeded(g.ids, g.lengths, rules) if t else (-1, 0.0)
                for g, t in zip(grams, todo, strict=True)]  # fmt: skip
        got = ngram_kernel.first_exceeded_batch(ids, lengths, first, todo, rules)
        assert list(zip(*got, strict=True)) == want
        seen |= {r for r, _ in want}
    assert len(seen) > 5  # several rules decide


def test_ip_search_at_each_hint_finds_the_regex_matches():
    rng = random.Random(3)
    pieces = list("0123456789.:aAfF x_-@\n") + [
        "1.2.3.4", "::1", "fe80::", "9.9.9", "2001:db8", "١", "٢.", "8.8.8.8", "1234.5.6.7",
        "1:2:3:4:5:6:7:8", "::", "a@b.co", "é", ".1.2", "ff:ff:"]  # fmt: skip
    found = 0
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        for regex, hint, back in ((pii.IPV4, pii._IPV4_HINT, 3), (pii.IPV6, pii._IPV6_HINT, 4)):
            want = [m.span() for m in regex.finditer(text)]
            assert [m.span() for m in pii._anchored(text, regex, hint, back)] == want, text
            found += len(want)
    assert found > 1000


def test_pii_batch_rewrites_only_candidates_and_gives_rewrites_texts():
    rng = random.Random(5)
    pieces = ["1.2.3.4", "8.8.8.8", "2001:4860::8888", "::1", "x@y.org", "a", " ", "\n", "١.٢.٣.٤",
              "10:30:45", "é", ".", ":"]  # fmt: skip
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(600)]
    for params in ({}, {"email": False}, {"ip": False}, {"email": False, "ip": False}):
        step = pii.Pii(pii.PiiParams(**params))
        spans = Counter()
        plain = [step.rewrite(x, spans) for x in texts]
        out = step(pa.table({"text": pa.chunked_array([texts[:250], texts[250:]])}))
        assert out.texts.to_pylist() == plain and out.spans == spans
        assert out.changed == sum(a != b for a, b in zip(texts, plain, strict=True))
    assert spans == Counter() and sum(Counter(pii.Pii(pii.PiiParams())(
        pa.table({"text": texts})).spans).values()) > 100  # fmt: skip


def test_ip_hints_hold_in_every_text_the_ip_regexes_match():
    rng = random.Random(2)
    pieces = list("0123456789.:aAfF x") + ["1.2.3.4", "::1", "fe80::", "9.9.9", "2001:db8"]
    matched = 0
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        for regex, hint in ((pii.IPV4, pii._IPV4_HINT), (pii.IPV6, pii._IPV6_HINT)):
            if regex.search(text):
                matched += 1
                assert hint.search(text), text
    assert matched > 100  # the texts do hold addresses


def test_bench_curate_prints_the_language_prefix_and_its_agreement(tmp_path, capsys):
    texts = [
        "The cat sat on the mat and looked at the garden for a long while. " * 3,
        "Le chat est assis sur le tapis. " * 2 + "The dog runs in the park every morning. " * 6,
        "Der Hund läuft jeden Morgen im Park und bellt die Vögel an. " * 4,
    ]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    figures = bench.main(["--input", str(corpus), "--repeat", "1", "--language-max-chars", "40"])
    row = figures["steps"]["language[:40]"]

    def keeps(text, chars):
        lang, score = identify(text, chars)
        return lang == "en" and score >= 0.65

    whole, prefix = [keeps(t, 100_000) for t in texts], [keeps(t, 40) for t in texts]
    assert whole != prefix  # the French opening decides the prefix of the second text
    assert row["agreement"] == sum(a == b for a, b in zip(whole, prefix, strict=True)) / 3
    assert row["removed"] == prefix.count(False)
    assert "language[:40]" in capsys.readouterr().out


def test_compiled_language_model_gives_fasttexts_labels_and_scores():
    compiled = lid_kernel.load(model_path(), _model().f)
    if compiled is None:
        pytest.skip("numba is not installed")
    rng = random.Random(3)
    pieces = ["the", "cat", "und", "der", "ça", "été", "лиса", "собака", "狐狸", "日本語", "🙂"]
    pieces += ["__label__fr", "</s>", "x", " ", " ", "\t", "\r", "\x0b", "\x0c", "\x00", "-"]
    for _ in range(300):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))) + "\n"
        ((score, label),) = _model().f.predict(line, 1, 0.0, "replace")
        assert compiled.predict(line) == (label, float(score)), repr(line)


@pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")
def test_language_step_uses_the_compiled_model_where_numba_runs():
    assert isinstance(getattr(language._predict(), "__self__", None), lid_kernel.Predictor)


def test_bench_curate_compares_with_an_implementation_that_can_disagree(tmp_path, capsys,
                                                                         monkeypatch):
    """`restated` restates the same definitions (1.0 expected); `datatrove` is datatrove's
    filters, where installed: lines ending in ". " (a trailing space) end in punctuation for
    the step (lines are stripped), not for datatrove, so they disagree on that page."""
    page = "\n".join(f"this is line number {i} of a page about rivers and mills. "
                     for i in range(12))  # fmt: skip
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"text": page}) + "\n" + json.dumps({"text": "short"}) + "\n")
    args = ["--input", str(corpus), "--repeat", "1", "--language-max-chars", "0"]
    if bench.datatrove_filters() is not None:
        figures = bench.main(args)
        row = figures["steps"]["fineweb_quality"]
        assert row["restated"] == 1.0 and row["datatrove"] == 0.5
        assert row["datatrove_disagree"] == {"kept / line_punct_ratio": 1}
        assert "disagree fineweb_quality: kept / line_punct_ratio: 1" in capsys.readouterr().out
    monkeypatch.setattr(bench, "datatrove_filters", lambda: None)
    figures = bench.main(args)
    assert figures["datatrove"] is False and figures["steps"]["c4"]["datatrove"] is None
    assert bench.PAPER_C4 not in figures["steps"]
    assert figures["steps"]["c4"]["restated"] == 1.0
    assert "datatrove not installed" in capsys.readouterr().out


def test_bench_curate_compares_c4_as_the_paper_runs_it(tmp_path):
    """The `c4_lines+c4` row: C4's line rules, then its page rules, against datatrove's C4
    with its line rules on. Lines ending in a quote without . ! ? are kept by both; they hold
    no sentence end for `c4` and one sentence each for datatrove's per-line count."""
    if bench.datatrove_filters() is None:
        pytest.skip("datatrove is not installed (the bench extra)")
    quoted = "\n".join(f'the sign on mill {i} said "closed for the winter"' for i in range(6))
    prose = "\n".join(f"the river turns mill number {i} all year." for i in range(6))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in (quoted, prose)))
    figures = bench.main(["--input", str(corpus), "--repeat", "1", "--language-max-chars", "0"])
    row = figures["steps"][bench.PAPER_C4]
    assert row["removed"] == 1 and row["datatrove"] == 0.5
    assert row["datatrove_disagree"] == {"sentences / kept": 1}

"""Each built-in curation step on both sides of each of its thresholds, from the published
definitions (pipeline/curate/: Gopher, C4, FineWeb, length, PII, language, decontamination,
block lists, your own step)."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest

from pipeline.curate import chain
from pipeline.curate.base import REGISTRY
from pipeline.curate.user import CurationError

# mean word length 3
WORDS = ["the", "cat", "sat", "with", "the", "dog", "and", "that", "was", "good", "to", "see"]


def step(name: str, **params):
    cls = REGISTRY[name]
    return cls(cls.Params(**params))


def prose(n_words: int, per_line: int = 12) -> str:
    """Plain English-like text of n words: every line a sentence ending in a period."""
    words = [WORDS[i % len(WORDS)] + ("." if (i + 1) % per_line == 0 else "")
             for i in range(n_words)]  # fmt: skip
    lines = [" ".join(words[i : i + per_line]) for i in range(0, n_words, per_line)]
    return "\n".join(lines).rstrip(".") + "."


def unique_prose(n_lines: int) -> str:
    """Lines that never repeat: each carries its own number word."""
    return "\n".join(f"the cat number{i} sat with the dog and that was good."
                     for i in range(n_lines))  # fmt: skip


# -- Gopher quality --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (prose(50), None),
        (prose(49), "words=49 < 50"),
        (prose(100_001, per_line=100_001), "words=1e+05 > 1e+05"),
        ("the of and with " * 13 + "ab " * 50, "mean_word_length=2.51 < 3"),
        ("the of and with " * 5 + "abcdefghijkl " * 80, "mean_word_length=10.2 > 10"),
        (prose(100) + " #" * 10, None),
        (prose(100) + " #" * 12, "hash_word_ratio=0.107 > 0.1"),
        (prose(100) + " ..." * 12, "ellipsis_word_ratio"),
        ("\n".join(["- " + prose(12)] * 9 + [prose(12)]), None),
        ("\n".join(["- " + prose(12)] * 10 + [prose(12)]), "bullet_lines=0.909 > 0.9"),
        ("\n".join([prose(12) + ".."] * 3 + [prose(12)] * 7), None),
        ("\n".join([prose(12) + ".."] * 4 + [prose(12)] * 6), "ellipsis_lines=0.4 > 0.3"),
        (prose(80) + " 1234" * 20, None),
        (prose(80) + " 1234" * 21, "alpha_words=0.792 < 0.8"),
        ("cats dogs sits runs " * 12 + "the to", None),
        ("cats dogs sits runs " * 12 + "the thing", "stop_words=1 < 2"),
    ],
)
def test_gopher_quality(text, reason):
    got = step("gopher_quality").judge(text)
    assert (got is None) if reason is None else (got is not None and got.startswith(reason)), got


# -- Gopher repetition -----------------------------------------------------------------------
NO_NGRAMS = {"max_top_ngram_chars": {}, "max_dup_ngram_chars": {}}


def test_gopher_repetition_lines_by_count():
    base = unique_prose(7)
    keep = base + "\n" + "\n".join(["same line here."] * 4)  # 3 repeats of 11 lines: 0.27
    drop = base + "\n" + "\n".join(["same line here."] * 5)  # 4 of 12: 0.33
    g = step("gopher_repetition", max_dup_line_chars=1.0, max_dup_paragraph_chars=1.0,
             **NO_NGRAMS)
    assert g.judge(keep) is None
    assert g.judge(drop).startswith("dup_lines=0.333 > 0.3")


def test_gopher_repetition_line_characters():
    g = step("gopher_repetition", max_dup_lines=1.0, max_dup_paragraphs=1.0, **NO_NGRAMS)
    long = "x" * 200 + " the end."
    # one repeat of a 209-char line in 209 + 209 + 900 chars: 0.159 keeps; 2 repeats: 0.275
    filler = "\n".join(f"line {i} of plain words that are all different here." for i in range(18))
    assert g.judge(f"{long}\n{long}\n{filler}") is None
    got = g.judge(f"{long}\n{long}\n{long}\n{filler}")
    assert got.startswith("dup_line_chars=") and got.endswith("> 0.2")


def test_gopher_repetition_paragraphs():
    g = step("gopher_repetition", max_dup_lines=1.0, max_dup_line_chars=1.0,
             max_dup_paragraph_chars=1.0, **NO_NGRAMS)  # fmt: skip
    paras = [f"paragraph {i} says one thing." for i in range(7)]
    assert g.judge("\n\n".join(paras + ["again and again."] * 4)) is None  # 3 of 11
    assert g.judge("\n\n".join(paras + ["again and again."] * 5)).startswith("dup_paragraphs")


def test_gopher_repetition_top_ngram():
    g = step("gopher_repetition", max_top_ngram_chars={2: 0.2}, max_dup_ngram_chars={})
    # "aa bb" (4 chars) 5 times in 100 word chars = 0.20 (not above); 6 times in 102: 0.235
    others = [f"w{i:03d}" for i in range(30)]  # 4 chars each
    keep = " ".join(["aa", "bb"] * 5 + others[:20])  # 20 + 80 = 100 chars, top 2-gram 5x4=20
    assert g.judge(keep) is None
    drop = " ".join(["aa", "bb"] * 6 + others[:19] + ["xx"])
    assert g.judge(drop) == "top_2gram_chars=0.235 > 0.2"


def test_gopher_repetition_top_ngram_of_equally_frequent_ones_is_the_longest():
    """Two 4-grams each twice: the most frequent n-gram's share is the longer one's, in
    whichever order they come (it was the one with the smaller hash, which the order of first
    occurrence decided), by judge and by the batch's compiled path alike."""
    g = step("gopher_repetition", max_top_ngram_chars={4: 0.16}, max_dup_ngram_chars={})
    long = ["alphabetic", "background", "comparison", "definition"]  # 40 characters
    short = ["ab", "cd", "ef", "gh"]  # 8 characters
    fill = [f"f{i:03d}" for i in range(101)]  # 4 characters each, none repeated

    def text(first: list[str], second: list[str], tail: int) -> str:
        gaps = [fill[i : i + 19] for i in range(0, 76, 19)]
        return " ".join(first + gaps[0] + second + gaps[1] + first + gaps[2] + second + gaps[3]
                        + fill[76 : 76 + tail])  # fmt: skip

    # the long one's 2 x 40 characters of 2 x 40 + 2 x 8 + 76 x 4 = 400: 0.2; with 25 more
    # fillers, of 500: 0.16, not above (the short one's: 0.04, 0.032)
    texts = [text(first, second, tail) for first, second in ((long, short), (short, long))
             for tail in (0, 25)]  # fmt: skip
    want = ["top_4gram_chars=0.2 > 0.16", None] * 2
    assert [g.judge(x) for x in texts] == want
    assert list(g(pa.table({"text": texts})).why) == want


def test_gopher_repetition_duplicated_ngrams():
    g = step("gopher_repetition", max_top_ngram_chars={}, max_dup_ngram_chars={5: 0.15})
    unique = [f"u{i:03d}" for i in range(200)]  # 200 x 4 chars
    phrase = ["p01a", "p02a", "p03a", "p04a", "p05a"]  # 20 chars, 5 words
    keep = " ".join(phrase + unique[:60] + phrase + unique[60:120])  # 40 / 520 = 0.077
    assert g.judge(keep) is None
    drop = " ".join((phrase + unique[:6]) * 4)  # all but the first of four copies: 3/4
    assert g.judge(drop).startswith("dup_5gram_chars=0.75 > 0.15")


# -- C4 ----------------------------------------------------------------------------------------
def test_c4_lines_keeps_running_text_and_counts_what_it_drops():
    t = step("c4_lines")
    spans: Counter = Counter()
    text = "\n".join([
        "This line ends well.", "No terminal punctuation here", "Too short.",
        "Enable JavaScript to see this page.", "Read our privacy policy today please.",
        "A quoted end, it says \"hello\"", "Is this a question?", "",
    ])  # fmt: skip
    kept = 'This line ends well.\nA quoted end, it says "hello"\nIs this a question?'
    assert t.rewrite(text, spans) == kept
    assert spans == {"no_terminal_punctuation": 1, "short_line": 1, "javascript": 1, "policy": 1}


def test_c4_filter(tmp_path):
    five = "One is here. Two is here! Three is here? Four is here. Five is here."
    c4 = step("c4")
    assert c4.judge(five) is None
    assert c4.judge(five.rsplit(" Five", 1)[0]) == "sentences=4 < 5"
    assert c4.judge(five + " Lorem Ipsum dolor.") == "lorem_ipsum"
    assert c4.judge(five + " f(x) { return 1; }") == "curly_bracket"
    words = tmp_path / "bad.txt"
    words.write_text("badword\nvery bad phrase\n")
    with_list = step("c4", bad_words_file=str(words))
    assert with_list.judge(five + " A Very  bad phrase.") is None  # two spaces: not the phrase
    assert with_list.judge(five + " A very bad phrase.") == "bad_word='very bad phrase'"
    assert with_list.judge(five + " badwords are fine.") is None  # whole words only
    assert with_list.files() == [str(words)]


# -- FineWeb ---------------------------------------------------------------------------------
def test_fineweb_line_punctuation():
    f = step("fineweb_quality", max_short_lines=1.0, max_newlines_per_word=10)
    lines = [f"a line of several words number {i}" for i in range(100)]
    keep = "\n".join([line + "." for line in lines[:12]] + lines[12:])
    drop = "\n".join([line + "." for line in lines[:11]] + lines[11:])
    assert f.judge(keep) is None
    assert f.judge(drop) == "punct_lines=0.11 < 0.12"


def test_fineweb_duplicated_line_characters():
    f = step("fineweb_quality", max_short_lines=1.0)
    unique = [f"this is sentence number {i:04d} of the text." for i in range(90)]  # 39 chars
    assert f.judge("\n".join(unique + [unique[0]] * 10)) is None  # 390 / 3900 = 0.1
    got = f.judge("\n".join(unique + [unique[0]] * 11))
    assert got.startswith("dup_line_chars=0.109 > 0.1")


def test_fineweb_short_lines_and_newlines():
    f = step("fineweb_quality", max_dup_line_chars=1.0)
    long = [f"this is a long line of text with many words {i}." for i in range(33)]
    short = [f"short {i}." for i in range(67)]
    assert f.judge("\n".join(long + short)) is None  # 67 / 100 = 0.67
    assert f.judge("\n".join(long[:32] + short + ["tiny."])).startswith("short_lines=0.68")
    g = step("fineweb_quality", max_short_lines=1.0)
    assert g.judge("one two three.\n" * 1 + "a b c d e f g h i j.") is None  # 1 / 13 < 0.3
    assert g.judge("one.\ntwo.\nthree.\nfour.").startswith("newlines_per_word=0.75 > 0.3")


# -- length ----------------------------------------------------------------------------------
def test_length_bounds_and_null_bounds():
    f = step("length", min_words=3, max_words=5, min_chars=None, max_chars=20,
             min_mean_word_length=None, max_mean_word_length=None)  # fmt: skip
    assert f.judge("a b c") is None
    assert f.judge("a b") == "words=2 < 3"
    assert f.judge("a b c d e f") == "words=6 > 5"
    assert f.judge("aaaaa bbbbb cccccccccc") == "chars=22 > 20"
    assert step("length").judge(prose(60)) is None


# -- PII ---------------------------------------------------------------------------------------
def test_pii_replaces_emails_and_public_addresses_only():
    t = step("pii")
    spans: Counter = Counter()
    text = ("mail jane.doe+x@mail.example.co.uk or bob@host.org; server 8.8.8.8 and "
            "2606:4700:4700::1111, local 192.168.1.4, 127.0.0.1, fe80::1; version 1.2.3.4.5; "
            "at 12:30:45; 999.1.1.1")  # fmt: skip
    out = t.rewrite(text, spans)
    assert out == ("mail email@example.com or email@example.com; server 192.0.2.1 and "
                   "2001:db8::1, local 192.168.1.4, 127.0.0.1, fe80::1; version 1.2.3.4.5; "
                   "at 12:30:45; 999.1.1.1")  # fmt: skip
    assert spans == {"email": 2, "ipv4": 1, "ipv6": 1}
    assert t.rewrite("no addresses at all.", spans) == "no addresses at all."


# -- language --------------------------------------------------------------------------------
def test_language_keeps_listed_languages_above_the_score_and_annotates():
    f = step("language", languages=["en"])
    english = "The committee published its annual report on the state of the rivers today."
    german = "Der Ausschuss hat heute seinen Jahresbericht über den Zustand der Flüsse vorgelegt."
    batch = pa.table({"text": [english, german, "ok"]})
    verdicts = f(batch)
    assert verdicts.why[0] is None
    assert verdicts.why[1].startswith("language=de not in ['en']")
    assert verdicts.fields["language"][:2] == ["en", "de"]
    assert float(verdicts.fields["language_score"][0]) >= 0.65
    strict = step("language", languages=["en"], min_score=1.0)
    assert strict.judge(english).startswith("language_score=")
    assert step("language", languages=[]).judge(german) is None


# -- decontamination -------------------------------------------------------------------------
def test_decontaminate_13gram_overlap(tmp_path):
    bench = tmp_path / "bench.jsonl"
    question = ("What is the capital city of the country that hosted the first modern "
                "Olympic games in the year 1896")  # fmt: skip
    bench.write_text(json.dumps({"question": question, "answer": "Athens", "id": 7}) + "\n")
    f = step("decontaminate", benchmarks=[str(bench)])
    words = question.split()
    twelve = " ".join(words[3:15])
    thirteen = " ".join(words[3:16])
    assert f.judge(f"Intro words. {twelve} and more.") is None
    assert f.judge(f"Intro words. {thirteen.upper()}, and more.").startswith("benchmark_13gram")
    assert f.judge("The answer was Athens.") is None  # a one-word item is ignored
    short = tmp_path / "short.txt"
    short.write_text("Name the largest planet of our solar system")  # 8 words: counts whole
    g = step("decontaminate", benchmarks=[str(short)])
    assert g.judge("Quiz: name the largest planet of our solar system!").startswith(
        "benchmark_8gram at word 1")
    assert g.judge("Name the largest planet of our solar.") is None


# -- block lists -----------------------------------------------------------------------------
def test_block_list_domains_and_patterns(tmp_path):
    (tmp_path / "d.txt").write_text("# spam\nbad.example\n")
    (tmp_path / "p.txt").write_text(r"/private/\d+" + "\n")
    f = step("block_list", field="url", domains_file=str(tmp_path / "d.txt"),
             patterns_file=str(tmp_path / "p.txt"))  # fmt: skip
    batch = pa.table({"text": ["a"] * 5, "keep.url": [
        "https://www.bad.example/page", "https://notbad.example/", "http://ok.org/private/12",
        "http://ok.org/public", None]})  # fmt: skip
    assert f(batch).why == [
        "url domain bad.example is blocked", None, "url matches '/private/\\\\d+'", None, None
    ]


# -- your own step, and the chain ------------------------------------------------------------
def keep_short(batch: pa.Table) -> list[bool]:
    return [len(t) < 10 for t in batch["text"].to_pylist()]


def shout(batch: pa.Table) -> list[str]:
    return [t.upper() for t in batch["text"].to_pylist()]


def wrong_length(batch: pa.Table) -> list[bool]:
    return [True]


def test_user_steps_and_their_errors():
    f = step("python", callable=f"{__name__}:keep_short")
    assert f(pa.table({"text": ["short", "much longer text"]})).why == [
        None, f"{__name__}:keep_short returned False"]  # fmt: skip
    assert f.files() and f.files()[0].endswith("test_curate_filters.py")
    with pytest.raises(CurationError, match="returned 1 values for 2"):
        step("python", callable=f"{__name__}:wrong_length")(pa.table({"text": ["a", "b"]}))
    with pytest.raises(CurationError, match="cannot import no_such_module"):
        step("python", callable="no_such_module:f")
    with pytest.raises(CurationError, match="package.module:function"):
        step("python", callable="just_a_name")


def test_chain_counts_every_document_once_and_transforms_feed_later_steps():
    steps = chain.build(chain.parse([
        {"python": {"callable": f"{__name__}:shout", "kind": "transform"}},
        {"length": {"min_words": 2, "max_words": None, "min_mean_word_length": None,
                    "max_mean_word_length": None}},
        {"c4": {"min_sentences": 0}},
    ]))  # fmt: skip
    docs = pa.table({"doc_id": ["a", "b", "c", "d"], "source": ["f"] * 4, "row": [0, 1, 2, 3],
                     "text": ["two words", "one", "lorem ipsum here", "fine text."]})
    out = chain.apply(steps, docs)
    assert out.kept["doc_id"].to_pylist() == ["a", "d"]
    assert out.kept["text"].to_pylist() == ["TWO WORDS", "FINE TEXT."]
    assert out.removed.to_pylist() == [
        {"doc_id": "b", "source": "f", "row": 1, "rule": "length", "detail": "words=1 < 2"},
        {"doc_id": "c", "source": "f", "row": 2, "rule": "c4", "detail": "lorem_ipsum"},
    ]
    assert out.removed_by_rule == {"length": 1, "c4": 1}
    assert out.changed_by_rule == {"python": 4}
    assert out.kept.num_rows + out.removed.num_rows == docs.num_rows


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"pii": {}}, "a list of steps"),
        ([{"nope": {}}], r"curate\[0\]: unknown step 'nope'"),
        ([{"pii": {}}, {"pii": {}}], r"curate\[1\]: step 'pii' is already in this chain"),
        ([{"gopher_quality": {"min_words": -1}}], r"curate\[0\]\.gopher_quality: min_words"),
        ([{"gopher_quality": {"colour": 1}}], r"colour: Extra inputs are not permitted"),
        ([{"pii": {}, "c4": {}}], "one step name"),
    ],
)
def test_chain_config_errors_name_the_entry(raw, message):
    with pytest.raises(CurationError, match=message):
        chain.parse(raw)

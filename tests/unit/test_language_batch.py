"""The language step's batch path gives fastText's own prediction for every document: one compiled
call over an Arrow array's UTF-8 buffer (chunked, sliced, string or large_string, cut at
max_chars inside multi-byte text), and a word cache that is emptied when full and skips long
tokens without changing a label or a float32 score; without numba, fastText's own predict."""

from __future__ import annotations

import functools
import random

import numpy as np
import pyarrow as pa
import pytest

from pipeline.curate import language, lid_kernel, lid_model, lid_ops
from pipeline.curate.language import _model, identify_all, model_path

pytestmark = pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")

PIECES = ["the", "cat", "und", "der", "ça", "été", "лиса", "собака", "狐狸", "日本語", "🙂", "x"]
PIECES += ["__label__fr", "</s>", " ", " ", "\n", "\r\n", "\t", "\x0b", "\x00", "-", "w" * 70]


def fasttext(text: str, max_chars: int) -> tuple[str, float]:
    ((score, label),) = _model().f.predict(
        text[:max_chars].replace("\n", " ") + "\n", 1, 0.0, "replace"
    )
    return label.removeprefix("__label__"), min(1.0, float(score))


def random_texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40))) for _ in range(n)]


@pytest.mark.parametrize("max_chars", [100_000, 7])
def test_batch_gives_fasttexts_prediction_of_each_text(max_chars):
    texts = random_texts(4, 120) + ["", "\n", "a\nb", "Ça été " * 30]
    whole = pa.array(texts)
    batches = [
        whole,
        pa.chunked_array([whole.slice(0, 50), whole.slice(50)]),
        pa.array(texts, pa.large_string()).slice(3),
        pa.array(["", ""]),  # no bytes at all: the line is EOS alone
    ]
    for texts_in in batches:
        expected = [fasttext(t, max_chars) for t in texts_in.to_pylist()]
        assert identify_all(texts_in, max_chars) == expected


def test_word_cache_emptied_when_full_changes_no_value():
    predictor = lid_kernel.Predictor(model_path(), cache_words=8)
    texts = random_texts(5, 200)
    arr = pa.array(texts)
    _, offsets, data = arr.buffers()
    for max_chars in (100_000, 11):
        labels, scores = predictor.predict_texts(
            np.frombuffer(data, np.uint8), np.frombuffer(offsets, np.int32), max_chars
        )
        got = zip([a.removeprefix("__label__") for a in labels], scores.tolist(), strict=True)
        assert [(a, min(1.0, s)) for a, s in got] == [fasttext(t, max_chars) for t in texts]


def test_without_the_compiled_model_each_text_goes_to_fasttext(monkeypatch):
    texts = random_texts(6, 20)
    monkeypatch.setattr(language, "_compiled", lambda: None)  # as where numba is missing
    monkeypatch.setattr(language, "_predict", functools.lru_cache(maxsize=1)(
        language._predict.__wrapped__))  # fmt: skip
    assert not hasattr(language._predict(), "__self__")  # fastText's own predict
    assert identify_all(pa.array(texts), 9) == [fasttext(t, 9) for t in texts]


def test_tokens_up_to_256_bytes_are_kept_in_the_word_cache():
    predictor = lid_kernel.Predictor(model_path())
    tokens = ["short", "a" * 40, "naïve" * 20, "z" * 256, "q" * 257]  # 5, 40, 120, 256, 257 bytes
    line = " ".join(tokens * 2) + "\n"
    ((score, label),) = _model().f.predict(line, 1, 0.0, "replace")
    assert predictor.predict(line) == (label, float(score))
    assert predictor.held() == 4  # each token once, the one over 256 bytes not at all


def test_chunks_and_a_cache_emptied_between_them_change_no_value():
    """Documents longer than a chunk of look-ups, tokens of every kind (in the slot, rows or
    bytes in the arena, over the cache's longest, labels, </s>), a cache that fills up."""
    rng = random.Random(7)
    pieces = [p for p in PIECES if p != "</s>"]
    pieces += ["ab" * 12, "日本語" * 5, "x" * 300, "é" * 100, "Unbelievable", "z" * 256]
    texts = [" ".join(rng.choice(pieces) for _ in range(rng.randint(0, 3000))) for _ in range(12)]
    texts.append(texts[-1] + " </s> " + texts[-2])  # ends at </s>, a few chunks in
    arr = pa.array(texts)
    _, offsets, data = arr.buffers()
    for words in (8, 300, 1 << 18):
        predictor = lid_kernel.Predictor(model_path(), cache_words=words)
        for _ in range(2):  # the cache empty, then holding what the first pass left
            labels, scores = predictor.predict_texts(
                np.frombuffer(data, np.uint8), np.frombuffer(offsets, np.int32), 100_000
            )
            got = zip([a.removeprefix("__label__") for a in labels], scores.tolist(), strict=True)
            assert [(a, min(1.0, s)) for a, s in got] == [fasttext(t, 100_000) for t in texts]


def test_every_dictionary_entry_passes_the_shape_filter_and_is_found():
    """The compiled look-up hashes a token only when its shape bit is set: every entry of the
    dictionary must have its bit set (a word left out would lose its own row), and the filter
    must leave most other shapes out (else it saves nothing)."""
    predictor = lid_kernel.Predictor(model_path(), cache_words=8)
    words = predictor._words
    set_bits = sum(bin(int(v)).count("1") for v in words.shapes)
    assert 0 < set_bits < 0.2 * 64 * len(words.shapes)
    scratch = np.empty(words.maxn * 300, np.int32)
    word = np.empty(300, np.uint8)
    for t in range(len(words.woff) - 1):
        entry = words.wbytes[words.woff[t] : words.woff[t + 1]].copy()
        kind, n, _ = lid_ops._token_rows(entry, 0, len(entry), words, word, scratch)
        if words.types[t]:  # a label: adds nothing
            assert (kind, n) == (lid_ops.SKIP, 0)
        else:  # its own row first (</s>: only it, and the line ends)
            assert n >= 1 and scratch[0] == t
            assert kind == (lid_ops.END if t == words.eos else lid_ops.WORD)


def test_the_reference_model_loads_without_a_line_on_stderr(capfd):
    """fasttext-wheel's load_model (the test extra installs it over fasttext-predict's module)
    prints a deprecation line at each load, once per worker in every run's log."""
    _model.cache_clear()  # loaded again here, as in a new worker
    reference = _model()
    assert reference.f.predict("the cat sat on the mat\n", 1, 0.0, "replace")
    assert capfd.readouterr().err == ""


def test_a_dictionary_slot_holds_its_entrys_id_and_word_hash():
    """A probe compares the word hash kept in the slot before it reads an entry's bytes (most
    tokens seen for the first time are no word): each entry is in the slot its hash leads to
    (or past it, open addressing), with its id and fastText's hash; the others are empty."""
    model = lid_model.read(model_path())
    table, mask = model.table, len(model.table) - 1
    held = table[table >= 0]
    assert sorted((held >> 32).tolist()) == list(range(len(model.woff) - 1))
    for s in np.flatnonzero(table >= 0).tolist():
        t, h = int(table[s]) >> 32, int(table[s]) & 0xFFFFFFFF
        assert h == lid_model.fnv(model.wbytes[model.woff[t] : model.woff[t + 1]].tobytes())
        at = h & mask
        while at != s:  # every slot from its home to where it is, taken
            assert table[at] >= 0
            at = (at + 1) & mask

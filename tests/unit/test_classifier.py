"""The fasttext_classifier step (curate/classifier.py) and the compiled predict it shares with
the language step (curate/lid_kernel.py): on models trained here on the shipped sample
(softmax with bigrams, hierarchical softmax with character n-grams, one-vs-all, quantized with
and without norms, pruned buckets, a quantized output, 300 labels), its top label and score
and each label's score equal fastText's own predict, float32 for float32; documents on both
sides of the threshold; a missing or wrong model is a one-line error."""

from __future__ import annotations

import random
import re
import shutil

import numpy as np
import pyarrow as pa
import pytest
from support import REPO

from pipeline.cli import main as cli
from pipeline.curate import chain, classifier, lid_kernel, lid_model
from pipeline.curate.language import _utf8
from pipeline.curate.user import CurationError
from pipeline.testing.fasttext_models import sample_lines, train

fasttext = pytest.importorskip("fasttext")
if not hasattr(fasttext, "train_supervised"):  # pragma: no cover - the predict-only build
    pytest.skip("fastText's training build (the test extra) is not installed",
                allow_module_level=True)  # fmt: skip
pytestmark = pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")

MODELS = {
    "bigram_softmax.bin": {"loss": "softmax", "wordNgrams": 2, "dim": 20, "bucket": 50_000},
    "hs_chars.bin": {"loss": "hs", "wordNgrams": 2, "minn": 2, "maxn": 4, "bucket": 50_000},
    "words_only.bin": {"loss": "softmax", "maxn": 0},  # no n-gram at all: bucket 0
    "ova.bin": {"loss": "ova", "dim": 16, "minn": 3, "maxn": 5, "bucket": 20_000},
    "ova_trigrams.bin": {"loss": "ova", "wordNgrams": 3, "dim": 16, "minn": 2, "maxn": 3,
                         "bucket": 20_000},
    "softmax_q.ftz": {"loss": "softmax", "wordNgrams": 2, "minn": 3, "maxn": 4,
                      "bucket": 50_000, "quantize": {"dsub": 2}},
    "hs_q_pruned.ftz": {"loss": "hs", "wordNgrams": 2, "minn": 2, "maxn": 3, "bucket": 50_000,
                        "quantize": {"dsub": 2, "qnorm": True, "cutoff": 2000}},
    "many_qout.ftz": {"loss": "softmax", "wordNgrams": 2, "dim": 12, "bucket": 20_000,
                      "many_labels": True,
                      "quantize": {"dsub": 4, "qnorm": True, "qout": True, "cutoff": 3000}},
    "many_hs.bin": {"loss": "hs", "dim": 12, "minn": 3, "maxn": 3, "bucket": 20_000,
                    "many_labels": True},
}  # fmt: skip

PIECES = ["the", "The", "package", "debian", "ça", "été", "лиса", "日本語", "🙂", "x", "-", "(",
          "__label__web", "__label__nope", "</s>", " ", "  ", "\t", "\r", "\x0b",
          "w" * 300]  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("fasttext")
    out: dict[str, str] = {}
    for name, args in MODELS.items():
        args = dict(args)
        out[name] = str(train(folder, name, args.pop("quantize", None), **args))
    return out


def documents(n_random: int = 300) -> list[str]:
    """Every 12th line of the sample (each a document), lines joined (newlines inside),
    and random mixtures of words, labels, </s>, control bytes and long tokens."""
    lines = [line for _, line in sample_lines()][::12]
    rng = random.Random(3)
    joined = ["\n".join(rng.sample(lines, 5)) for _ in range(100)]
    mixed = ["".join(rng.choice(PIECES) + rng.choice(" \n") for _ in range(rng.randint(0, 60)))
             for _ in range(n_random)]  # fmt: skip
    return lines + joined + mixed + ["", "\n", "__label__web", "</s> a b"]


def reference(model, text: str, mode: int, k: int) -> list[tuple[float, str]]:
    """fastText's own predict(k) of the text read as `mode` says."""
    line = text.replace("\n", " ") if mode == lid_kernel.TEXT else text.split("\n", 1)[0]
    return model.f.predict(line + "\n", k, 0.0, "replace")


CASES = [(name, lid_kernel.TEXT) for name in MODELS]
CASES += [("bigram_softmax.bin", lid_kernel.FIRST_LINE), ("hs_q_pruned.ftz", lid_kernel.FIRST_LINE)]


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_scores_equal_fasttexts_predict(models, name, mode):
    """The top label and its score equal predict(k=1)'s; the score of a label equals the one
    predict(k=-1) lists for it (0 where it lists none): float32 for float32, no tolerance."""
    texts = documents()
    assert len(texts) >= 1000
    model = fasttext.load_model(models[name])
    predictor = lid_kernel.Predictor(models[name], cache_words=1 << 12)
    labels = predictor.labels
    expected = [reference(model, t, mode, -1) for t in texts]
    tops = [reference(model, t, mode, 1) for t in texts]
    arr = pa.array(texts)
    for want in sorted({0, 1, 2, len(labels) // 2, len(labels) - 1}):
        node, score, named = predictor.score_texts(*_utf8(arr), -1, mode, want)
        for d, found in enumerate(expected):
            if not found:  # fastText predicts nothing: no word, no n-gram
                assert node[d] == -1 and named[d] == 0.0, texts[d]
                continue
            scores = {label: s for s, label in found}
            assert float(named[d]) == scores.get(labels[want], 0.0), (texts[d], want)
            ((top_score, top),) = tops[d]
            assert (labels[node[d]], float(score[d])) == (top, top_score), texts[d]


def test_the_models_cover_every_kind_the_reader_reads(models):
    kinds = {name: lid_model.read(path) for name, path in models.items()}
    # negative sampling (NS) predicts as one-vs-all does (the same code)
    assert {m.loss for m in kinds.values()} == {lid_model.HS, lid_model.SOFTMAX, lid_model.OVA}
    assert kinds["hs_q_pruned.ftz"].pruned and not kinds["softmax_q.ftz"].pruned
    assert not (kinds["many_qout.ftz"].out_norms == 1).all()  # a quantized output with norms
    assert len(kinds["many_hs.bin"].labels) > 256
    assert {m.word_ngrams for m in kinds.values()} == {1, 2, 3}
    assert kinds["words_only.bin"].bucket == 0
    assert {m.maxn for m in kinds.values()} >= {0, 3, 4}


def step(models, **params):
    params = {"model_file": models["bigram_softmax.bin"], "label": "web", **params}
    return chain.build(chain.parse([{"fasttext_classifier": params}]))[0]


def batch(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table({"doc_id": [f"d{i}" for i in range(n)], "source": ["s"] * n,
                     "row": list(range(n)), "text": texts})  # fmt: skip


def test_keeps_a_document_whose_score_is_at_least_the_threshold(models):
    texts = [line for _, line in sample_lines()][:50]
    scores = step(models, min_score=0.0).scores(pa.array(texts))
    at = float(scores[7])
    assert 0.0 < at < 1.0
    for bound, kept in ((at, True), (float(np.nextafter(np.float32(at), 1)), False)):
        out = chain.apply([step(models, min_score=bound)], batch(texts))
        ids = out.kept["doc_id"].to_pylist()
        assert ("d7" in ids) is kept
        assert out.kept.num_rows + out.removed.num_rows == len(texts)
        assert out.kept.num_rows == int((scores >= bound).sum())
        if not kept:
            (row,) = [r for r in out.removed.to_pylist() if r["doc_id"] == "d7"]
            assert row["rule"] == "fasttext_classifier"
            assert row["detail"].startswith("classifier_score=")
    kept_scores = out.kept["keep.classifier_score"].to_pylist()
    assert kept_scores and all(float(s) >= bound - 5e-5 for s in kept_scores)


def test_label_with_or_without_the_prefix_and_the_normalisation(models):
    texts = ["The Package DEBIAN\nsecond line here", "ÉTÉ Ça Va\nx"]
    plain = step(models, label="__label__web", normalise=["newlines"]).scores(pa.array(texts))
    lower = step(models, normalise=["newlines", "lower"]).scores(pa.array(texts))
    lowered = step(models, normalise=["newlines"]).scores(pa.array([t.lower() for t in texts]))
    first = step(models, normalise=[]).scores(pa.array(texts))
    first_only = step(models).scores(pa.array([t.split("\n")[0] for t in texts]))
    assert lower.tolist() == lowered.tolist() != plain.tolist()
    assert first.tolist() == first_only.tolist() != plain.tolist()


def test_without_the_compiled_predict_fasttext_gives_the_same_scores(models, monkeypatch):
    texts = documents(50)[-120:]
    for params in ({}, {"normalise": ["lower"], "max_chars": 20}):
        compiled = step(models, **params).scores(pa.array(texts))
        monkeypatch.setattr(classifier, "_compiled", lambda path: None)
        assert step(models, **params).scores(pa.array(texts)).tolist() == compiled.tolist()
        monkeypatch.undo()


def test_a_missing_or_wrong_model_or_label_is_a_one_line_error(models, tmp_path):
    text_file = tmp_path / "model.bin"
    text_file.write_text("not a model at all, but long enough to hold a header" * 3)
    cases = [
        ({"model_file": str(tmp_path / "none.bin")}, "model_file: Value error, cannot read"),
        ({"model_file": str(text_file)}, "not a fastText model file"),
        ({"label": "nope"}, "label 'nope' is not one of"),
    ]
    for params, message in cases:
        params = {"model_file": models["ova.bin"], "label": "web", **params}
        with pytest.raises(CurationError, match=message) as e:
            chain.parse([{"fasttext_classifier": params}])
        assert "\n" not in str(e.value)


def _config(tmp_path, model_file: str, min_score: float = 0.5) -> str:
    shutil.copy(REPO / "configs" / "tokenizer.json", tmp_path / "tokenizer.json")
    config = tmp_path / "clf.yaml"
    config.write_text(f"""name: x
input: {{uri: {REPO / 'sample'}}}
output: {{uri: {tmp_path / 'out'}}}
tokenize: {{tokenizer: tokenizer.json}}
curate: [{{fasttext_classifier: {{model_file: {model_file}, label: web, min_score: {min_score}}}}}]
""")
    return str(config)


def test_preview_prints_the_score_quantiles(models, tmp_path, capsys):
    """The quantile printed for a share is a min_score that keeps at least that share."""
    shutil.copy(models["bigram_softmax.bin"], tmp_path / "quality.bin")

    def preview(min_score: float) -> tuple[list[float], int]:
        argv = ["curate-preview", "--config", _config(tmp_path, "quality.bin", min_score)]
        assert cli.main([*argv, "--sample", "300"]) == 0
        out = capsys.readouterr().out
        (line,) = [x for x in out.splitlines() if "score quantiles" in x]
        assert "(300 documents)" in line
        cuts = [float(v) for v in re.findall(r"top \d+% >= ([\d.]+)", line)]
        found = re.search(r"fasttext_classifier\s+filter: removes (\d+) of 300", out)
        return cuts, int(found.group(1))

    cuts, _ = preview(0.5)
    assert len(cuts) == 5 and cuts == sorted(cuts) and cuts[0] < cuts[-1]
    _, removed = preview(cuts[2])  # the top 10 %'s bound (printed to 4 decimals: rounded)
    assert 300 * 0.85 <= removed <= 300 * 0.9 + 1
    assert not (tmp_path / "out").exists()


def test_a_missing_model_stops_the_command_with_exit_2(tmp_path, capsys):
    assert cli.main(["curate-preview", "--config", _config(tmp_path, "none.bin")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fasttext_classifier" in err[0] and "cannot read" in err[0]
    assert str(tmp_path / "none.bin") in err[0]  # the path is the config folder's


def test_warm_compiles_the_predict_a_classifier_runs(models):
    """`pipeline warm` has no model of the user's: it compiles the classifier's loops on
    lid.176, and a trained model's predict then needs no new compiled signature."""
    from pipeline.curate import warm

    assert warm.warm(["fasttext_classifier"]) == ["fasttext_classifier"]
    compiled = len(lid_kernel._predict_all.signatures)
    assert compiled >= 1
    for name in ("bigram_softmax.bin", "hs_q_pruned.ftz"):
        for params in ({}, {"normalise": []}):
            step(models, model_file=models[name], **params).scores(pa.array(["a b c\nd"]))
    assert len(lid_kernel._predict_all.signatures) == compiled

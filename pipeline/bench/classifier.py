"""Benchmark: the fasttext_classifier step's speed per core against fastText's own predict, in
the same process on the same documents, and its agreement with it.

    python -m pipeline bench classifier (--input PATH | --mb N) [--limit-mb N] [--repeat 3]
        [--dim 64] [--bucket 1000000] [--word-ngrams 2] [--loss softmax] [--model FILE --label L]

Without --model, a model is trained here on the shipped sample (pipeline/testing/
fasttext_models.py: each line a document, labelled books / web / forum) with DCLM's kind of
settings (word bigrams, softmax) at --dim and --bucket: fastText's training build must be
installed (the `test` extra). Each document is read whole as one line (newlines as spaces, as
DCLM does). Timed on one thread, best of --repeat: `fastText predict` calls fastText's predict
(k=1, the cheapest call) on each line, formed before the clock starts; `classifier (cold)` is
the step's scores over the Arrow text column with its word cache emptied before each run (a
worker's first sight of the text), `classifier (warm)` again on the text it has just read.
Agreement, over every document: the top label of the compiled predict against predict(k=1),
its score, and the named label's score against the one predict(k=-1) lists. Last line: a JSON
object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from pipeline.bench.minhash import add_corpus_args, corpus_texts
from pipeline.cli import args as cli_args
from pipeline.curate import chain, lid_kernel
from pipeline.curate.language import _utf8, fasttext_model


def _timed(fn, repeat: int, before=None) -> float:
    best = float("inf")
    for _ in range(repeat):
        if before is not None:
            before()
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def _model(args: argparse.Namespace, folder: Path) -> tuple[str, str]:
    if args.model:
        return str(args.model), args.label
    from pipeline.testing.fasttext_models import train

    path = train(folder, "bench.bin", dim=args.dim, bucket=args.bucket, loss=args.loss,
                 wordNgrams=args.word_ngrams, epoch=2)  # fmt: skip
    return str(path), "web"


def _agreement(step, model, texts: list[str], arr: pa.Array) -> dict:
    """The compiled predict against fastText's on every document."""
    predictor = lid_kernel.Predictor(step.params.model_file)
    node, top, named = predictor.score_texts(*_utf8(arr), -1, lid_kernel.TEXT, step._label)
    labels_equal, top_diff, named_diff, compared = 0, 0.0, 0.0, 0
    for d, text in enumerate(texts):
        line = text.replace("\n", " ") + "\n"
        ranked = model.f.predict(line, 1, 0.0, "replace")
        if not ranked:
            labels_equal += int(node[d] == -1)
            compared += 1
            continue
        ((score, label),) = ranked
        every = {name: s for s, name in model.f.predict(line, -1, 0.0, "replace")}
        compared += 1
        labels_equal += int(node[d] >= 0 and predictor.labels[node[d]] == label)
        top_diff = max(top_diff, abs(float(top[d]) - score))
        named_diff = max(named_diff, abs(float(named[d]) - every.get(step._label_name, 0.0)))
    return {"documents": compared, "labels_equal": labels_equal,
            "max_top_score_diff": top_diff, "max_label_score_diff": named_diff}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench classifier", description=__doc__.splitlines()[0]
    )
    add_corpus_args(parser)
    parser.add_argument("--dim", type=int, default=64, help="the trained model's dimension")
    parser.add_argument("--bucket", type=int, default=1_000_000, help="its n-gram buckets")
    parser.add_argument("--word-ngrams", type=int, default=2, help="its word n-grams")
    parser.add_argument(
        "--loss", default="softmax", choices=["softmax", "hs", "ova"],
        help="the trained model's loss: softmax, hierarchical softmax or one-vs-all",
    )
    parser.add_argument("--model", type=Path, help="a model of yours instead (.bin or .ftz)")
    parser.add_argument("--label", default="web", help="with --model: the label scored")
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    texts = corpus_texts(args.input, args.mb, args.limit_mb)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    arr = pa.array(texts, pa.string())
    with tempfile.TemporaryDirectory() as folder:
        model_file, label = _model(args, Path(folder))
        (step,) = chain.build(chain.parse([{"fasttext_classifier": {
            "model_file": model_file, "label": label, "min_score": 0.0}}]))  # fmt: skip
        model = fasttext_model(model_file)
        step.scores(arr.slice(0, 10))  # compiled (or loaded) before the clock
        lines = [t.replace("\n", " ") + "\n" for t in texts]
        reference = _timed(lambda: [model.f.predict(x, 1, 0.0, "replace") for x in lines],
                           args.repeat)  # fmt: skip
        predictor = _predictor(step)

        ours_cold = _timed(lambda: step.scores(arr), args.repeat,
                           predictor.forget if predictor is not None else None)  # fmt: skip
        ours_warm = _timed(lambda: step.scores(arr), args.repeat)
        agree = _agreement(step, model, texts, arr)
        kind = lid_kernel.lid_model.read(model_file)
    figures = {
        "docs": len(texts), "mb": round(mb, 2), "compiled": predictor is not None,
        "model": {"dim": int(kind.rows.shape[1]), "word_ngrams": kind.word_ngrams,
                  "loss": kind.loss, "labels": len(kind.labels), "minn": kind.minn,
                  "maxn": kind.maxn, "pruned": kind.pruned},
        "fasttext_mb_s": round(mb / reference, 2), "cold_mb_s": round(mb / ours_cold, 2),
        "warm_mb_s": round(mb / ours_warm, 2), "cold_vs_fasttext": round(reference / ours_cold, 2),
        "warm_vs_fasttext": round(reference / ours_warm, 2), "agreement": agree,
    }  # fmt: skip
    print(f"{len(texts)} documents, {mb:.1f} MB, one core (CPU seconds), best of {args.repeat}")
    print(f"{'':<22}{'MB/s':>9}{'docs/s':>11}{'vs fastText':>13}")
    for name, seconds in (("fastText predict", reference), ("classifier (cold)", ours_cold),
                          ("classifier (warm)", ours_warm)):  # fmt: skip
        print(f"{name:<22}{mb / seconds:9.2f}{len(texts) / seconds:11.0f}"
              f"{reference / seconds:12.2f}x")  # fmt: skip
    print(f"agreement: {agree['labels_equal']:,} of {agree['documents']:,} top labels equal;"
          f" max score difference: top {agree['max_top_score_diff']:.3g},"
          f" label {label!r} {agree['max_label_score_diff']:.3g}")  # fmt: skip
    print(json.dumps(figures))
    return figures


def _predictor(step) -> lid_kernel.Predictor | None:
    from pipeline.curate import classifier

    return classifier._compiled(step.params.model_file)


if __name__ == "__main__":
    main()

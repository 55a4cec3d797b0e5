"""Benchmark: MinHash signature throughput of the pipeline against datasketch, same docs, one core.

    python -m pipeline.bench.minhash --input PATH_OR_DIR [--limit-mb N] [--repeat 3]

Input: a .jsonl/.jsonl.gz/.jsonl.zst/.ndjson/.parquet/.txt file, or a folder of them (field "text").
Pipeline: minhash.signatures (words found and hashed in compiled loops, dedup/text_kernel.py;
shingles and permutations in dedup/minhash_kernel.py; numpy and xxhash where numba is absent).
Baseline: datasketch 2.0 MinHash.bulk with hashfunc = xxhash 32-bit and the same num_perm, fed
the same word 5-grams built in Python (NFC, lower-case, whitespace split, punctuation trimmed:
the rule dedup/minhash.py documents). Runs alternate, the best of each is kept. Both
estimate Jaccard on pairs of a document and a copy with 2 % of its words edited; their mean
absolute error against the exact Jaccard is printed as a check that the fast path computes the
right thing.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash
from datasketch import MinHash

from pipeline.cli import args as cli_args
from pipeline.dedup.minhash import (
    PUNCTUATION,
    MinHashParams,
    estimated_jaccard,
    exact_jaccard,
    shingle_set,
    signatures,
)
from pipeline.tools.real_text import mutate_words
from pipeline.tools.sample_io import iter_records, iter_texts, usable_text


def load_texts(path: Path, limit_mb: float | None) -> list[str]:
    if path.is_dir():
        stream = iter_texts(path)
    else:
        stream = (t for _, r in iter_records(path) if (t := usable_text(r)) is not None)
    texts, total = [], 0
    for text in stream:
        if limit_mb is not None and total >= limit_mb * 1e6:
            break
        texts.append(text)
        total += len(text.encode())
    return texts


def add_corpus_args(parser: argparse.ArgumentParser) -> None:
    """The options corpus_texts reads (--input, --mb, --limit-mb), and --repeat."""
    parser.add_argument("--input", type=Path, help="a corpus file or folder (field 'text')")
    parser.add_argument(
        "--mb", type=float, help="without --input: a make_corpus corpus of this many MB (cached)"
    )
    parser.add_argument("--limit-mb", type=float, default=None, help="read at most this much")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each; best kept")


def corpus_texts(path: Path | None, mb: float | None, limit_mb: float | None) -> list[str]:
    """The texts of --input, or of the cached make_corpus corpus of --mb MB (default 16)."""
    if path is None:
        from pipeline.bench.scaling import CORPUS_CACHE, cached_corpus

        path = cached_corpus(mb or 16, CORPUS_CACHE)
    return load_texts(path, limit_mb)


def python_shingles(text: str, ngram: int) -> list[bytes]:
    """The baseline's shingling: the same rule as dedup/minhash.py, written the usual Python way."""
    words = [w.strip(PUNCTUATION) for w in unicodedata.normalize("NFC", text).lower().split()]
    words = [w for w in words if w]
    if len(words) < ngram:
        return [" ".join(words).encode()] if words else []
    return [" ".join(words[i : i + ngram]).encode() for i in range(len(words) - ngram + 1)]


def datasketch_signatures(texts: list[str], params: MinHashParams) -> tuple[list, float, float]:
    """MinHashes and the seconds spent shingling and in MinHash.bulk."""
    started = time.perf_counter()
    shingles = [python_shingles(t, params.ngram) for t in texts]
    shingled = time.perf_counter()
    sketches = MinHash.bulk(shingles, num_perm=params.num_perm, hashfunc=xxhash.xxh32_intdigest)
    return sketches, shingled - started, time.perf_counter() - shingled


def accuracy(texts: list[str], params: MinHashParams, pairs: int = 200) -> tuple[float, float]:
    """Mean |estimate - exact Jaccard| of (pipeline, datasketch) on doc vs edited-copy pairs."""
    rng = random.Random(0)
    originals = [t for t in texts if len(t.split()) >= 50][:pairs]
    copies = [mutate_words(t, 0.02, rng) for t in originals]
    exact = np.array(
        [
            exact_jaccard(shingle_set(a, params.ngram), shingle_set(b, params.ngram))
            for a, b in zip(originals, copies, strict=True)
        ]
    )
    ours = signatures(originals + copies, params)
    ours_est = estimated_jaccard(ours[: len(originals)], ours[len(originals) :])
    theirs, _, _ = datasketch_signatures(originals + copies, params)
    theirs_est = np.array(
        [theirs[i].jaccard(theirs[i + len(originals)]) for i in range(len(originals))]
    )
    return float(np.mean(np.abs(ours_est - exact))), float(np.mean(np.abs(theirs_est - exact)))


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench minhash", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--input", required=True, type=Path, help="a folder of text files (e.g. /usr/share/doc)"
    )
    parser.add_argument(
        "--limit-mb", type=float, default=None, help="read at most this many MB of text"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each; best kept")
    parser.add_argument(
        "--num-perm",
        type=int,
        default=MinHashParams().num_perm,
        help="permutations per signature (dedup.near.num_perm)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    pa.set_cpu_count(1)  # one core for both (numpy's element-wise kernels are single-threaded)
    pa.set_io_thread_count(1)
    defaults = MinHashParams()
    rows = min(defaults.rows, args.num_perm)
    params = MinHashParams(num_perm=args.num_perm, rows=rows, bands=args.num_perm // rows)

    texts = load_texts(args.input, args.limit_mb)
    if not texts:
        raise SystemExit(f"no texts under {args.input}")
    mb = sum(len(t.encode()) for t in texts) / 1e6
    signatures(texts[:50], params)  # warm-up: first Arrow kernel calls pay one-off setup
    datasketch_signatures(texts[:50], params)
    ours_s = shingle_s = bulk_s = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        signatures(texts, params)
        ours_s = min(ours_s, time.perf_counter() - started)
        _, shingling, bulk = datasketch_signatures(texts, params)
        if shingling + bulk < shingle_s + bulk_s:
            shingle_s, bulk_s = shingling, bulk
    theirs_s = shingle_s + bulk_s
    ours_error, theirs_error = accuracy(texts, params)

    print(
        f"input: {args.input}, {len(texts)} docs, {mb:.1f} MB, num_perm {params.num_perm}, "
        f"best of {args.repeat}"
    )
    print(f"{'method':<36} {'seconds':>8} {'MB/s':>8} {'docs/s':>9}")
    for name, seconds in (
        ("pipeline minhash.signatures", ours_s),
        ("datasketch total", theirs_s),
        ("  python word 5-gram shingling", shingle_s),
        ("  MinHash.bulk (xxh32)", bulk_s),
    ):
        print(f"{name:<36} {seconds:>8.2f} {mb / seconds:>8.1f} {len(texts) / seconds:>9.0f}")
    print(
        f"mean |estimate - exact J| on 2%-edited pairs: pipeline {ours_error:.4f}, "
        f"datasketch {theirs_error:.4f}"
    )
    print(
        json.dumps(
            {
                "pipeline_mb_per_s": round(mb / ours_s, 2),
                "datasketch_mb_per_s": round(mb / theirs_s, 2),
                "ratio": round(theirs_s / ours_s, 2),
                "docs": len(texts),
                "mb": round(mb, 2),
                "num_perm": params.num_perm,
                "pipeline_abs_error": round(ours_error, 4),
                "datasketch_abs_error": round(theirs_error, 4),
            }
        )
    )


if __name__ == "__main__":
    main()

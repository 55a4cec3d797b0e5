"""Benchmark: the pipeline's tokenize+pack stage against the bare tokenizer, same docs, same run.

    python -m pipeline bench tokenize --input URI --tokenizer PATH [--repeat 3]

Baseline: `Tokenizer.encode_batch_fast` over the same documents in batches of the same size (ids
collected, nothing written). Pipeline: stages.tokenize_unit + stages.pack_shard on those documents
staged as one unit in a temp folder: shuffle keys, EOS, token files, Megatron shards, checksums and
read-back. Runs alternate in pairs (which path goes first alternates too); `ratio` is the median of
the pairs' time ratios, because on a shared machine the speed drifts by tens of percent over
minutes and only back-to-back runs see the same machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import pyarrow as pa

from pipeline import stages
from pipeline.config import Config
from pipeline.exact import REMOVED_SCHEMA
from pipeline.ingest import cut_units, list_inputs
from pipeline.layout import RunLayout
from pipeline.readers import read_piece
from pipeline.storage import Location
from pipeline.tokenize import encode_batch, load_tokenizer


def load_documents(uri: str, text_field: str = "text", id_field: str = "id") -> pa.Table:
    root = Location.from_uri(uri)
    inputs, _ = list_inputs(root, ["**"], [])
    parts = []
    for piece in cut_units(inputs, 2**62).to_pylist():
        parts += [docs for docs, _ in read_piece(root, piece, text_field, id_field)]
    return pa.concat_tables([p for p in parts if p.num_rows])


def time_raw(tokenizer, texts: list[str], batch: int) -> tuple[float, int]:
    start, tokens = time.perf_counter(), 0
    for i in range(0, len(texts), batch):
        tokens += sum(len(e.ids) + 1 for e in encode_batch(tokenizer, texts[i : i + batch]))
    return time.perf_counter() - start, tokens


def time_pipeline(docs: pa.Table, cfg: Config, work: str) -> tuple[float, int]:
    layout = RunLayout(
        Location.from_uri(work),
        f"bench-{time.monotonic_ns()}",
        "read",
        f"tok-{time.monotonic_ns()}",
    )
    layout.read_docs("u0").write_parquet(docs, **stages.DOCS_PARQUET)
    layout.removed.write_parquet(REMOVED_SCHEMA.empty_table())
    _, info = load_tokenizer(cfg.tokenize.tokenizer, cfg.tokenize.eos)
    start = time.perf_counter()
    with open(cfg.tokenize.tokenizer, "rb") as f:
        tok = stages.tokenize_unit(layout, "u0", cfg, f.read())
    token_bytes = tok["tokens"] * (2 if info.dtype == "uint16" else 4)
    version = layout.version("bench")
    stages.pack_in_process(layout, version, [("u0", tok["removed"])], token_bytes, cfg, info.dtype)
    return time.perf_counter() - start, tok["tokens"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline bench tokenize")
    parser.add_argument("--input", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-docs", type=int, default=1024)
    parser.add_argument("--shard-bytes", default="256MiB")
    args = parser.parse_args(argv)

    docs = load_documents(args.input)
    texts = docs["text"].to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    with tempfile.TemporaryDirectory() as work:
        cfg = Config.model_validate(
            {
                "name": "bench",
                "input": {"uri": args.input},
                "output": {"uri": work},
                "tokenize": {"tokenizer": args.tokenizer, "batch_docs": args.batch_docs},
                "pack": {"shard_bytes": args.shard_bytes},
            }
        )
        tokenizer, _ = load_tokenizer(args.tokenizer, cfg.tokenize.eos)
        raw, piped = [], []
        for i in range(args.repeat):
            if i % 2:
                piped.append(time_pipeline(docs, cfg, work))
                raw.append(time_raw(tokenizer, texts, args.batch_docs))
            else:
                raw.append(time_raw(tokenizer, texts, args.batch_docs))
                piped.append(time_pipeline(docs, cfg, work))
    pair_ratios = sorted(r[0] / p[0] for r, p in zip(raw, piped, strict=True))
    ratio = float(np.median(pair_ratios))
    raw_s, raw_tokens = min(raw)
    pipe_s, pipe_tokens = min(piped)
    if raw_tokens != pipe_tokens:
        raise SystemExit(f"token counts differ: raw {raw_tokens} vs pipeline {pipe_tokens}")
    figures = {
        "docs": len(texts),
        "mb": round(mb, 2),
        "tokens": raw_tokens,
        "raw_tokens_per_s": round(raw_tokens / raw_s),
        "pipeline_tokens_per_s": round(pipe_tokens / pipe_s),
        "ratio": round(ratio, 3),
        "ratio_of_best": round(raw_s / pipe_s, 3),
        "pair_ratios": [round(r, 3) for r in pair_ratios],
    }
    print(f"{'path':<32} {'seconds':>8} {'tokens/s':>12} {'MB/s':>8}")
    print(
        f"{'raw encode_batch_fast':<32} {raw_s:>8.2f} {raw_tokens / raw_s:>12,.0f}"
        f" {mb / raw_s:>8.2f}"
    )
    print(
        f"{'pipeline tokenize+pack':<32} {pipe_s:>8.2f} {pipe_tokens / pipe_s:>12,.0f}"
        f" {mb / pipe_s:>8.2f}"
    )
    print(
        f"({len(texts)} docs, {mb:.1f} MB; best of {args.repeat} alternating runs each;"
        f" ratio = median of the pairs' ratios {[round(r, 3) for r in pair_ratios]})"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

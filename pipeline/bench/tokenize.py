"""Benchmark: the pipeline's tokenize+pack stage against the bare engines, same docs, same run.

    python -m pipeline bench tokenize --input URI --tokenizer PATH [--engine E] [--repeat 3]
        [--verify-fraction 0.01]

Baselines over the same documents in batches of the same size, ids collected, nothing written:
raw tokenizers (`encode_batch_fast`, the reference) and raw fastokens (`encode_batch_flat`).
Pipeline: the stage's own functions on those documents staged as one unit in a temp folder, all
the driver runs for tokenize and pack: the equality probe (`probe_s`), tokenize_docs (shuffle
keys, the engine, its sampled check against tokenizers, EOS, the token file), select_unit and
pack_stage with its tasks in this process. Runs alternate in rounds (the order rotates); `ratio`
(pipeline / raw tokenizers, tokens/s) and `ratio_vs_engine` (pipeline / raw fastokens) are
medians of the rounds' time ratios: a shared machine drifts by tens of percent over minutes.
`ratio_vs_engine_excl_probe` leaves the probe out (a cost per run, not per unit);
`cpu_ratio_vs_engine` compares CPU seconds of this process, which other load disturbs less.
Where the corpus holds both long documents (over tokens/pieces.PIECE_CHARS characters, encoded
in pieces) and short ones (make_corpus `--long-share`), the pipeline also runs, in the same
rounds, on the long ones alone and on as many bytes of short ones: `long` and `short` give their
per-byte rates (probe left out) and `long_vs_short` the median of the rounds' ratios of their
MB/s (`long_vs_short_cpu`: per CPU second). `identical` is true only if the shards hold, for
every document, exactly raw tokenizers' ids (special tokens' text as text) followed by EOS.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.cli import args as cli_args
from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.dedup.exact import REMOVED_SCHEMA
from pipeline.formats.megatron import decode_index
from pipeline.ingest.listing import cut_units, list_inputs
from pipeline.ingest.readers import read_piece
from pipeline.run import tokenize_tasks
from pipeline.run.pack_stage import pack_stage
from pipeline.run.tokenize_stage import Tokenized
from pipeline.run.waves import Waves
from pipeline.tokens.encode import (
    EngineUnavailable,
    FastokensEncoder,
    TokenizersEncoder,
    encode_batch,
    frame,
    load_tokenizer,
)
from pipeline.tokens.pieces import PIECE_CHARS


def load_documents(uri: str, text_field: str = "text", id_field: str = "id") -> pa.Table:
    root = Location.from_uri(uri)
    inputs, _ = list_inputs(root, ["**"], [])
    parts = []
    for piece in cut_units(inputs, 2**62).to_pylist():
        parts += [docs for docs, _ in read_piece(root, piece, text_field, id_field)]
    return pa.concat_tables([p for p in parts if p.num_rows])


@dataclass
class Timed:
    seconds: float  # wall
    tokens: int
    cpu: float  # CPU seconds of this process, all threads
    probe: float = 0.0  # of `seconds`: the equality probe's
    engine: str = ""  # the engine the pipeline ran (the probe's choice)
    probe_cpu: float = 0.0  # of `cpu`: the equality probe's


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def by_length(docs: pa.Table) -> dict[str, pa.Table]:
    """{"long": the documents over PIECE_CHARS characters, "short": as many bytes of the other
    documents (the first ones, in corpus order)}, or {} unless the corpus holds both. Equal bytes,
    so that the costs of a run that do not grow with its bytes weigh the same on both."""
    long = pc.greater(pc.utf8_length(docs["text"]), PIECE_CHARS)
    longs, shorts = docs.filter(long), docs.filter(pc.invert(long))
    if not (longs.num_rows and shorts.num_rows):
        return {}
    sizes = np.cumsum(pc.binary_length(shorts["text"]).to_numpy(zero_copy_only=False))
    take = int(np.searchsorted(sizes, _text_mb(longs) * 1e6)) + 1
    return {"long": longs, "short": shorts.slice(0, take)}


def time_raw_tokenizers(tokenizer, texts: list[str], batch: int) -> Timed:
    cpu, start, tokens = _cpu(), time.perf_counter(), 0
    for i in range(0, len(texts), batch):
        tokens += sum(len(e.ids) + 1 for e in encode_batch(tokenizer, texts[i : i + batch]))
    return Timed(time.perf_counter() - start, tokens, _cpu() - cpu)


def time_raw_fastokens(encoder, texts: list[str], batch: int) -> Timed:
    cpu, start, tokens = _cpu(), time.perf_counter(), 0
    for i in range(0, len(texts), batch):
        ids, offsets = encoder.tokenizer.encode_batch_flat(
            texts[i : i + batch], add_special_tokens=False, split_special_tokens=True
        )
        tokens += len(ids) // 4 + len(offsets) // 8 - 1
    return Timed(time.perf_counter() - start, tokens, _cpu() - cpu)


def time_pipeline(docs: pa.Table, cfg: Config, work: str) -> tuple[Timed, Location]:
    """The run's tokenize and pack work on `docs` as one unit, in this process: the probe
    (unless the engine is tokenizers; its choice is then the engine, as in
    run/tokenize_stage.py), the read task's tokenization, the select task, both pack passes."""
    layout = RunLayout(
        Location.from_uri(work),
        f"bench-{time.monotonic_ns()}",
        "read",
        f"tok-{time.monotonic_ns()}",
    )
    layout.removed.write_parquet(REMOVED_SCHEMA.empty_table())
    cpu, start = _cpu(), time.perf_counter()
    with open(cfg.tokenize.tokenizer, "rb") as f:
        raw = f.read()
    engine = cfg.tokenize.engine
    if engine != "tokenizers":
        probe = tokenize_tasks.tokenize_probe(cfg, raw)
        if probe.error:
            raise SystemExit(probe.error)
        engine = probe.engine
    probe_s, probe_cpu = time.perf_counter() - start, _cpu() - cpu
    tokenize_tasks.tokenize_docs(layout, "u0", docs, cfg, raw, engine)
    tok = tokenize_tasks.select_unit(layout, "u0")
    # the pack stage as a run calls it, its tasks in this process
    origin = {"u0": cfg.sources[0].name}
    tokenized = Tokenized([tok], {"engine": engine})
    packed = pack_stage(Waves(inline=True), cfg, layout, origin, tokenized)
    version = layout.version(packed.version_id)
    timed = Timed(
        time.perf_counter() - start, tok.tokens, _cpu() - cpu, probe_s, engine, probe_cpu
    )
    return timed, version


def identical_to_tokenizers(version: Location, docs: pa.Table, cfg: Config) -> bool:
    """The shards' documents, in shard order, against raw tokenizers' ids + EOS per document."""
    _, info = load_tokenizer(cfg.tokenize.tokenizer, cfg.tokenize.eos)
    dtype = np.dtype(info.dtype)
    names = sorted(n for n in version.ls_names() if n.endswith(".bin"))
    tokens = np.concatenate([np.frombuffer((version / n).read_bytes(), dtype) for n in names])
    lengths = np.concatenate(
        [decode_index((version / (n[:-4] + ".idx")).read_bytes()).lengths for n in names]
    )
    from pipeline.core.text import shuffle_key  # the pipeline's order, to line the documents up

    keys = [shuffle_key(d, cfg.pack.seed) for d in docs["doc_id"].to_pylist()]
    ordered = docs.append_column("key", pa.array(keys, pa.uint64())).sort_by(
        [("key", "ascending"), ("doc_id", "ascending"), ("source", "ascending"),
         ("row", "ascending")]
    )
    with open(cfg.tokenize.tokenizer, "rb") as f:
        reference = TokenizersEncoder(f.read(), special_as_text=True)
    ref_tokens, ref_lengths = frame(
        *reference.encode_flat(ordered["text"].to_pylist()), info.eos_id, None, dtype
    )
    return np.array_equal(lengths.astype(np.int64), ref_lengths) and np.array_equal(
        tokens, ref_tokens
    )


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench tokenize", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--input", required=True, help="a local folder of input files")
    parser.add_argument("--tokenizer", required=True, help="a tokenizer.json")
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "fastokens", "tokenizers"],
        help="tokenize.engine of the pipeline path",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each path; best kept")
    parser.add_argument(
        "--batch-docs", type=int, default=1024, help="tokenize.batch_docs: documents per batch"
    )
    parser.add_argument("--shard-bytes", default="256MiB", help="pack.shard_bytes")
    parser.add_argument(
        "--verify-fraction",
        type=float,
        default=0.01,
        help="tokenize.verify_fraction: share of documents the pipeline re-encodes with"
        " tokenizers (0: none, to see the check's own cost)",
    )
    return parser


def _bench_config(args: argparse.Namespace, engine: str, work: str) -> Config:
    return Config.model_validate(
        {
            "name": "bench",
            "input": {"uri": args.input},
            "output": {"uri": work},
            "tokenize": {
                "tokenizer": args.tokenizer,
                "batch_docs": args.batch_docs,
                "engine": engine,
                "verify_fraction": args.verify_fraction,
            },
            "pack": {"shard_bytes": args.shard_bytes},
        }
    )


def _alternate(paths: dict, repeat: int) -> dict[str, list[Timed]]:
    """Each path `repeat` times, the order rotating each round (a shared machine drifts)."""
    order = list(paths)
    times: dict[str, list[Timed]] = {name: [] for name in order}
    for i in range(repeat):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            times[name].append(paths[name]())
    return times


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    docs = load_documents(args.input)
    texts = docs["text"].to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    with open(args.tokenizer, "rb") as f:
        raw_json = f.read()
    try:
        fast = FastokensEncoder(raw_json)
    except EngineUnavailable as e:
        if args.engine == "fastokens":
            raise SystemExit(str(e)) from None
        fast = None
    engine = "tokenizers" if args.engine == "tokenizers" or fast is None else "fastokens"
    with tempfile.TemporaryDirectory() as work:
        cfg = _bench_config(args, engine, work)
        tokenizer = TokenizersEncoder(raw_json, special_as_text=True).tokenizer
        paths = {
            "raw": lambda: time_raw_tokenizers(tokenizer, texts, args.batch_docs),
            "pipeline": lambda: time_pipeline(docs, cfg, work)[0],
        }
        if fast is not None:
            paths["fast"] = lambda: time_raw_fastokens(fast, texts, args.batch_docs)
        kinds = by_length(docs)
        for kind, part in kinds.items():
            paths[kind] = functools.partial(lambda d: time_pipeline(d, cfg, work)[0], part)
        times = _alternate(paths, args.repeat)
        _, version = time_pipeline(docs, cfg, work)  # untimed: the shards to compare
        identical = identical_to_tokenizers(version, docs, cfg)
    ran = {t.engine for t in times["pipeline"]}
    if ran != {engine}:  # the probe chose otherwise: say what ran
        engine = ",".join(sorted(ran))
    kind_mb = {kind: _text_mb(part) for kind, part in kinds.items()}
    kind_times = {kind: times.pop(kind) for kind in kinds}
    figures = _figures(times, len(texts), mb, engine, args.verify_fraction, identical)
    figures.update(_kind_figures(kind_times, {k: p.num_rows for k, p in kinds.items()}, kind_mb))
    labels = {
        "raw": "raw tokenizers encode_batch_fast",
        "fast": "raw fastokens encode_batch_flat",
        "pipeline": f"pipeline tokenize+pack ({engine})",
        "long": f"pipeline, long docs (> {PIECE_CHARS // 1024} Ki chars)*",
        "short": "pipeline, as many MB of short docs*",
    }
    print(f"{'path':<40} {'seconds':>8} {'tokens/s':>12} {'MB/s':>8}")
    for name in paths:
        runs = times.get(name) or kind_times[name]
        tokens, size = runs[0].tokens, kind_mb.get(name, mb)
        s = min(t.seconds - (t.probe if name in kinds else 0) for t in runs)
        print(f"{labels[name]:<40} {s:>8.2f} {tokens / s:>12,.0f} {size / s:>8.2f}")
    if kinds:
        print(
            f"(*probe left out; long: {figures['long']['docs']} docs, {kind_mb['long']:.1f} MB;"
            f" short: {figures['short']['docs']} docs, {kind_mb['short']:.1f} MB;"
            f" long / short MB/s: {figures['long_vs_short']}, per CPU second:"
            f" {figures['long_vs_short_cpu']})"
        )
    print(
        f"({len(texts)} docs, {mb:.1f} MB; best of {args.repeat} alternating runs each; ratios"
        f" = medians of the rounds' ratios; shards identical to raw tokenizers: {identical})"
    )
    print(json.dumps(figures))


def _text_mb(docs: pa.Table) -> float:
    return int(pc.sum(pc.binary_length(docs["text"])).as_py() or 0) / 1e6


def _kind_figures(times: dict[str, list[Timed]], docs: dict[str, int], mb: dict[str, float]):
    """The pipeline's rate on each kind alone (best run) and `long_vs_short`: the median of the
    rounds' ratios of long to short MB/s (`long_vs_short_cpu`: per CPU second of this process).
    Nothing unless the corpus holds both kinds."""
    if not times:
        return {}
    out = {}
    for kind, runs in times.items():
        best = min(t.seconds - t.probe for t in runs)
        out[kind] = {
            "docs": docs[kind],
            "mb": round(mb[kind], 2),
            "tokens": runs[0].tokens,
            "pipeline_mb_per_s": round(mb[kind] / best, 2),
            "pipeline_tokens_per_s": round(runs[0].tokens / best),
        }
    def long_vs_short(cost) -> float:
        rounds = zip(times["long"], times["short"], strict=True)
        ratios = [(mb["long"] / cost(lo)) / (mb["short"] / cost(sh)) for lo, sh in rounds]
        return round(float(np.median(ratios)), 3)

    out["long_vs_short"] = long_vs_short(lambda t: t.seconds - t.probe)
    out["long_vs_short_cpu"] = long_vs_short(lambda t: t.cpu - t.probe_cpu)
    return out


def _figures(times: dict, docs: int, mb: float, engine: str, fraction: float, identical: bool):
    """The last-line JSON: rates of the best runs, ratios as medians of the rounds' ratios."""

    def median_ratio(base: str, of=lambda t: t.seconds) -> float:
        pairs = zip(times[base], times["pipeline"], strict=True)
        return float(np.median([of(b) / of(p) for b, p in pairs]))

    best = {name: min(t.seconds for t in ts) for name, ts in times.items()}
    counts = {t.tokens for ts in times.values() for t in ts}
    if len(counts) != 1:
        raise SystemExit(f"token counts differ between paths: {sorted(counts)}")
    tokens = counts.pop()
    fast = "fast" in times

    def ratio(base: str, of=lambda t: t.seconds) -> float | None:
        return round(median_ratio(base, of), 3) if base in times else None

    return {
        "docs": docs,
        "mb": round(mb, 2),
        "tokens": tokens,
        "engine": engine,
        "verify_fraction": fraction,
        "raw_tokens_per_s": round(tokens / best["raw"]),
        "raw_fastokens_tokens_per_s": round(tokens / best["fast"]) if fast else None,
        "pipeline_tokens_per_s": round(tokens / best["pipeline"]),
        "ratio": ratio("raw"),
        "ratio_vs_engine": ratio("fast"),
        "ratio_vs_engine_excl_probe": ratio("fast", lambda t: t.seconds - t.probe),
        "cpu_ratio_vs_engine": ratio("fast", lambda t: t.cpu),
        "probe_s": round(float(np.median([t.probe for t in times["pipeline"]])), 3),
        "ratio_of_best": round(best["raw"] / best["pipeline"], 3),
        "pair_ratios": sorted(
            round(r.seconds / p.seconds, 3)
            for r, p in zip(times["raw"], times["pipeline"], strict=True)
        ),
        "identical": bool(identical),
    }


if __name__ == "__main__":
    main()

"""Benchmark: the read pass on web archives per core, part by part, and a whole run from WARC
to shards, each against resiliparse's extraction alone on the same records.

    python -m pipeline bench extract (--input DIR | --mb N) [--repeat 3] [--config FILE]
        [--set KEY=VALUE] [--no-run] [--no-warcio]

Parts, each timed alone in this process (best of --repeat; bench/extract_parts.py): WARC
parsing (fastwarc), HTTP decoding (codings and charset), extraction (resiliparse's
extract_plain_text, main content: the baseline), curation (the config's chain on the extracted
texts, the language step's word cache emptied first), and warcio's parsing for reference. The
whole run: the config (default configs/crawl.yaml: its chain, dedup and tokenize) on the same
files with one worker pinned to one core, timed as bench scaling times it (Ray start and
imports excluded), in units of ingest.unit_bytes's default (64 MiB: a crawl run's, each
Common Crawl file a handful of units; --set ingest.unit_bytes=... for others). Rates are MB of
HTML (the 200 HTML responses' bodies, decoded) per second per core. Target: the run's rate is
at least 0.6 x the extraction's alone (`ratio`). Beside it, two ceilings from the parts alone:
`ceiling_parts`, extraction's share of the four parts' time (no run of this chain can beat
it: it parses, decodes, extracts and curates every record), and `ratio_read_extract`, the
run against fastwarc + resiliparse reading and extracting the archives alone (parse, decode,
extract). The run's read pass is split by the read tasks' own timers (the web archive reader's
warc_parse, http_decode and extract, ingest/web_archive.PARTS; tokenize, curate); the rest is
the difference. Last line: a JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pipeline.bench import extract_parts as parts
from pipeline.cli import args as cli_args
from pipeline.config.sections import IngestConfig
from pipeline.curate import language
from pipeline.run.ray_env import WORKER_ENV

REPO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "crawl.yaml"
TARGET_RATIO = 0.6
CORPUS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pipeline/crawl"


def best_of(repeat: int, fn: Callable[[], Any], before: Callable[[], None] | None = None
            ) -> tuple[float, Any]:  # fmt: skip
    """The shortest wall time of `repeat` calls (each after `before`, untimed), and the last
    call's result."""
    best, result = math.inf, None
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def chain_of(config: Path) -> list:
    """The curation chain a config gives its (first) source: `curate:`, or the first input's."""
    raw = yaml.safe_load(config.read_text()) or {}
    if raw.get("inputs"):
        own = raw["inputs"][0].get("curate")
        return own if own is not None else raw.get("curate") or []
    return (raw.get("input") or {}).get("curate") or raw.get("curate") or []


def measure_parts(files: list[Path], config: Path, repeat: int, warcio: bool) -> dict:
    """Seconds of each part alone, with the amounts they worked on."""
    parse_s, (records, bodies) = best_of(repeat, lambda: parts.parse_fastwarc(files))
    decode_s, htmls = best_of(repeat, lambda: parts.http_decode(bodies))
    extract_s, texts = best_of(repeat, lambda: parts.extract_all(htmls))
    ids = [b.record_id for b in bodies]
    steps = chain_of(config)
    # the language step's word cache emptied before each run: a worker's first sight of them
    curate_s, kept = best_of(
        repeat, lambda: parts.curate_all(steps, ids, texts), before=language.forget_words
    )
    figures = {
        "records": records,
        "html_docs": len(bodies),
        "html_mb": sum(len(h.encode()) for h in htmls) / 1e6,
        "text_mb": sum(len(t.encode()) for t in texts) / 1e6,
        "kept_by_chain": kept,
        "seconds": {"parse": parse_s, "decode": decode_s, "extract": extract_s,
                    "curate": curate_s},
    }  # fmt: skip
    if warcio:
        try:
            warcio_s, n = best_of(repeat, lambda: parts.parse_warcio(files))
            figures["seconds"]["warcio_parse"] = warcio_s
            figures["warcio_records"] = n
        except ImportError:
            pass  # not installed: the crawl-sample extra
    return figures


def measure_run(input_dir: Path, config: Path, sets: list[str]) -> dict:
    """The whole pipeline on `input_dir`, one worker on one core (bench scaling's run_once)."""
    from pipeline.bench import scaling

    work = Path(tempfile.mkdtemp(prefix="bench-extract-"))
    ns = argparse.Namespace(config=str(config), input=str(input_dir), pin=True)
    unit = IngestConfig.model_fields["unit_bytes"].default  # a crawl run's units
    # the files the parts read, whatever the config's globs (crawl.yaml's fit sample/crawl)
    globs = json.dumps([f"**/*{suffix}" for suffix in parts.WARC_SUFFIXES])
    own = [f"ingest.unit_bytes={unit}"]
    if "input" in (yaml.safe_load(config.read_text()) or {}):
        own += [f"input.include={globs}", "input.exclude=[]"]
    try:
        return scaling.run_once(ns, 1, work, [*own, *sets])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def figures_of(measured: dict, run: dict | None) -> dict:
    mb, sec = measured["html_mb"], measured["seconds"]
    rate = {k: round(mb / s, 2) if s else None for k, s in sec.items()}
    pass_s = sum(sec[k] for k in ("parse", "decode", "extract", "curate"))
    out = {
        "records": measured["records"],
        "html_docs": measured["html_docs"],
        "html_mb": round(mb, 3),
        "text_mb": round(measured["text_mb"], 3),
        "kept_by_chain": measured["kept_by_chain"],
        **{k: measured[k] for k in ("warcio_records",) if k in measured},
        "seconds": {k: round(v, 4) for k, v in sec.items()},
        "mb_s_per_core": {**rate, "read_pass_parts": round(mb / pass_s, 2)},
        # parsing goes over every record, the other parts over the HTML responses
        "records_s": {k: round((measured["records"] if "parse" in k else measured["html_docs"]) / s)
                      for k, s in sec.items() if s},
        "share_of_parts": {k: round(sec[k] / pass_s, 3)
                           for k in ("parse", "decode", "extract", "curate")},
    }  # fmt: skip
    if run is not None:
        read_s = run["stages"].get("read+hash", 0.0)
        inside = {k: round(v, 3) for k, v in run["read_parts_s"].items()}
        inside["rest"] = round(read_s - sum(run["read_parts_s"].values()), 3)
        out["run"] = {
            "wall_s": round(run["wall_s"], 3),
            "stages_s": {k: round(v, 3) for k, v in run["stages"].items()},
            "read_pass_s": round(read_s, 3),
            "read_pass_parts_s": inside,
            "docs_out": run["docs_out"],
            "tokens": run["tokens"],
            "mb_s_per_core": round(mb / run["wall_s"], 2),
        }
        out["ratio"] = round(sec["extract"] / run["wall_s"], 3)
        out["target_ratio"] = TARGET_RATIO
        out["meets_target"] = out["ratio"] >= TARGET_RATIO
        read_extract_s = sec["parse"] + sec["decode"] + sec["extract"]
        out["ratio_read_extract"] = round(read_extract_s / run["wall_s"], 3)
    # the most any run of the chain could reach: extraction's share of the parts it must run
    out["ceiling_parts"] = round(sec["extract"] / pass_s, 3)
    return out


def print_table(f: dict) -> None:
    print(f"{'part (alone, one core)':<28} {'seconds':>9} {'records/s':>11} {'HTML MB/s':>10}")
    labels = {"parse": "WARC parse (fastwarc)", "decode": "HTTP decode + charset",
              "extract": "extract (resiliparse)", "curate": "curate (chain)",
              "warcio_parse": "WARC parse (warcio, ref.)"}  # fmt: skip
    for key, label in labels.items():
        if key in f["seconds"]:
            print(f"{label:<28} {f['seconds'][key]:>9.3f} {f['records_s'].get(key, 0):>11,}"
                  f" {f['mb_s_per_core'][key] or 0:>10.2f}")  # fmt: skip
    print(f"{'the four parts together':<28} {'':>9} {'':>11} "
          f"{f['mb_s_per_core']['read_pass_parts']:>10.2f}")  # fmt: skip
    if "run" in f:
        r = f["run"]
        label = "whole run, W=1 (wall)"
        print(f"{label:<28} {r['wall_s']:>9.3f} {'':>11} {r['mb_s_per_core']:>10.2f}")
        print(f"  read pass {r['read_pass_s']:.3f} s: " + ", ".join(
            f"{k} {v:.3f}" for k, v in r["read_pass_parts_s"].items()))  # fmt: skip
        print("  stages: " + ", ".join(f"{k} {v:.2f}" for k, v in r["stages_s"].items()))
        verdict = "meets" if f["meets_target"] else "misses"
        print(f"ratio run / resiliparse extraction alone: {f['ratio']:.3f}"
              f" ({verdict} the target {TARGET_RATIO})")  # fmt: skip
        print(f"ratio run / fastwarc + resiliparse reading and extracting alone:"
              f" {f['ratio_read_extract']:.3f}")  # fmt: skip
    print(f"ceiling from the parts alone (extract / parse+decode+extract+curate):"
          f" {f['ceiling_parts']:.3f}")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench extract", description=__doc__.split("\n\n")[0]
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", type=Path, help="a folder of WARC files (e.g. sample/crawl)")
    source.add_argument("--mb", type=float, help="build (once) a make_crawl_corpus of this size")
    parser.add_argument(
        "--corpus-cache", type=Path, default=CORPUS_CACHE, help="where --mb corpora are kept"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each part; best is kept")
    parser.add_argument("--config", type=Path, default=REPO_CONFIG, help="the run's config")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    parser.add_argument("--no-run", dest="run", action="store_false", help="the parts only")
    parser.add_argument(
        "--no-warcio", dest="warcio", action="store_false", help="do not time warcio's parsing"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.repeat < 1:
        build_parser().error("--repeat must be at least 1")
    input_dir = args.input
    if input_dir is None:
        from pipeline.bench.scaling import cached_corpus

        input_dir = cached_corpus(args.mb, args.corpus_cache, "make_crawl_corpus")
    files = parts.archive_files(input_dir)
    if not files:
        build_parser().error(f"--input {input_dir}: no .warc, .warc.gz or .warc.wet.gz files")
    os.environ.update(WORKER_ENV)  # one thread per library pool, as in a worker
    input_bytes = sum(p.stat().st_size for p in files)
    measured = measure_parts(files, args.config, args.repeat, args.warcio)
    run = measure_run(input_dir, args.config, args.set) if args.run else None
    figures = figures_of(measured, run)
    print(f"input {input_dir}: {len(files)} files, {input_bytes / 1e6:.2f} MB on disk,"
          f" {figures['records']:,} records, {figures['html_docs']:,} HTML responses"
          f" ({figures['html_mb']:.2f} MB of HTML, {figures['text_mb']:.2f} MB of text);"
          f" best of {args.repeat}; config {args.config}")  # fmt: skip
    print_table(figures)
    print(json.dumps({"input_mb": round(input_bytes / 1e6, 3), **figures}))


if __name__ == "__main__":
    main()

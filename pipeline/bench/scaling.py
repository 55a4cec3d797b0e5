"""Benchmark: the whole pipeline on one corpus with 1 and 2 workers, each held to one core.

    python -m pipeline.bench.scaling (--input DIR | --mb N) [--workers 1,2] [--repeat 1]
        [--config FILE] [--set KEY=VALUE] [--code DIR] [--no-pin]

Contract: each worker count runs on a fresh local Ray with num_cpus=W, the tasks' environment
(run/ray_env.py WORKER_ENV: one thread per library pool and per task) and the driver pinned to
W cores, timed from the driver with Ray start and imports excluded by a warm-up; the baseline
is the first worker count of the same invocation. Prints per-stage seconds and MB/s per core,
and as its last line a JSON object with `speedup` and `stage_mb_s_per_core`. What each figure
means, the corpus cache and --code: docs/benchmarks.md, "bench scaling".
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray

from pipeline.cli import args as cli_args
from pipeline.config.loader import load_config
from pipeline.run.driver import run_pipeline
from pipeline.run.ray_env import WORKER_ENV, hide_local_auth_notice

SAMPLE_CONFIG = Path(__file__).resolve().parent / "data" / "scaling.yaml"
DEFAULT_SETS = ["pack.shard_bytes=32MiB", "dedup.partitions=8"]
UNITS_PER_WORKER = 16  # the last wave's imbalance is then at most ~1/16 of a stage
CORPUS_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pipeline/corpus"


@ray.remote(num_cpus=1)
def _warm_worker() -> int:
    """Start a worker and import what the stages import, so timings exclude process start-up."""
    import pipeline.run.exact_dedup_tasks  # noqa: F401
    import pipeline.run.merge_tasks  # noqa: F401
    import pipeline.run.neardup  # noqa: F401
    import pipeline.run.pack_tasks  # noqa: F401
    import pipeline.run.read_tasks  # noqa: F401
    import pipeline.run.tokenize_tasks  # noqa: F401
    from pipeline.dedup import minhash

    minhash.signatures(["load the compiled kernel once, as an import"])  # where it has one
    time.sleep(0.5)  # hold the CPU so that the next warm-up task lands on another worker
    return os.getpid()


def warm_page_cache(root: Path) -> int:
    total = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                total += len(chunk)
    return total


def unit_bytes_for(input_bytes: int, max_workers: int) -> int:
    """Units small enough that every worker count gets UNITS_PER_WORKER units per worker."""
    return max(2**20, input_bytes // (UNITS_PER_WORKER * max_workers))


def cached_corpus(mb: float, cache: Path, tool: str = "make_corpus") -> Path:
    """A corpus of `mb` MB (seed 0) from pipeline.tools.<tool> (make_corpus, make_crawl_corpus),
    built once under `cache` and reused: built in a temporary folder and renamed into place, so
    an interrupted build is never taken for one."""
    build = importlib.import_module(f"pipeline.tools.{tool}").build

    folder = cache / f"{tool}-{mb:g}mb-seed0"
    if folder.is_dir():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache))
    try:
        print(f"building a {mb:g} MB corpus in {folder} (once)", flush=True)
        build(partial, int(mb * 1e6), 0)
        partial.rename(folder)
    except OSError:
        if not folder.is_dir():  # not a concurrent build that won the rename
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def pinned_cores(workers: int) -> set[int] | None:
    """The first `workers` cores this process may run on, or None where it cannot pin."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    return set(cores[:workers]) if len(cores) >= workers else None


def run_once(args: argparse.Namespace, workers: int, work: Path, sets: list[str]) -> dict:
    out = work / f"w{workers}-{time.monotonic_ns()}"
    cfg = load_config(args.config, input_uri=args.input, output_uri=str(out), overrides=sets)
    hide_local_auth_notice()
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = pinned_cores(workers) if args.pin else None
    if cores is not None:  # Ray's processes inherit it: W workers, W cores, whatever threads
        os.sched_setaffinity(0, cores)
    try:
        ray.init(
            address="local",
            num_cpus=workers,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": dict(WORKER_ENV)},
        )
        try:
            pids = set(ray.get([_warm_worker.remote() for _ in range(workers)]))
            start = time.perf_counter()
            result = run_pipeline(cfg, show_progress=False)
            wall = time.perf_counter() - start
        finally:
            # outside the timed run; plain ray.shutdown, so that this script also runs
            # against older code (--code)
            ray.shutdown()
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if cores is not None and allowed is not None:
            os.sched_setaffinity(0, allowed)
    stages = {s.name: s for s in result.stages}
    return {
        "workers": workers,
        "warm_workers": len(pids),
        "pinned": sorted(cores) if cores is not None else None,
        "wall_s": wall,
        "stages": {name: s.seconds for name, s in stages.items()},
        # task seconds the read tasks spent tokenizing (all workers together)
        "tokenize_task_s": _part_seconds(stages, "tokenize"),
        "curate_task_s": _part_seconds(stages, "curate"),
        # every part the read tasks timed (tokenize, curate, and what the reader reports)
        "read_parts_s": dict(getattr(stages.get("read+hash"), "part_seconds", {})),
        "read_bytes": stages["read+hash"].bytes if "read+hash" in stages else 0,
        "tokens": result.manifest["counts"]["tokens"],
        "docs_out": result.manifest["counts"]["docs_out"],
    }


def _part_seconds(stages: dict, part: str) -> float:
    """Task seconds read+hash spent in `part` (all workers together); 0 from code older than
    that count (--code)."""
    return getattr(stages.get("read+hash"), "part_seconds", {}).get(part, 0.0)


def significant(value: float) -> float:
    """Rounded for the JSON line: two decimals, or three significant digits below 1, so that a
    small share or rate (a fast machine's, a slow one's) is never printed as 0.0."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(2, 2 - math.floor(math.log10(abs(value)))))


def per_core(run: dict, input_bytes: int) -> dict[str, float]:
    """Throughput per core of one run: a stage's amount / (its wall seconds x cores used)."""
    w, stages = run["workers"], run["stages"]
    figures = {"pipeline_mb_s_per_core": input_bytes / 1e6 / (run["wall_s"] * w)}
    if stages.get("read+hash"):
        figures["read_hash_mb_s_per_core"] = input_bytes / 1e6 / (stages["read+hash"] * w)
    if stages.get("read+hash"):  # the read task tokenizes every document it reads
        figures["tokens_s_per_core"] = run["tokens"] / (stages["read+hash"] * w)
        # the read pass without its tokenizer: the stage's core-seconds less the tasks'
        # tokenize seconds (what read+hash was before it tokenized)
        untokenized = stages["read+hash"] * w - run.get("tokenize_task_s", 0.0)
        if run.get("tokenize_task_s") and untokenized > 0:
            figures["read_hash_untokenized_mb_s_per_core"] = input_bytes / 1e6 / untokenized
            figures["tokenize_mb_s_per_core"] = input_bytes / 1e6 / run["tokenize_task_s"]
        if run.get("curate_task_s"):  # the curation chain's share of the read pass's core-seconds
            figures["curate_share_of_read_pass"] = run["curate_task_s"] / (stages["read+hash"] * w)
            figures["curate_mb_s_per_core"] = input_bytes / 1e6 / run["curate_task_s"]
    return {k: round(v) if k.startswith("tokens") else significant(v) for k, v in figures.items()}


def stage_mb_s_per_core(run: dict, input_bytes: int) -> dict[str, float]:
    """MB of input per second per core of each stage (and of the whole run, `total`): the rate
    a stage would need alone to keep up with the input."""
    w, figures = run["workers"], {}
    for name, seconds in run["stages"].items():
        if seconds:
            figures[name] = significant(input_bytes / 1e6 / (seconds * w))
    stage_s = sum(run["stages"].values())
    if stage_s:
        figures["total"] = significant(input_bytes / 1e6 / (stage_s * w))
    return figures


def print_table(runs: dict[int, dict], input_bytes: int) -> None:
    counts = list(runs)
    base = runs[counts[0]]
    names = list(base["stages"])
    header = f"{'stage':<12}" + "".join(f" {f'W={w} s':>9}" for w in counts)
    header += "".join(f" {f'x{w}':>7}" for w in counts[1:])
    header += f" {'MB/s/core W=' + str(counts[0]):>15}"
    print(header)
    rates = stage_mb_s_per_core(base, input_bytes)
    for name in [*names, "wall"]:
        secs = [
            runs[w]["wall_s"] if name == "wall" else runs[w]["stages"].get(name, 0.0)
            for w in counts
        ]
        line = f"{name:<12}" + "".join(f" {s:>9.2f}" for s in secs)
        line += "".join(f" {secs[0] / s if s else 0.0:>7.2f}" for s in secs[1:])
        rate = per_core(base, input_bytes)["pipeline_mb_s_per_core"] if name == "wall" else None
        line += f" {rates.get(name, 0.0) if rate is None else rate:>15.2f}"
        print(line)
    print()
    for w in counts:
        figures = per_core(runs[w], input_bytes)
        print(f"W={w}: " + ", ".join(f"{k} {v:,}" for k, v in figures.items()))


def rerun_with_code(code: Path, argv: list[str], args: argparse.Namespace) -> int:
    """This benchmark against the pipeline in `code`: a copy of this file run as a script with
    PYTHONPATH=code (a copy, so that this package's modules do not shadow the standard library's
    on sys.path[0]) from the copy's folder (Ray puts the driver's working directory on its
    workers' path); the corpus, config and work folder are resolved here and passed as paths."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--code", "--mb", "--input", "--config", "--work"):
            skip = True
        elif not arg.startswith(("--code=", "--mb=", "--input=", "--config=", "--work=")):
            rest.append(arg)
    if args.work:
        rest += ["--work", str(Path(args.work).resolve())]
    with tempfile.TemporaryDirectory(prefix="bench-scaling-code-") as tmp:
        script = Path(tmp) / "bench_scaling.py"
        shutil.copyfile(__file__, script)
        env = {**os.environ, "PYTHONPATH": str(code.resolve())}
        cmd = [sys.executable, str(script), "--input", str(Path(args.input).resolve())]
        cmd += ["--config", args.config, *rest]
        print(f"running against the code in {code}: PYTHONPATH={code}", flush=True)
        return subprocess.run(cmd, env=env, cwd=tmp, check=False).returncode


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench scaling", description=__doc__.split("\n\n")[0]
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="a local corpus folder (make_corpus)")
    source.add_argument(
        "--mb", type=float, help="build (once, then reuse) a make_corpus corpus of this many MB"
    )
    parser.add_argument(
        "--corpus-cache", type=Path, default=CORPUS_CACHE, help="where --mb corpora are kept"
    )
    parser.add_argument("--workers", default="1,2", help="worker counts, baseline first")
    parser.add_argument("--repeat", type=int, default=1, help="runs per count; best is kept")
    parser.add_argument(
        "--config",
        default=str(SAMPLE_CONFIG),
        help="config the runs start from (default: the package's, the sample's settings)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    parser.add_argument("--work", help="folder for the outputs (default: a temp folder)")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="do not pin W workers to W cores"
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="run against another checkout's pipeline: its root, or its pipeline/ folder",
    )
    return parser


def code_root(code: Path) -> Path:
    """The folder to put on PYTHONPATH for `--code`: a checkout's root, also when given its
    `pipeline/` package folder. Any other folder is refused: on the path it would import
    nothing, and the benchmark would run the installed package under another code's name."""
    code = code.resolve()
    if (code / "pipeline" / "__init__.py").is_file():
        return code
    if code.name == "pipeline" and (code / "__init__.py").is_file():
        return code.parent
    raise ValueError(f"--code {code}: no pipeline package there (give a checkout's root)")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.mb is not None:
        args.input = str(cached_corpus(args.mb, args.corpus_cache))
    args.config = str(Path(args.config).resolve())
    if args.code is not None:
        try:
            code = code_root(args.code)
        except ValueError as e:
            build_parser().error(str(e))
        sys.exit(rerun_with_code(code, argv, args))
    counts = [int(w) for w in args.workers.split(",")]
    os.environ.update(WORKER_ENV)  # the driver's own pools too
    os.environ.pop("RAY_ADDRESS", None)  # always a fresh local Ray per worker count

    input_bytes = warm_page_cache(Path(args.input))
    unit_bytes = unit_bytes_for(input_bytes, max(counts))
    sets = [f"ingest.unit_bytes={unit_bytes}", *DEFAULT_SETS, *args.set]  # later --set wins
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-scaling-"))
    runs: dict[int, dict] = {}
    try:
        for _ in range(args.repeat):
            for w in counts:
                run = run_once(args, w, work, sets)
                if w not in runs or run["wall_s"] < runs[w]["wall_s"]:
                    runs[w] = run
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    base = runs[counts[0]]
    pinned = {str(w): r["pinned"] for w, r in runs.items()}
    print(
        f"input {args.input}: {input_bytes / 1e6:.1f} MB, {base['docs_out']:,} docs out,"
        f" {base['tokens']:,} tokens; best of {args.repeat}; os.cpu_count() = {os.cpu_count()}"
        f" (shared: other processes add noise); cores pinned {pinned}"
    )
    print(f"config {args.config} --set {' '.join(sets)}")
    print_table(runs, input_bytes)
    import pipeline

    figures = {
        "input_mb": round(input_bytes / 1e6, 2),
        "workers": counts,
        "wall_s": {str(w): round(r["wall_s"], 2) for w, r in runs.items()},
        "speedup": round(base["wall_s"] / runs[counts[-1]]["wall_s"], 3),
        "stage_speedup": {
            name: round(s / runs[counts[-1]]["stages"][name], 3)
            for name, s in base["stages"].items()
            if runs[counts[-1]]["stages"].get(name)
        },
        "stages_s": {
            str(w): {k: round(v, 3) for k, v in r["stages"].items()} for w, r in runs.items()
        },
        "per_core": {str(w): per_core(r, input_bytes) for w, r in runs.items()},
        "stage_mb_s_per_core": {
            str(w): stage_mb_s_per_core(r, input_bytes) for w, r in runs.items()
        },
        "pinned": pinned,
        "worker_env": dict(WORKER_ENV),
        "code": str(Path(pipeline.__file__).resolve().parent),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""Benchmark: the whole pipeline on one corpus with 1 and 2 workers, each held to one core.

    python -m pipeline.bench.scaling --input DIR [--workers 1,2] [--repeat 1] [--set KEY=VALUE]

For each worker count W a fresh local Ray is started with num_cpus=W (one task per CPU) and a
runtime_env that holds every library thread pool of a task to one thread (tokenizers' Rayon pool,
Arrow's and BLAS's OpenMP-sized pools), so W workers use W cores. Each run writes a fresh output
and is timed from the driver (`run_pipeline`, Ray startup and worker imports excluded by a
warm-up). Baseline: the first worker count in the same invocation. Prints per-stage seconds, the
per-core throughput figures used for "Scaling out" arithmetic (read+hash MB/s per core, tokens/s
per core, whole pipeline MB/s per core), and as the last line a JSON object with `speedup`.
The config is configs/single-sample.yaml (the sample as one input) with work units of input /
(16 x max workers) bytes, so that every worker count gets enough units to balance, and bigger
shards (override with --set).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import ray

from pipeline.config import load_config
from pipeline.run.driver import run_pipeline
from pipeline.run.ray_env import hide_local_auth_notice

SAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "single-sample.yaml"
DEFAULT_SETS = ["pack.shard_bytes=32MiB", "dedup.partitions=8"]
UNITS_PER_WORKER = 16  # the last wave's imbalance is then at most ~1/16 of a stage
ONE_THREAD_ENV = {
    "RAYON_NUM_THREADS": "1",
    "RAYON_RS_NUM_CPUS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}


@ray.remote(num_cpus=1)
def _warm_worker() -> int:
    """Start a worker and import what the stages import, so timings exclude process start-up."""
    import pipeline.run.neardup  # noqa: F401
    import pipeline.run.pack_tasks  # noqa: F401
    import pipeline.run.tasks  # noqa: F401
    import pipeline.run.tokenize_tasks  # noqa: F401

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


def run_once(args: argparse.Namespace, workers: int, work: Path, sets: list[str]) -> dict:
    out = work / f"w{workers}-{time.monotonic_ns()}"
    cfg = load_config(args.config, input_uri=args.input, output_uri=str(out), overrides=sets)
    hide_local_auth_notice()
    ray.init(
        address="local",
        num_cpus=workers,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": ONE_THREAD_ENV},
    )
    try:
        pids = set(ray.get([_warm_worker.remote() for _ in range(workers)]))
        start = time.perf_counter()
        result = run_pipeline(cfg, show_progress=False)
        wall = time.perf_counter() - start
    finally:
        ray.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    stages = {s.name: s for s in result.stages}
    return {
        "workers": workers,
        "warm_workers": len(pids),
        "wall_s": wall,
        "stages": {name: s.seconds for name, s in stages.items()},
        "read_bytes": stages["read+hash"].bytes if "read+hash" in stages else 0,
        "tokens": result.manifest["counts"]["tokens"],
        "docs_out": result.manifest["counts"]["docs_out"],
    }


def per_core(run: dict, input_bytes: int) -> dict[str, float]:
    """Throughput per core of one run: a stage's amount / (its wall seconds x cores used)."""
    w, stages = run["workers"], run["stages"]
    figures = {"pipeline_mb_s_per_core": input_bytes / 1e6 / (run["wall_s"] * w)}
    if stages.get("read+hash"):
        figures["read_hash_mb_s_per_core"] = input_bytes / 1e6 / (stages["read+hash"] * w)
    if stages.get("tokenize"):
        figures["tokens_s_per_core"] = run["tokens"] / (stages["tokenize"] * w)
    return {k: round(v) if k.startswith("tokens") else round(v, 2) for k, v in figures.items()}


def print_table(runs: dict[int, dict], input_bytes: int) -> None:
    counts = list(runs)
    base = runs[counts[0]]
    names = list(base["stages"])
    header = f"{'stage':<12}" + "".join(f" {f'W={w} s':>9}" for w in counts)
    header += "".join(f" {f'x{w}':>7}" for w in counts[1:])
    print(header)
    for name in [*names, "wall"]:
        secs = [
            runs[w]["wall_s"] if name == "wall" else runs[w]["stages"].get(name, 0.0)
            for w in counts
        ]
        line = f"{name:<12}" + "".join(f" {s:>9.2f}" for s in secs)
        line += "".join(f" {secs[0] / s if s else 0.0:>7.2f}" for s in secs[1:])
        print(line)
    print()
    for w in counts:
        figures = per_core(runs[w], input_bytes)
        print(f"W={w}: " + ", ".join(f"{k} {v:,}" for k, v in figures.items()))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline bench scaling", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--input", required=True, help="a local corpus folder (make_corpus)")
    parser.add_argument("--workers", default="1,2", help="worker counts, baseline first")
    parser.add_argument("--repeat", type=int, default=1, help="runs per count; best is kept")
    parser.add_argument(
        "--config", default=str(SAMPLE_CONFIG), help="config the runs start from (the sample's)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    parser.add_argument("--work", help="folder for the outputs (default: a temp folder)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    os.environ.update(ONE_THREAD_ENV)  # the driver's own pools too
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

    print(
        f"input {input_bytes / 1e6:.1f} MB, {runs[counts[0]]['docs_out']:,} docs out,"
        f" {runs[counts[0]]['tokens']:,} tokens; best of {args.repeat};"
        f" os.cpu_count() = {os.cpu_count()} (shared: other processes add noise)"
    )
    print(f"config {args.config} --set {' '.join(sets)}")
    print_table(runs, input_bytes)
    base = runs[counts[0]]
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
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

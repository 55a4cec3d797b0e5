"""Benchmark: how requests, bytes and memory grow with the data (the whole pipeline, local S3).

    python -m pipeline bench scale --input DIR | --mb N
        [--fractions 1/16,1/4,1] [--unit-bytes 2MiB] [--shard-bytes 1MiB]
        [--partition-bytes 16MiB] [--workers 2] [--set KEY=VALUE]

The corpus (a make_corpus folder, or one made with `--mb` in a temp folder) is cut by file, in
path order, into its first 1/16, 1/4 and all; each part is uploaded to a SeaweedFS S3 server on
loopback (upload not timed) and run end to end with work units, shards and dedup partitions
scaled down together (2 MiB units, 1 MiB shards instead of 256 MiB), so that unit, shard and
partition counts grow with the data as they would on a 10 TB corpus. Every size gets a fresh
local Ray, so a worker's peak RSS belongs to that size.

Per size and stage it prints requests by kind, mean GET bytes, bytes read and written, bytes
moved per input byte, seconds and peak task RSS (from the run's stats.json: every task's storage
counters and the driver's own). Last line JSON:
`data_growth` (input bytes, largest / smallest), `requests_growth` (all requests),
`pack_gets_growth`, `min_mean_get_bytes` (smallest mean GET among the stages that move documents
or tokens, at the largest size), `rss_growth` (peak task RSS, largest / smallest),
`bytes_moved_per_input_byte` (per size: (read + written) / listed input bytes), and `targets`:
requests and pack GETs grow at most 1.3 x the data, peak task RSS at most 1.5 x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import ray
from pydantic import ByteSize

from pipeline.bench.scaling import SAMPLE_CONFIG
from pipeline.cli import args as cli_args
from pipeline.config.loader import load_config
from pipeline.config.sections import DedupConfig, StorageConfig
from pipeline.core.storage import Location
from pipeline.formats.run_stats import parse_stats
from pipeline.run.driver import run_pipeline
from pipeline.run.ray_env import WORKER_ENV, hide_local_auth_notice, shutdown_ray
from pipeline.testing.s3 import dummy_aws_env, seaweedfs_server

BUCKET = "bench-scale"
DATA_STAGES = ("read+hash", "near", "pack")  # stages that move documents or tokens
REQUEST_KINDS = ("get_requests", "put_requests", "head_requests", "list_requests")


def parts_of(root: Path, fractions: list[Fraction]) -> list[list[Path]]:
    """The first fraction f of the corpus by bytes, whole files in path order, for each f."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    parts = []
    for f in fractions:
        chosen, size = [], 0
        for p in files:
            if size >= f * total:
                break
            chosen.append(p)
            size += p.stat().st_size
        parts.append(chosen)
    return parts


def upload(files: list[Path], root: Path, dest: Location) -> int:
    for p in files:
        (dest / str(p.relative_to(root))).write_bytes(p.read_bytes())
    dest.fs.invalidate_cache()
    return sum(p.stat().st_size for p in files)


def run_size(args: argparse.Namespace, storage: dict, label: str, sets: list[str]) -> dict:
    cfg = load_config(
        args.config,
        input_uri=f"s3://{BUCKET}/in-{label}",
        output_uri=f"s3://{BUCKET}/out-{label}",
        overrides=[*storage_sets(storage), *sets],
    )
    hide_local_auth_notice()
    ray.init(
        address="local",
        num_cpus=args.workers,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": dict(WORKER_ENV)},
    )
    try:
        start = time.perf_counter()
        result = run_pipeline(cfg, show_progress=False)
        wall = time.perf_counter() - start
    finally:
        shutdown_ray()
    run_id = result.manifest["run"]["run_id"]
    dataset = Location.from_uri(f"s3://{BUCKET}/out-{label}/{cfg.name}", cfg.storage)
    stats = parse_stats((dataset / f"_work/runs/{run_id}/stats.json").read_bytes())
    return {
        "wall_s": wall,
        "stages": [s.model_dump() for s in stats.stages],
        "counts": result.manifest["counts"],
        "moved": stats.bytes_moved_per_input_byte.get("total"),
    }


def storage_sets(storage: dict) -> list[str]:
    return [f"storage.{k}={v}" for k, v in storage.items()]


def stage_rows(stages: list[dict]) -> dict[str, dict]:
    """Per stage name (waves of one name summed): requests by kind, bytes, seconds, peak RSS."""
    rows: dict[str, dict] = {}
    for s in stages:
        row = rows.setdefault(
            s["stage"], {"seconds": 0.0, "peak_rss_mb": 0.0, **{k: 0 for k in REQUEST_KINDS}}
        )
        io = s.get("io", {})
        for k in (*REQUEST_KINDS, "bytes_read", "bytes_written"):
            row[k] = row.get(k, 0) + io.get(k, 0)
        row["seconds"] += s.get("seconds", 0.0)
        row["peak_rss_mb"] = max(row["peak_rss_mb"], s.get("peak_rss_mb", 0.0))
    for row in rows.values():
        row["requests"] = sum(row[k] for k in REQUEST_KINDS)
        gets = row["get_requests"]
        row["mean_get_bytes"] = row["bytes_read"] / gets if gets else 0
    return rows


def print_size(label: str, input_bytes: int, run: dict, rows: dict[str, dict]) -> None:
    print(f"\n== {label}: input {input_bytes / 1e6:.1f} MB, wall {run['wall_s']:.1f} s,"
          f" {run['counts']['docs_out']:,} docs out, {run['counts']['tokens']:,} tokens,"
          f" bytes moved {run['moved']} x input")
    print(f"{'stage':<11}{'GET':>8}{'PUT':>8}{'HEAD':>7}{'LIST':>6}{'mean GET':>11}"
          f"{'read MB':>9}{'write MB':>9}{'moved':>7}{'s':>7}{'RSS MB':>8}")
    for name, r in rows.items():
        print(f"{name:<11}{r['get_requests']:>8,}{r['put_requests']:>8,}{r['head_requests']:>7,}"
              f"{r['list_requests']:>6,}{r['mean_get_bytes'] / 1e3:>9,.1f}KB"
              f"{r['bytes_read'] / 1e6:>9.1f}{r['bytes_written'] / 1e6:>9.1f}"
              f"{(r['bytes_read'] + r['bytes_written']) / input_bytes:>6.2f}x"
              f"{r['seconds']:>7.1f}{r['peak_rss_mb']:>8.0f}")


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench scale", description=__doc__.split("\n\n")[0]
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", type=Path, help="a local corpus folder (make_corpus)")
    src.add_argument("--mb", type=float, help="make a corpus of this many MB first")
    parser.add_argument(
        "--fractions", default="1/16,1/4,1", help="shares of the corpus to run, comma-separated"
    )
    parser.add_argument(
        "--unit-bytes", default="2MiB", help="ingest.unit_bytes (scaled down with the corpus)"
    )
    parser.add_argument(
        "--shard-bytes", default="1MiB", help="pack.shard_bytes (scaled down with the corpus)"
    )
    parser.add_argument(
        "--partition-bytes",
        default="16MiB",
        help="dedup.partition_bytes (scaled down with units; ignored where the code has none)",
    )
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (CPUs) per run")
    parser.add_argument(
        "--config", default=str(SAMPLE_CONFIG), help="config the runs start from (the sample's)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    fractions = [Fraction(f) for f in args.fractions.split(",")]
    os.environ.update(WORKER_ENV)
    os.environ.pop("RAY_ADDRESS", None)

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        root = args.input
        if root is None:
            from pipeline.tools import make_corpus

            root = tmp / "corpus"
            make_corpus.main(["--out", str(root), "--mb", str(args.mb)])
        sets = [
            f"ingest.unit_bytes={int(ByteSize._validate(args.unit_bytes, None))}",
            f"pack.shard_bytes={int(ByteSize._validate(args.shard_bytes, None))}",
        ]
        if "partition_bytes" in DedupConfig.model_fields:  # partitions from the listed bytes
            sets += ["dedup.partitions=null", f"dedup.partition_bytes={args.partition_bytes}"]
        sets += args.set
        results = []
        with dummy_aws_env(), seaweedfs_server() as endpoint:
            storage = {"endpoint_url": endpoint}
            base = Location.from_uri(f"s3://{BUCKET}", StorageConfig(endpoint_url=endpoint))
            base.fs.mkdir(BUCKET)
            for f, files in zip(fractions, parts_of(root, fractions), strict=True):
                label = str(f).replace("/", "_")
                input_bytes = upload(files, root, base / f"in-{label}")
                run = run_size(args, storage, label, sets)
                rows = stage_rows(run["stages"])
                print_size(str(f), input_bytes, run, rows)
                results.append({"fraction": str(f), "input_bytes": input_bytes, "run": run,
                                "rows": rows})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    small, large = results[0], results[-1]

    def total(res: dict, key: str, stages=None) -> float:
        return sum(r[key] for n, r in res["rows"].items() if stages is None or n in stages)

    def peak(res: dict) -> float:
        return max(r["peak_rss_mb"] for r in res["rows"].values())

    data_growth = large["input_bytes"] / small["input_bytes"]
    figures = {
        "sizes_mb": [round(r["input_bytes"] / 1e6, 1) for r in results],
        "sets": sets,
        "data_growth": round(data_growth, 2),
        "requests_growth": round(total(large, "requests") / total(small, "requests"), 2),
        "pack_gets_growth": round(
            total(large, "get_requests", ("pack",)) / total(small, "get_requests", ("pack",)), 2
        ),
        "min_mean_get_bytes": round(
            min(r["mean_get_bytes"] for n, r in large["rows"].items()
                if n in DATA_STAGES and r["get_requests"])
        ),
        "rss_growth": round(peak(large) / peak(small), 3),
        "bytes_moved_per_input_byte": [r["run"]["moved"] for r in results],
        "requests_by_stage": {
            r["fraction"]: {n: row["requests"] for n, row in r["rows"].items()} for r in results
        },
    }
    figures["targets"] = {
        "requests_growth": figures["requests_growth"] <= 1.3 * data_growth,
        "pack_gets_growth": figures["pack_gets_growth"] <= 1.3 * data_growth,
        "rss_growth": figures["rss_growth"] <= 1.5,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

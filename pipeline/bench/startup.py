"""Benchmark: the fixed cost of a small run, first after install and warm.

    python -m pipeline bench startup [--config configs/sample.yaml] [--warm 3]

Runs `python -m pipeline run --config CONFIG --output FRESH --quiet` as a user would, each time
into a fresh output folder (nothing reused). The first run gets a fresh kernel cache
(PIPELINE_CACHE_DIR) into which, as the README's install does, `python -m pipeline warm` has
compiled the loops (its seconds printed as `install warm`); with `--no-install-warm` the cache is
empty and the run compiles them itself, in the background as Ray starts. The `--warm` runs after
it share that cache. Per run it prints the wall time, the summary's
time line (Ray start, worker start, stages, commit, report, other: run/clock.py) and `outside`:
the interpreter's start, imports and Ray's shutdown, which the run's own clock cannot see; the
CPU seconds of its process tree (the driver, Ray's processes and workers, adopted and reaped
here), which a shared machine's load does not inflate as the wall time; and the load average
around it. Last line JSON: `first_wall_s`, `warm_wall_s` (each warm run), `cpu_s` (each run),
`warm_median_s`, `first_minus_warm_s`, `install_warm_s` (null without it), `phases` (per run),
`loadavg`, and `targets`: warm median <= 10 s, first <= warm median + 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.cli import args as cli_args

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sample.yaml"
WARM_TARGET_S, FIRST_EXTRA_TARGET_S = 10.0, 10.0


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench startup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", type=Path, default=CONFIG, help="the run's config")
    parser.add_argument("--warm", type=int, default=3, help="warm runs after the first")
    parser.add_argument(
        "--no-install-warm",
        dest="install_warm",
        action="store_false",
        help="leave the cache empty before the first run (no `pipeline warm` at install)",
    )
    return parser


def install_warm(cache: Path) -> float:
    """`python -m pipeline warm` into `cache`, as the README's install runs it: its seconds."""
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(cache)}
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "pipeline", "warm"]
    subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return round(time.perf_counter() - t0, 3)


def phases_of(stdout: str) -> dict[str, float]:
    """The summary's time line as {phase: seconds, ..., "total": seconds}."""
    line = next(x for x in stdout.splitlines() if x.startswith("time "))
    total, inner = re.fullmatch(r"time +([\d.]+) s  \(([^)]*)\).*", line).groups()
    phases = {k: float(v) for k, v in (p.rsplit(" ", 1) for p in inner.split(", "))}
    return phases | {"total": float(total)}


def _adopt_orphans() -> None:
    """Ray's workers are the raylet's children: made this process's when their parent exits
    (Linux's child subreaper), so that their CPU time is counted once they are reaped here."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap_orphans(timeout_s: float = 30.0) -> None:
    """Wait for the run's adopted processes to exit (they end with the run) and reap them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            return
        if pid == 0:
            time.sleep(0.05)


def timed_run(config: Path, out: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PIPELINE_CACHE_DIR"] = str(cache)
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "pipeline", "run", "--config", str(config), "--quiet"]
    done = subprocess.run([*argv, "--output", str(out)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    _reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    if done.returncode != 0:
        raise SystemExit(f"run failed (exit {done.returncode}): {done.stderr[-3000:]}")
    phases = phases_of(done.stdout)
    phases["outside"] = round(wall - phases["total"], 3)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 2), "phases": phases,
            "load_before": load, "load_after": os.getloadavg()[0]}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    _adopt_orphans()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        cache = Path(tmp) / "cache"  # empty: the first run compiles, unless warmed at install
        installed = install_warm(cache) if args.install_warm else None
        if installed is not None:
            print(f"install warm {installed:.2f} s (python -m pipeline warm)")
        runs = [timed_run(args.config, Path(tmp) / f"out{i}", cache) for i in range(1 + args.warm)]
    columns = ["ray start", "worker start", "stages", "commit", "report", "other", "outside"]
    print(
        f"{'run':<8} {'wall s':>7} {'cpu s':>6} "
        + " ".join(f"{c:>12}" for c in columns)
        + "  load 1m"
    )
    for i, r in enumerate(runs):
        name = "first" if i == 0 else f"warm {i}"
        cells = " ".join(f"{r['phases'].get(c, 0.0):>12.2f}" for c in columns)
        load = f"{r['load_before']:.2f}-{r['load_after']:.2f}"
        print(f"{name:<8} {r['wall_s']:>7.2f} {r['cpu_s']:>6.1f} {cells}  {load}")
    first, warm = runs[0]["wall_s"], [r["wall_s"] for r in runs[1:]]
    median = statistics.median(warm) if warm else float("nan")
    figures = {
        "first_wall_s": first,
        "warm_wall_s": warm,
        "cpu_s": [r["cpu_s"] for r in runs],
        "warm_median_s": round(median, 3),
        "warm_spread_s": round(max(warm) - min(warm), 3) if warm else None,
        "first_minus_warm_s": round(first - median, 3),
        "install_warm_s": installed,
        "phases": [r["phases"] for r in runs],
        "loadavg": [[r["load_before"], r["load_after"]] for r in runs],
        "cpus": os.cpu_count(),
        "targets": {
            "warm_le_10s": median <= WARM_TARGET_S,
            "first_le_warm_plus_10s": first - median <= FIRST_EXTRA_TARGET_S,
        },
    }
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()

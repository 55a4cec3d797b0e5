"""Benchmark: a tokenize task's peak RSS with one giant document, per engine.

    python -m pipeline bench doc-memory [--mb 15] [--tokenizer configs/tokenizer.json]
        [--engines fastokens,tokenizers] [--code DIR]

Builds a unit of real text: 200 ordinary documents (sample/ files) plus one document of `--mb`
MB (the same text repeated), and runs tokenize_tasks.tokenize_docs on it in a fresh child
process per engine (verify_fraction 1.0 with fastokens, so its reference re-encoding runs too:
the task's worst case). The child's peak RSS comes from wait4. `--code DIR` runs the children
with DIR's `pipeline` (e.g. an older checkout, for a before/after). Prints one line per engine
and a JSON last line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.cli import args as cli_args

REPO = Path(__file__).resolve().parents[2]

_CHILD = """
import sys
from pipeline.config.loader import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.run import tokenize_tasks
work, tokenizer, engine = sys.argv[1:4]
cfg = Config.model_validate({
    "name": "bench", "input": {"uri": work}, "output": {"uri": work},
    "tokenize": {"tokenizer": tokenizer, "engine": engine, "verify_fraction": 1.0},
})
import pyarrow.parquet as pq
layout = RunLayout(Location.from_uri(work), "bench", "read", "tok-" + engine)
raw = open(tokenizer, "rb").read()
docs = pq.read_table(work + "/docs.parquet")
r = tokenize_tasks.tokenize_docs(layout, "u0", docs, cfg, raw, engine)
import pipeline; print(r.docs, r.tokens, pipeline.__file__)
"""


def sample_text() -> str:
    parts = []
    for path in sorted((REPO / "sample").rglob("*")):
        if path.is_file() and path.suffix in (".jsonl", ".txt", ".md"):
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def stage_unit(work: str, mb: float) -> int:
    """The unit's documents (a parquet file of the benchmark's own, which the child reads as the
    read task holds them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.ingest.records import DOCS_SCHEMA

    text = sample_text()
    size = int(mb * 2**20)
    giant = (text * (size // len(text) + 1))[:size]
    small = [text[i * 3000 : i * 3000 + 3000] for i in range(200)]
    texts = [giant, *small]
    docs = pa.table(
        [
            [f"d{i}" for i in range(len(texts))],
            ["bench"] * len(texts),
            list(range(len(texts))),
            texts,
        ],
        schema=DOCS_SCHEMA,
    )
    pq.write_table(docs, f"{work}/docs.parquet")
    return len(giant.encode())


def peak_rss_mb(work: str, tokenizer: str, engine: str, code: str) -> tuple[float, float, str]:
    """(the child's own peak RSS in MB, its wall seconds, its output line)."""
    env = {**os.environ, "PYTHONPATH": code}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, work, tokenizer, engine],
            env=env,
            cwd=work,
            stdout=out,
            stderr=err,
        )
        _, status, usage = os.wait4(child.pid, 0)  # this child's rusage, not all children's
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise SystemExit(f"{engine}: child failed: {err.read().decode()[-2000:]}")
        line = out.read().decode().strip()
    return usage.ru_maxrss / 1024, time.perf_counter() - start, line


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.Parser(
        prog="python -m pipeline bench doc-memory", description=__doc__.split("\n")[0]
    )
    p.add_argument("--mb", type=float, default=15.0, help="size of the giant document, MB")
    p.add_argument(
        "--tokenizer",
        default=str(REPO / "configs" / "tokenizer.json"),
        help="the tokenizer.json the task encodes with",
    )
    p.add_argument(
        "--engines", default="fastokens,tokenizers", help="comma-separated engines, one child each"
    )
    p.add_argument("--code", default=str(REPO), help="folder whose `pipeline` the child runs")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="doc-memory-") as work:
        giant = stage_unit(work, args.mb)
        for engine in args.engines.split(","):
            rss, seconds, out = peak_rss_mb(work, args.tokenizer, engine, args.code)
            results[engine] = {"peak_rss_mb": round(rss), "seconds": round(seconds, 1)}
            print(
                f"{engine:<11} one {giant / 2**20:.1f} MB document + 200 small: peak RSS"
                f" {rss:,.0f} MB, {seconds:.1f} s (docs, tokens: {out})"
            )
    print(json.dumps({"doc_mb": args.mb, "code": args.code, "engines": results}))

"""The commands over the installation rather than a dataset: `bench` (the benchmarks),
`config` (the configuration reference) and `warm` (compile the compiled loops once),
each with its parser."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "read": "pipeline.bench.read",
    "scaling": "pipeline.bench.scaling",
    "scale": "pipeline.bench.scale",
    "tokenize": "pipeline.bench.tokenize",
    "minhash": "pipeline.bench.minhash",
    "dedup-quality": "pipeline.bench.dedup_quality",
    "listing": "pipeline.bench.listing",
    "doc-memory": "pipeline.bench.doc_memory",
    "pieces": "pipeline.bench.pieces",
    "curate": "pipeline.bench.curate",
    "extract": "pipeline.bench.extract",
    "warc-parse": "pipeline.bench.warc_parse",
    "classifier": "pipeline.bench.classifier",
    "startup": "pipeline.bench.startup",
}


def cmd_bench(args: argparse.Namespace) -> int:
    # a benchmark prints its own table and JSON line; what its main() returns is not an exit code
    importlib.import_module(BENCHES[args.name]).main(args.rest)
    return 0


def bench_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser(
        "bench",
        help="benchmarks (each prints a table and a JSON last line)",
        description="Run one benchmark; `bench NAME --help` lists its own options.",
    )
    bench.add_argument("name", choices=sorted(BENCHES), help="the benchmark")
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")
    bench.set_defaults(func=cmd_bench)


def cmd_config(args: argparse.Namespace) -> int:
    from pipeline.config import reference as config_reference

    print(
        config_reference.markdown() if args.markdown else config_reference.defaults_yaml(), end=""
    )
    return 0


def config_parser(sub: argparse._SubParsersAction) -> None:
    config = sub.add_parser(
        "config",
        help="print the configuration reference: every key, its default and meaning",
        description="Print every configuration key with its default and meaning.",
    )
    what = config.add_mutually_exclusive_group()
    what.add_argument(
        "--defaults",
        action="store_true",
        help="the full default config as commented YAML (the default output)",
    )
    what.add_argument(
        "--markdown", action="store_true", help="the reference as Markdown (docs/configuration.md)"
    )
    config.set_defaults(func=cmd_config)


def cmd_warm(args: argparse.Namespace) -> int:
    from pipeline.dedup import warm_kernels

    return warm_kernels.main(tuple(args.steps))


def warm_parser(sub: argparse._SubParsersAction) -> None:
    warm = sub.add_parser(
        "warm",
        help="compile the compiled loops once, after install (runs then compile nothing)",
        description="Compile dedup's and the curation steps' numba loops into the machine's"
        " shared cache (PIPELINE_CACHE_DIR, else ~/.cache/pipeline), as the README's install"
        " does: a run finds them there and compiles nothing. Exit 1 where they cannot"
        " compile, 2 for an unknown step.",
    )
    warm.add_argument(
        "steps", nargs="*", metavar="STEP", help="curation steps to warm (default: every one)"
    )
    warm.set_defaults(func=cmd_warm)

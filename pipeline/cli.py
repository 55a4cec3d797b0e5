"""Command line: `python -m pipeline run|verify|bench ...`."""

from __future__ import annotations

import argparse
import importlib
import sys

from pipeline.config import ConfigError, StorageConfig, load_config


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config file (see configs/)")
    parser.add_argument("--input", help="input URI (folder, file:// or s3://), overrides input.uri")
    parser.add_argument("--output", help="output URI, overrides output.uri")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override any config key, e.g. --set pack.shard_bytes=64MiB")


def _load(args: argparse.Namespace):
    return load_config(args.config, input_uri=args.input, output_uri=args.output,
                       overrides=args.set)


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.run import RunError, run_pipeline
    from pipeline.summary import print_summary

    cfg = _load(args)
    try:
        result = run_pipeline(cfg, show_progress=not args.quiet)
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return RunError.exit_code
    print_summary(result)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from pipeline.storage import Location
    from pipeline.verify import VerifyError, verify_version

    storage = (load_config(args.config, check_paths=False).storage if args.config
               else StorageConfig(endpoint_url=args.endpoint_url))
    try:
        manifest = verify_version(Location.from_uri(args.uri, storage))
    except VerifyError as e:
        print(f"verify FAILED: {e}", file=sys.stderr)
        return 1
    counts = manifest["counts"]
    print(f"verify OK: {manifest['name']} version {manifest['version']}:"
          f" {len(manifest['shards'])} shards, {counts['docs_out']} documents,"
          f" {counts['tokens']} tokens")
    return 0


BENCHES = {
    "tokenize": "pipeline.bench.tokenize",
    "minhash": "pipeline.bench.minhash",
    "dedup-quality": "pipeline.bench.dedup_quality",
    "listing": "pipeline.bench.listing",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="list, read, dedup, tokenize, pack and commit a version")
    _add_config_args(run)
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.set_defaults(func=cmd_run)

    verify = sub.add_parser("verify", help="check a committed version against its manifest")
    verify.add_argument("uri", help="a version folder, or a dataset folder (newest version)")
    verify.add_argument("--config", help="take storage options (endpoint) from this config")
    verify.add_argument("--endpoint-url", help="S3 endpoint for s3:// URIs")
    verify.set_defaults(func=cmd_verify)

    bench = sub.add_parser("bench", help="benchmarks (each prints a table and a JSON last line)")
    bench.add_argument("name", choices=sorted(BENCHES))
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")
    bench.set_defaults(func=lambda a: importlib.import_module(BENCHES[a.name]).main(a.rest) or 0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return ConfigError.exit_code

"""`plan`: the reading napkin (request size, in-flight requests, shard size), measured
with --probe, or with --corpus-bytes the per-stage dry run of a run at that size."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli import args as cli_args
from pipeline.cli.common import COMMAND_URIS, add_storage_args, storage_from_args
from pipeline.cli.exit_codes import CONFIG_ERROR
from pipeline.config.loader import load_config
from pipeline.core.storage_errors import refusal_cause


def cmd_plan(args: argparse.Namespace) -> int:
    if args.corpus_bytes:
        return cmd_plan_corpus(args)
    from pipeline.core.units import MB
    from pipeline.stream.plan import plan_lines

    latency_s, bandwidth = args.latency_ms / 1000, args.bandwidth_mbps * MB
    if args.probe:
        from pipeline.stream.fetch import FetchError, probe_uri

        COMMAND_URIS[:] = [args.probe]
        try:
            probe = probe_uri(args.probe, storage_from_args(args))
        except (FetchError, ValueError, FileNotFoundError) as e:  # a folder, no object there
            if refusal_cause(e) is not None:
                raise
            print(f"error: --probe {args.probe}: not an object or a version: {e}", file=sys.stderr)
            return CONFIG_ERROR
        latency_s, bandwidth = probe.latency_s, probe.bandwidth
    for line in plan_lines(
        latency_s,
        bandwidth,
        args.target_gbps * 1e9,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        tokens_per_s_per_gpu=args.tokens_per_s_per_gpu,
        bytes_per_token=args.bytes_per_token,
        measured=bool(args.probe),
    ):
        print(line)
    return 0


def cmd_plan_corpus(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pipeline.report import dry_run, dry_run_printout

    if args.set and not args.config:  # the dry run's defaults are not a config: say so, not ignore
        print("error: --set needs --config (e.g. --config configs/s3.yaml)", file=sys.stderr)
        return 2
    cfg = load_config(args.config, overrides=args.set, check_paths=False) if args.config else None
    rates = None
    if args.rates:
        try:
            text = (Path(args.rates).read_text().strip().splitlines() or [""])[-1]
            rates = dry_run.rates_from_bench(json.loads(text))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
            print(f"error: --rates {args.rates}: not `bench scaling` JSON: {e!r}", file=sys.stderr)
            return CONFIG_ERROR
    try:
        cut, stages = dry_run.plan_for_config(
            cfg,
            args.corpus_bytes,
            docs=args.docs,
            unit_bytes=args.unit_bytes,
            shard_bytes=args.shard_bytes,
            file_bytes=args.file_bytes,
            rates=rates,
            token_ratio=args.token_ratio,
            stored_ratio=args.stored_ratio,
        )
    except dry_run.PlanTooLarge as e:
        print(f"error: --corpus-bytes {args.corpus_bytes:,}: {e}", file=sys.stderr)
        return CONFIG_ERROR
    for line in dry_run_printout.dry_run_lines(cut, stages):
        print(line)
    if args.json:
        Path(args.json).write_text(dry_run_printout.dry_run_json(cut, stages))
    return 0


def plan_parser(sub: argparse._SubParsersAction) -> None:
    from pipeline.config.sections import IngestConfig, PackConfig
    from pipeline.core.units import MB
    from pipeline.report.dry_run_assumptions import DOC_BYTES, TOKEN_BYTES_RATIO, TOKEN_STORED_RATIO
    from pipeline.stream.plan import DEFAULT_BANDWIDTH, DEFAULT_LATENCY_S

    units = IngestConfig().unit_bytes.human_readable()
    shards = PackConfig().shard_bytes.human_readable()
    parser = sub.add_parser(
        "plan",
        help="request size, in-flight requests, shard size; --corpus-bytes: dry run at a size",
        description="The reading napkin (request size, in-flight requests, shard size, per-node"
        " bytes/s) or, with --corpus-bytes, the per-stage dry run of a run at that input size.",
    )
    parser.add_argument(
        "--latency-ms",
        type=cli_args.positive_float,
        default=DEFAULT_LATENCY_S * 1000,
        help="first-byte latency L (default 50)",
    )
    parser.add_argument(
        "--bandwidth-mbps",
        type=cli_args.positive_float,
        default=DEFAULT_BANDWIDTH / MB,
        help="bandwidth of one connection B, MB/s (default 100)",
    )
    parser.add_argument(
        "--target-gbps",
        type=cli_args.positive_float,
        default=2.0,
        help="throughput to sustain X, GB/s (default 2)",
    )
    parser.add_argument(
        "--probe",
        metavar="URI",
        type=cli_args.existing_path,
        help="measure L and B first against this object, or the largest shard of"
        " a version / dataset folder",
    )
    add_storage_args(parser)  # the --probe URI's endpoint: --config/--set or --endpoint-url
    parser.add_argument(
        "--nodes",
        type=cli_args.positive_int,
        default=1,
        help="training nodes reading the shards (default 1)",
    )
    parser.add_argument(
        "--gpus-per-node",
        type=cli_args.positive_int,
        help="GPUs per node: with --tokens-per-s-per-gpu, sets X",
    )
    parser.add_argument(
        "--tokens-per-s-per-gpu",
        type=cli_args.positive_float,
        help="training throughput per GPU, tokens/s: X = nodes x GPUs x this x bytes per token",
    )
    parser.add_argument(
        "--bytes-per-token",
        type=cli_args.positive_int,
        default=2,
        help="token bytes in the shards (default 2)",
    )
    scale = parser.add_argument_group(
        "dry run at a corpus size (see dry_run.py); --config (and --set) also give its unit,"
        " shard, dedup and price settings"
    )
    scale.add_argument(
        "--corpus-bytes",
        type=cli_args.size,
        help="e.g. 10TB: print the per-stage dry run instead",
    )
    scale.add_argument(
        "--docs",
        type=cli_args.positive_int,
        help=f"documents in the corpus (default bytes / {DOC_BYTES:,})",
    )
    scale.add_argument(
        "--unit-bytes",
        type=cli_args.size,
        help=f"ingest.unit_bytes (default: the config's; without one {units})",
    )
    scale.add_argument(
        "--shard-bytes",
        type=cli_args.size,
        help=f"pack.shard_bytes (default: the config's; without one {shards})",
    )
    scale.add_argument(
        "--file-bytes",
        type=cli_args.size,
        default="1GiB",
        help="size of each input file (default 1GiB)",
    )
    scale.add_argument(
        "--token-ratio",
        type=cli_args.ratio,
        help="token bytes per text byte at 2 B a token (default"
        f" {TOKEN_BYTES_RATIO}; a corpus's own: a run's tokens x 2 / text bytes)",
    )
    scale.add_argument(
        "--stored-ratio",
        type=cli_args.ratio,
        help="stored / raw bytes of the token files (default"
        f" {TOKEN_STORED_RATIO}; a corpus's own: its token files' zstd ratio)",
    )
    scale.add_argument(
        "--rates",
        type=cli_args.existing_file,
        help="`bench scaling` JSON (its last line) for core-hours",
    )
    scale.add_argument(
        "--json", metavar="PATH", type=cli_args.file_to_write, help="also write the dry run as JSON"
    )
    parser.set_defaults(func=cmd_plan)

"""The commands that read a config's sources: `run` (a new version, or --dry-run) and
`curate-preview` (what curation would remove on a sample), each with its parser."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli import args as cli_args
from pipeline.cli.common import add_config_args, check_sources, config_from_args
from pipeline.cli.exit_codes import exit_codes_help


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.core.lease import LeaseHeld
    from pipeline.run.driver import run_pipeline
    from pipeline.run.results import RunError
    from pipeline.run.summary import print_summary

    cfg = config_from_args(args)
    if args.dry_run:  # the output is never touched: only the inputs must be reachable
        from pipeline.run.dry_run import dry_run_lines

        check_sources(cfg)
        print("\n".join(dry_run_lines(cfg)))
        return 0
    check_sources(cfg, cfg.output.uri)
    try:
        result = run_pipeline(cfg, show_progress=not args.quiet, allow_empty=args.allow_empty)
    except (RunError, LeaseHeld) as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print_summary(result)
    return 0


def run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run",
        help="list, read, dedup, tokenize, pack and commit a version",
        description="Run the pipeline over the config's sources and commit a new version of"
        " the dataset under output.uri/name (unchanged input and config: the same bytes). A"
        " rerun resumes from the finished units.",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_args(run)
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument(
        "--allow-empty",
        action="store_true",
        help="publish even when the input yields no document, a source holds no document, or"
        " a source of the newest version shrank by more than run.max_input_shrink or is gone"
        " (renamed or dropped) (refused otherwise, exit 3)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="list what would be read, per source (files, bytes, skipped files, the first"
        " record's fields, units, partitions) and write nothing",
    )
    run.set_defaults(func=cmd_run)


def cmd_curate_preview(args: argparse.Namespace) -> int:
    from pipeline.run.curate_preview import preview_lines
    from pipeline.run.results import RunError

    cfg = config_from_args(args)
    check_sources(cfg)
    try:
        lines = preview_lines(cfg, args.sample)
    except RunError as e:  # a `python` step that misbehaved: one line
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print("\n".join(lines))
    return 0


def curate_preview_parser(sub: argparse._SubParsersAction) -> None:
    preview = sub.add_parser(
        "curate-preview",
        help="what each curation step would remove, on a sample of each source",
        description="Run each source's curation chain (docs/curate.md) on its first documents"
        " and print, per step, how many it removes or changes, with examples. Writes nothing.",
    )
    add_config_args(preview)
    preview.add_argument(
        "--sample", type=cli_args.positive_int, default=1000, help="documents read per source"
    )
    preview.set_defaults(func=cmd_curate_preview)

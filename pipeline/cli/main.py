"""Command line of the pipeline: list, read, dedup, tokenize and pack text into Megatron shards."""

from __future__ import annotations

import argparse
import os
import sys

from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

from pipeline.cli import args as cli_args
from pipeline.cli.common import COMMAND_URIS
from pipeline.cli.cost_commands import report_parser, retain_parser
from pipeline.cli.exit_codes import (
    CLOSED_PIPE,
    exit_codes_help,
)
from pipeline.cli.plan_commands import plan_parser
from pipeline.cli.run_commands import curate_preview_parser, run_parser
from pipeline.cli.takedown_commands import remove_parser, takedown_lift_parser
from pipeline.cli.tool_commands import bench_parser, config_parser, warm_parser
from pipeline.cli.version_commands import blend_parser, find_parser, verify_parser
from pipeline.config.errors import ConfigError
from pipeline.core.storage_errors import StorageRefused, StorageUnreachable, refusal_cause


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        run_parser,
        verify_parser,
        retain_parser,
        report_parser,
        plan_parser,
        bench_parser,
        find_parser,
        blend_parser,
        config_parser,
        remove_parser,
        curate_preview_parser,
        takedown_lift_parser,
        warm_parser,
    ):
        add(sub)
    parser.description = f"{__doc__}\n\ncommands: {', '.join(sub.choices)}"
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader of stdout went away (`| head`): what is left to print goes to /dev/null, as
    the Python documentation recommends (signal module, "Note on SIGPIPE"), so that the flush
    at exit cannot fail again; no line on stderr, exit CLOSED_PIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):  # a stdout without a file descriptor
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until the exit
    finally:
        os.close(devnull)
    return CLOSED_PIPE


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return ConfigError.exit_code
    except StorageUnreachable as e:
        print(f"error: {e}", file=sys.stderr)
        return StorageUnreachable.exit_code
    except (EndpointConnectionError, ConnectTimeoutError) as e:
        # the store went away after the reach check: one line (it names the endpoint and object)
        print(f"error: storage unreachable: {e}", file=sys.stderr)
        return StorageUnreachable.exit_code
    except Exception as e:  # noqa: BLE001 - a refusal by the store, also from inside a Ray task
        cause = refusal_cause(e)
        if cause is None:
            raise
        if not cause.startswith("storage refused: "):  # raised where no URI was known
            cause = f"storage refused: {', '.join(COMMAND_URIS) or 'storage'}: {cause}"
        print(f"error: {cause}", file=sys.stderr)
        return StorageRefused.exit_code


def exit_cleanly(code: int) -> None:
    """Exit once the command is done, without tearing down native thread pools at interpreter
    shutdown: pyarrow can abort there after a command has finished and printed its result
    ("terminate called without an active exception", exit -6; apache/arrow#34314, seen once here
    after `verify OK` on S3). Output is flushed first and a Ray this process started is shut
    down, so nothing is lost or left running."""
    if "ray" in sys.modules:
        import ray

        from pipeline.run.ray_env import shutdown_ray

        if ray.is_initialized():
            shutdown_ray()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

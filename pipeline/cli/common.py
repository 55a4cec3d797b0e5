"""What the commands share: the --config / --input / --output / --set / --endpoint-url
options, the config or storage options they give, and the reach check that names the
URIs a storage refusal is reported against (cli/main.py prints it)."""

from __future__ import annotations

import argparse
import json

from pydantic import ValidationError

from pipeline.cli import args as cli_args
from pipeline.config.errors import ConfigError
from pipeline.config.loader import check_text, format_error, load_config, parse_set
from pipeline.config.sections import StorageConfig

# the storage URIs the command was given, named by a refusal without one (cli/main.py)
COMMAND_URIS: list[str] = []


def add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        type=cli_args.existing_file,
        help="YAML config file (see configs/)",
    )
    parser.add_argument(
        "--input",
        help="input URI (folder, file:// or s3://), overrides the uri of a single-source config"
        " (input.uri, or inputs[0].uri when inputs names one source; refused for several)",
    )
    parser.add_argument("--output", type=cli_args.folder, help="output URI, overrides output.uri")
    _add_overrides(parser, "override any config key, e.g. --set pack.shard_bytes=64MiB")


def add_storage_args(parser: argparse.ArgumentParser) -> None:
    """The endpoint options of a command that reads a URI given on its command line: storage
    options from --config (+ --set), or --endpoint-url / --set storage.* without a config."""
    parser.add_argument(
        "--config",
        type=cli_args.existing_file,
        help="take storage options (endpoint, region) from this config",
    )
    _add_overrides(
        parser, "override a config key, e.g. --set storage.endpoint_url=http://127.0.0.1:9000"
    )


def _add_overrides(parser: argparse.ArgumentParser, set_help: str) -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    parser.add_argument(
        "--endpoint-url", help="S3 endpoint, the same as --set storage.endpoint_url=URL"
    )


def config_overrides(args: argparse.Namespace) -> list[str]:
    endpoint = getattr(args, "endpoint_url", None)
    # the URL as a YAML string, never read as a number (`--endpoint-url 9000`) or other scalar
    quoted = json.dumps(endpoint)
    return [*args.set, *([f"storage.endpoint_url={quoted}"] if endpoint else [])]


def storage_from_args(args: argparse.Namespace) -> StorageConfig:
    """StorageConfig from add_storage_args' options (ConfigError naming the option if invalid)."""
    if args.config:
        return load_config(args.config, overrides=config_overrides(args), check_paths=False).storage
    values = {}
    for assignment in config_overrides(args):
        key, value = parse_set(assignment)
        if not key.startswith("storage."):
            raise ConfigError(f"--set {key}: without --config only storage.* keys apply")
        values[key.removeprefix("storage.")] = value
    check_text({"storage": values}, "--set")
    try:
        return StorageConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_error(e, "--set", "storage")) from None


def config_from_args(args: argparse.Namespace):
    return load_config(
        args.config, input_uri=args.input, output_uri=args.output, overrides=config_overrides(args)
    )


def check_sources(cfg, *more: str) -> None:
    """check_storage of the config's sources (and `more`), then that no s3:// source names a
    single object (the listing reads a prefix) and that each s3:// file of the curation chain
    exists (the workers read it): exit 2, one line, before Ray starts."""
    from pipeline.config.reuse_keys import remote_version
    from pipeline.core.storage import Location, is_remote
    from pipeline.ingest.listing import single_object

    check_storage(cfg, *(s.uri for s in cfg.sources), *more)
    for src in cfg.sources:
        problem = single_object(Location.from_uri(src.uri, cfg.storage))
        if problem:
            raise ConfigError(problem)
    for uri in filter(is_remote, cfg.content_files("read")):
        try:
            remote_version(uri, cfg.storage)  # the read key's own look at it
        except FileNotFoundError:
            raise ConfigError(f"curation file {uri}: no such object") from None


def check_storage(cfg, *uris: str) -> None:
    """Fail fast (exit 5, one line) when the config's object store cannot be reached."""
    from pipeline.core.reachability import check_reachable
    from pipeline.core.storage import Location

    COMMAND_URIS[:] = uris
    check_reachable(*(Location.from_uri(uri, cfg.storage) for uri in uris))

"""The commands that change what a dataset may hold: `remove` (a takedown: a new version
without the listed documents) and `takedown-lift`, each with its parser."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli import args as cli_args
from pipeline.cli.common import COMMAND_URIS, add_storage_args, config_overrides, storage_from_args
from pipeline.config.loader import load_config
from pipeline.core.lease import REMOVE_WAIT_S


def cmd_remove(args: argparse.Namespace) -> int:
    """Takedown (run/takedown.py): a new version without the listed documents."""
    from pipeline.config.sections import RayConfig
    from pipeline.core.lease import LeaseHeld
    from pipeline.core.reachability import check_reachable
    from pipeline.core.storage import Location
    from pipeline.formats.manifest import ManifestError
    from pipeline.formats.takedowns import TakedownListError, describe, read_id_file
    from pipeline.run.results import RunError
    from pipeline.run.takedown import EXAMPLES, remove_documents

    try:
        ids = read_id_file(args.ids)
    except (OSError, UnicodeDecodeError, TakedownListError) as e:
        print(f"error: --ids {args.ids}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - pyarrow's errors for a broken .parquet
        print(f"error: --ids {args.ids}: not a readable id list: {e}", file=sys.stderr)
        return 2
    if not ids:
        print(f"error: --ids {args.ids} names no id", file=sys.stderr)
        return 2
    location = Location.from_uri(args.uri, storage_from_args(args))
    COMMAND_URIS[:] = [args.uri]
    check_reachable(location)
    ray_cfg = RayConfig()
    if args.config:
        ray_cfg = load_config(args.config, overrides=config_overrides(args), check_paths=False).ray
    def waiting(held: LeaseHeld) -> None:
        who = held.holder or str(held)
        print(f"waiting up to {args.wait:g} s for the dataset's lease: {who}", file=sys.stderr)

    try:
        done = remove_documents(
            location, ids, strict=args.strict, ray_cfg=ray_cfg, reason=args.reason,
            allow_empty=args.allow_empty, wait_s=args.wait, on_wait=waiting,
        )
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (RunError, LeaseHeld) as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    if done.unknown:
        print(
            f"warning: {len(done.unknown)} of {done.ids} ids are not in the version"
            f" (e.g. {', '.join(map(repr, done.unknown[:EXAMPLES]))})",
            file=sys.stderr,
        )
    listed = "recorded" if done.new_entry else "already listed"
    print(f"takedown list: {listed} {describe(done.entry)}; every later run leaves them out")
    if done.result is None:
        print(
            f"nothing to remove: no id of the takedown list is in {done.parent.uri}; no version"
            " written"
        )
        return 0
    m = done.result.manifest
    removal, counts = m["removal"], m["counts"]
    state = "already committed" if done.result.already_committed else "committed"
    print(
        f"removed {removal['documents']} documents from version {removal['parent']}"
        f" (ids sha256 {removal['ids_sha256'][:16]}...): {counts['docs_out']} documents,"
        f" {counts['tokens']} tokens, {len(m['shards'])} training shards"
    )
    print(f"{state:<17} {done.result.version.uri}")
    return 0


def remove_parser(sub: argparse._SubParsersAction) -> None:
    remove = sub.add_parser(
        "remove", help="takedown: a new version without the listed documents (re-packed)"
    )
    remove.add_argument(
        "uri",
        type=cli_args.folder,
        help="a version folder, or a dataset folder (its newest version)",
    )
    remove.add_argument(
        "--ids",
        required=True,
        type=cli_args.existing_file,
        help="file of document ids: one a line exactly as written (only the final \\n removed),"
        ' or .jsonl ({"id": ...} a line) or .parquet (an `id` column) for ids with newlines',
    )
    remove.add_argument(
        "--reason",
        type=cli_args.utf8_text,
        help='why, recorded with the takedown list\'s entry (default: "(none given)")',
    )
    remove.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 2, nothing written) when an id is not in the version",
    )
    remove.add_argument(
        "--allow-empty",
        action="store_true",
        help="publish even when the new version empties a source or shrinks against the"
        " dataset's newest version (refused otherwise, exit 3)",
    )
    remove.add_argument(
        "--wait",
        type=cli_args.non_negative_float,
        default=REMOVE_WAIT_S,
        metavar="SECONDS",
        help="how long to wait while another run or removal holds the dataset's lease"
        f" (default {REMOVE_WAIT_S:g}; then exit 4, nothing recorded)",
    )
    add_storage_args(remove)  # --config also gives the ray section
    remove.set_defaults(func=cmd_remove)


def cmd_takedown_lift(args: argparse.Namespace) -> int:
    """Lift a takedown list entry (formats/takedowns.py): append-only, like the takedown."""
    from pipeline.core.layout import MANIFEST
    from pipeline.core.reachability import check_reachable
    from pipeline.core.storage import Location
    from pipeline.formats.takedowns import TakedownListError, describe, lift

    dataset = Location.from_uri(args.uri, storage_from_args(args))
    check_reachable(dataset)
    if (dataset / MANIFEST).exists():  # a version folder: its dataset's list
        dataset = Location(dataset.fs, dataset.path.rstrip("/").rsplit("/", 1)[0])
    try:
        entry = lift(dataset, args.entry, args.reason)
    except TakedownListError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"lifted {args.entry}: recorded {describe(entry)}; later runs include its documents")
    return 0


def takedown_lift_parser(sub: argparse._SubParsersAction) -> None:
    lift = sub.add_parser(
        "takedown-lift", help="lift a takedown list entry: later runs include its documents again"
    )
    lift.add_argument(
        "uri", type=cli_args.folder, help="the dataset folder (or one of its versions)"
    )
    lift.add_argument(
        "--entry",
        required=True,
        type=cli_args.utf8_text,
        help="the takedown entry (as `remove` printed)",
    )
    lift.add_argument(
        "--reason", required=True, type=cli_args.utf8_text, help="why, recorded with the lift"
    )
    add_storage_args(lift)
    lift.set_defaults(func=cmd_takedown_lift)

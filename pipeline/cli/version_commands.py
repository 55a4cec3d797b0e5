"""The commands that read a committed version: `verify` (every check), `find` (where a
document is, or why it is not there) and `blend` (Megatron-LM's --data-path), each with
its parser."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli import args as cli_args
from pipeline.cli.common import COMMAND_URIS, add_storage_args, storage_from_args
from pipeline.cli.exit_codes import (
    CONFIG_ERROR,
    NOT_FOUND,
    VERSION_BROKEN,
)
from pipeline.core.storage_errors import refusal_cause


def cmd_verify(args: argparse.Namespace) -> int:
    from pipeline.core.reachability import check_reachable
    from pipeline.core.storage import Location
    from pipeline.formats.verify import VerifyError, verify_version

    location = Location.from_uri(args.uri, storage_from_args(args))
    COMMAND_URIS[:] = [args.uri]
    check_reachable(location)
    try:
        manifest = verify_version(location)
    except VerifyError as e:
        print(f"verify FAILED: {e}", file=sys.stderr)
        return 1
    counts = manifest["counts"]
    valid = (manifest.get("splits") or {}).get("valid") or []
    more = f" (+ {len(valid)} validation shards)" if valid else ""
    sources = manifest.get("sources") or {}
    named = f", sources {', '.join(sources)} balanced" if len(sources) > 1 else ""
    print(
        f"verify OK: {manifest['name']} version {manifest['version']}:"
        f" {len(manifest['shards'])} shards{more}, {counts['docs_out']} documents,"
        f" {counts['tokens']} tokens{named}"
    )
    return 0


def verify_parser(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser("verify", help="check a committed version against its manifest")
    verify.add_argument(
        "uri", type=cli_args.folder, help="a version folder, or a dataset folder (newest version)"
    )
    add_storage_args(verify)
    verify.set_defaults(func=cmd_verify)


class _Broken(Exception):
    """The version named on the command line fails its manifest's checks (exit VERSION_BROKEN)."""


def _version_of(args: argparse.Namespace):
    """The version folder and its manifest, checked as far as it can be without reading the
    shards (the model, then verify_claims): ManifestError when the URI holds no version,
    _Broken when the version's manifest fails a check."""
    from pipeline.core.reachability import check_reachable
    from pipeline.core.storage import Location
    from pipeline.formats.manifest import ManifestError, load_manifest
    from pipeline.formats.verify import VerifyError, verify_claims
    from pipeline.formats.versions import resolve_version

    location = Location.from_uri(args.uri, storage_from_args(args))
    COMMAND_URIS[:] = [args.uri]
    check_reachable(location)
    try:
        version = resolve_version(location)
    except (FileNotFoundError, NotADirectoryError):
        raise ManifestError(f"{args.uri}: no such version or dataset folder") from None
    try:
        manifest = load_manifest(version)
        verify_claims(version, manifest)
    except (ManifestError, VerifyError) as e:
        raise _Broken(f"{e}: run `verify`") from None
    except (OSError, ValueError) as e:  # a folder, or an unreadable object, named manifest.json
        if refusal_cause(e):
            raise
        raise _Broken(f"{version.uri}: cannot read the manifest: {e}") from None
    return version, manifest


def _index_of(version, manifest):
    """The version's document index, _Broken unless it is the one its manifest names."""
    from pipeline.formats import documents

    try:
        return documents.read_index(version, manifest["documents"])
    except (OSError, ValueError) as e:  # missing, another size or checksum, not Parquet
        if refusal_cause(e):
            raise
        raise _Broken(f"{version.uri}: {documents.INDEX_FILE}: {e}: run `verify`") from None


def cmd_find(args: argparse.Namespace) -> int:
    """Where a document is (formats/documents.py); exit NOT_FOUND when the version does not
    hold it, VERSION_BROKEN when its manifest or index fails the checks."""
    from pipeline.formats import documents
    from pipeline.formats.manifest import ManifestError

    try:
        version, manifest = _version_of(args)
        if manifest.get("documents") is None:
            print(
                f"error: {version.uri} has no document index (written before it)", file=sys.stderr
            )
            return CONFIG_ERROR
        rows = documents.find(_index_of(version, manifest), args.id)
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return CONFIG_ERROR
    except _Broken as e:
        print(f"error: broken version: {e}", file=sys.stderr)
        return VERSION_BROKEN
    down = _takedown_state(version, args.id)
    if not rows:
        print(f"not found: {args.id!r} is not in version {manifest['version']}", file=sys.stderr)
        for line in [*_removal_state(version, manifest, args.id), *down]:
            print(line)
        return NOT_FOUND
    for line in down:
        print(line)
    for row in rows:
        print(f"version {manifest['version']}")
        for key, value in row.items():
            print(f"{key:>12} {value}")
    unapplied = _unapplied_takedown(version, manifest, args.id)
    if unapplied:
        print(f"error: broken version: {unapplied}", file=sys.stderr)
        return VERSION_BROKEN
    return 0


def find_parser(sub: argparse._SubParsersAction) -> None:
    find = sub.add_parser("find", help="where a document is: version, shard, offset, input")
    find.add_argument(
        "uri",
        type=cli_args.folder,
        help="a version folder, or a dataset folder (its newest version)",
    )
    find.add_argument(
        "--id",
        required=True,
        type=cli_args.utf8_text,
        help="the document id (named sources: SOURCE/ID)",
    )
    add_storage_args(find)
    find.set_defaults(func=cmd_find)


def _removal_state(version, manifest: dict, doc_id: str) -> list[str]:
    """Why the run that made the version left `doc_id` out (its audit and quarantine listing,
    formats/audit.py)."""
    from pipeline.core.storage import Location
    from pipeline.formats.audit import why_quarantined, why_removed

    dataset = Location(version.fs, version.path.rstrip("/").rsplit("/", 1)[0])
    lineage = manifest.get("lineage")
    return [*why_removed(dataset, lineage, doc_id), *why_quarantined(dataset, lineage, doc_id)]


def _takedown_state(version, doc_id: str) -> list[str]:
    """What the dataset's takedown list says of `doc_id`: each entry naming it, one a line."""
    from pipeline.core.storage import Location
    from pipeline.formats import takedowns

    dataset = Location(version.fs, version.path.rstrip("/").rsplit("/", 1)[0])
    try:
        named = takedowns.load(dataset).naming(doc_id)
    except takedowns.TakedownListError as e:
        return [f"warning: {e}"]
    lifted = {e["lifts"] for e in named if e["kind"] == "lift"}
    out = []
    for entry in named:
        if entry["kind"] == "lift":
            out.append(f"  lifted by {takedowns.describe(entry)}")
        else:
            state = "was taken down" if entry["entry"] in lifted else "is taken down"
            out.append(f"{doc_id!r} {state}: {takedowns.describe(entry)}")
    return out


def _unapplied_takedown(version, manifest: dict, doc_id: str) -> str | None:
    """Why it is wrong that `version` holds `doc_id`, when it is the dataset's newest version
    and an active takedown entry names the id (a bypassed or failed takedown); None else (an
    older version still holds what a takedown removed from the newest)."""
    from pipeline.core.storage import Location
    from pipeline.formats import takedowns
    from pipeline.formats.versions import committed_versions

    dataset = Location(version.fs, version.path.rstrip("/").rsplit("/", 1)[0])
    if committed_versions(dataset)[-1:] != [manifest["version"]]:
        return None
    try:
        active = [e for e in takedowns.load(dataset).active if doc_id in e["ids"]]
    except takedowns.TakedownListError:
        return None  # _takedown_state warned
    if not active:
        return None
    honoured = set((manifest.get("takedowns") or {}).get("entries") or [])
    entry = next((e for e in active if e["entry"] in honoured), active[0])
    if entry["entry"] in honoured:
        return (
            f"version {manifest['version']} says it honours takedown {entry['entry']} yet holds"
            f" {doc_id!r}, which it takes down (the version was made bypassing the takedown):"
            " run `verify`; publish a version without it (`remove` or `run`)"
        )
    return (
        f"version {manifest['version']} is the dataset's newest and still holds {doc_id!r},"
        f" taken down by {entry['entry']}, which it does not honour (a `remove` that failed or"
        " was bypassed): publish a version without it (`remove` or `run`)"
    )


def cmd_blend(args: argparse.Namespace) -> int:
    """Megatron-LM's --data-path for a split, with absolute prefixes (local paths, or the
    s3:// prefixes of an S3 version)."""
    from pipeline.formats.data_path import data_path_line
    from pipeline.formats.manifest import ManifestError

    try:
        version, manifest = _version_of(args)
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return CONFIG_ERROR
    except _Broken as e:
        print(f"error: broken version: {e}", file=sys.stderr)
        return VERSION_BROKEN
    blend = (manifest.get("blend") or {}).get(args.split)
    if not blend:
        print(f"error: version {manifest['version']} has no {args.split} tokens", file=sys.stderr)
        return 1
    print(data_path_line(version.uri, blend))
    return 0


def blend_parser(sub: argparse._SubParsersAction) -> None:
    blend = sub.add_parser("blend", help="Megatron-LM --data-path line with absolute prefixes")
    blend.add_argument(
        "uri",
        type=cli_args.folder,
        help="a version folder, or a dataset folder (its newest version)",
    )
    blend.add_argument(
        "--split",
        choices=("train", "valid"),
        default="train",
        help="the training shards (default) or the validation split's",
    )
    add_storage_args(blend)
    blend.set_defaults(func=cmd_blend)

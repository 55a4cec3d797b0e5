"""Command line of the pipeline: list, read, dedup, tokenize and pack text into Megatron shards."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError
from pydantic import ValidationError

from pipeline.cli import args as cli_args
from pipeline.cli.exit_codes import (
    CLOSED_PIPE,
    CONFIG_ERROR,
    NOT_FOUND,
    VERSION_BROKEN,
    exit_codes_help,
)
from pipeline.config.loader import ConfigError, check_text, format_error, load_config, parse_set
from pipeline.config.sections import StorageConfig
from pipeline.core.lease import REMOVE_WAIT_S
from pipeline.core.storage import StorageRefused, StorageUnreachable, refusal_cause

_URIS: list[str] = []  # the storage URIs the command was given, named by a refusal without one


def _add_config_args(parser: argparse.ArgumentParser) -> None:
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


def _overrides(args: argparse.Namespace) -> list[str]:
    endpoint = getattr(args, "endpoint_url", None)
    # the URL as a YAML string, never read as a number (`--endpoint-url 9000`) or other scalar
    quoted = json.dumps(endpoint)
    return [*args.set, *([f"storage.endpoint_url={quoted}"] if endpoint else [])]


def storage_from_args(args: argparse.Namespace) -> StorageConfig:
    """StorageConfig from add_storage_args' options (ConfigError naming the option if invalid)."""
    if args.config:
        return load_config(args.config, overrides=_overrides(args), check_paths=False).storage
    values = {}
    for assignment in _overrides(args):
        key, value = parse_set(assignment)
        if not key.startswith("storage."):
            raise ConfigError(f"--set {key}: without --config only storage.* keys apply")
        values[key.removeprefix("storage.")] = value
    check_text({"storage": values}, "--set")
    try:
        return StorageConfig.model_validate(values)
    except ValidationError as e:
        raise ConfigError(format_error(e, "--set", "storage")) from None


def _load(args: argparse.Namespace):
    return load_config(
        args.config, input_uri=args.input, output_uri=args.output, overrides=_overrides(args)
    )


def _check_storage(cfg, *uris: str) -> None:
    """Fail fast (exit 5, one line) when the config's object store cannot be reached."""
    from pipeline.core.storage import Location, check_reachable

    _URIS[:] = uris
    check_reachable(*(Location.from_uri(uri, cfg.storage) for uri in uris))


def cmd_run(args: argparse.Namespace) -> int:
    from pipeline.core.lease import LeaseHeld
    from pipeline.run.driver import run_pipeline
    from pipeline.run.results import RunError
    from pipeline.run.summary import print_summary

    cfg = _load(args)
    if args.dry_run:  # the output is never touched: only the inputs must be reachable
        from pipeline.run.dry_run import dry_run_lines

        _check_storage(cfg, *(s.uri for s in cfg.sources))
        print("\n".join(dry_run_lines(cfg)))
        return 0
    _check_storage(cfg, *(s.uri for s in cfg.sources), cfg.output.uri)
    try:
        result = run_pipeline(cfg, show_progress=not args.quiet, allow_empty=args.allow_empty)
    except (RunError, LeaseHeld) as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print_summary(result)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from pipeline.core.storage import Location, check_reachable
    from pipeline.formats.verify import VerifyError, verify_version

    location = Location.from_uri(args.uri, storage_from_args(args))
    _URIS[:] = [args.uri]
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


class _Broken(Exception):
    """The version named on the command line fails its manifest's checks (exit VERSION_BROKEN)."""


def _version_of(args: argparse.Namespace):
    """The version folder and its manifest, checked as far as it can be without reading the
    shards (the model, then verify_claims): ManifestError when the URI holds no version,
    _Broken when the version's manifest fails a check."""
    from pipeline.core.storage import Location, check_reachable
    from pipeline.formats.manifest import ManifestError, load_manifest, resolve_version
    from pipeline.formats.verify import VerifyError, verify_claims

    location = Location.from_uri(args.uri, storage_from_args(args))
    _URIS[:] = [args.uri]
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
    from pipeline.formats.manifest import committed_versions

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
    from pipeline.formats.manifest import ManifestError, data_path_line

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


def cmd_remove(args: argparse.Namespace) -> int:
    """Takedown (run/takedown.py): a new version without the listed documents."""
    from pipeline.config.sections import RayConfig
    from pipeline.core.lease import LeaseHeld
    from pipeline.core.storage import Location, check_reachable
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
    _URIS[:] = [args.uri]
    check_reachable(location)
    ray_cfg = RayConfig()
    if args.config:
        ray_cfg = load_config(args.config, overrides=_overrides(args), check_paths=False).ray
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


def cmd_takedown_lift(args: argparse.Namespace) -> int:
    """Lift a takedown list entry (formats/takedowns.py): append-only, like the takedown."""
    from pipeline.core.layout import MANIFEST
    from pipeline.core.storage import Location, check_reachable
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


def cmd_retain(args: argparse.Namespace) -> int:
    from pipeline.retention.apply import apply_plan
    from pipeline.retention.plan import format_plan, plan_retention

    cfg = _load(args)
    _check_storage(cfg, *(s.uri for s in cfg.sources), cfg.output.uri)
    plan = plan_retention(cfg)
    print(format_plan(plan, verbose=args.verbose, applied=args.apply))
    if args.export_lifecycle:
        import json

        from pipeline.retention.lifecycle import export_lifecycle

        exported = export_lifecycle(plan, cfg.retention.rules)
        with open(args.export_lifecycle, "w") as f:
            json.dump(exported, f, indent=2)
        print(f"lifecycle rules written to {args.export_lifecycle}")
        for item in exported["not_expressible"]:
            print(f"  not expressible as an S3 rule: {item['class']}: {item['reason']}")
    if args.tag_read:
        from pipeline.retention.tagging import read_tag, tag_read

        tagged = tag_read(plan)
        tag = read_tag(cfg.name)
        print(
            f"tagged {tag['Key']}={tag['Value']}: {tagged.tagged} objects now,"
            f" {tagged.already} already; {tagged.local} local files skipped (no tags)"
            + (
                f"; {len(tagged.replaced)} replaced while tagging, untagged"
                if tagged.replaced
                else ""
            )
        )
    if args.apply:
        audit = apply_plan(plan, cfg)
        done = [e for e in audit if e["status"] == "done"]
        print(
            f"applied: {len(done)} actions, {sum(e['bytes'] for e in done):,} bytes;"
            f" {len(audit) - len(done)} skipped or failed"
            + ("; audit log under _audit/" if audit else "")
        )
        return 1 if any(e["status"].startswith("failed") for e in audit) else 0
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    import json

    from pipeline.formats.run_stats import StatsError
    from pipeline.report.build import NoSuchRun, build_report, write_report
    from pipeline.report.html import format_html
    from pipeline.report.markdown import format_markdown
    from pipeline.retention.plan import dataset_location

    cfg = _load(args)
    _check_storage(cfg, cfg.output.uri)
    try:
        report = build_report(
            cfg,
            run_id=args.run_id,
            stats_uri=args.stats,
            runs_per_month=args.runs_per_month,
            reader_stats_uri=args.reader_stats,
            epochs_per_month=args.epochs,
            range_bytes=args.range_bytes,
        )
    except StatsError as e:
        print(f"error: stats file rejected: {e}", file=sys.stderr)
        return CONFIG_ERROR
    except NoSuchRun as e:
        print(f"error: {e}", file=sys.stderr)
        return CONFIG_ERROR
    if args.corpus_bytes:  # the same run, at the user's scale: a section of every rendering
        from pipeline.report import bill, dry_run

        corpus = args.corpus_bytes
        try:
            cut, stages = dry_run.plan_for_config(cfg, corpus)
        except dry_run.PlanTooLarge as e:
            print(f"error: --corpus-bytes {corpus:,}: {e}", file=sys.stderr)
            return CONFIG_ERROR
        report["projection"] = bill.projected_bill(
            report,
            corpus,
            stages,
            cut,
            runs_per_month=args.runs_per_month,
            epochs_per_month=args.epochs,
            range_bytes=args.range_bytes,
            prices=cfg.prices,
        )
    print(format_markdown(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    if args.html:
        with open(args.html, "w") as f:
            f.write(format_html(report))
    if args.store:
        for loc in write_report(report, dataset_location(cfg)):
            print(f"stored {loc.uri}")
    return 0


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


def cmd_plan_corpus(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from pipeline.report import dry_run

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
    for line in dry_run.dry_run_lines(cut, stages):
        print(line)
    if args.json:
        Path(args.json).write_text(dry_run.dry_run_json(cut, stages))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.corpus_bytes:
        return cmd_plan_corpus(args)
    from pipeline.core.units import MB
    from pipeline.stream.plan import plan_lines

    latency_s, bandwidth = args.latency_ms / 1000, args.bandwidth_mbps * MB
    if args.probe:
        from pipeline.stream.fetch import FetchError, probe_uri

        _URIS[:] = [args.probe]
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


def _run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run",
        help="list, read, dedup, tokenize, pack and commit a version",
        description="Run the pipeline over the config's sources and commit a new version of"
        " the dataset under output.uri/name (unchanged input and config: the same bytes). A"
        " rerun resumes from the finished units.",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_args(run)
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

    cfg = _load(args)
    _check_storage(cfg, *(s.uri for s in cfg.sources))
    try:
        lines = preview_lines(cfg, args.sample)
    except RunError as e:  # a `python` step that misbehaved: one line
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print("\n".join(lines))
    return 0


def _curate_preview_parser(sub: argparse._SubParsersAction) -> None:
    preview = sub.add_parser(
        "curate-preview",
        help="what each curation step would remove, on a sample of each source",
        description="Run each source's curation chain (docs/curate.md) on its first documents"
        " and print, per step, how many it removes or changes, with examples. Writes nothing.",
    )
    _add_config_args(preview)
    preview.add_argument(
        "--sample", type=cli_args.positive_int, default=1000, help="documents read per source"
    )
    preview.set_defaults(func=cmd_curate_preview)


def _verify_parser(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser("verify", help="check a committed version against its manifest")
    verify.add_argument(
        "uri", type=cli_args.folder, help="a version folder, or a dataset folder (newest version)"
    )
    add_storage_args(verify)
    verify.set_defaults(func=cmd_verify)


def _find_parser(sub: argparse._SubParsersAction) -> None:
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


def _blend_parser(sub: argparse._SubParsersAction) -> None:
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


def _remove_parser(sub: argparse._SubParsersAction) -> None:
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


def _lift_parser(sub: argparse._SubParsersAction) -> None:
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


def _retain_parser(sub: argparse._SubParsersAction) -> None:
    retain = sub.add_parser("retain", help="print the retention plan; --apply carries it out")
    _add_config_args(retain)
    retain.add_argument(
        "--apply",
        action="store_true",
        help="delete / move what the plan lists and write an audit log",
    )
    retain.add_argument("--verbose", action="store_true", help="one line per object")
    retain.add_argument(
        "--export-lifecycle",
        metavar="PATH",
        type=cli_args.file_to_write,
        help="write the policy as S3 lifecycle rules (JSON) where S3 can say it",
    )
    retain.add_argument(
        "--tag-read",
        action="store_true",
        help="tag the S3 objects the runs read, unchanged since, for the exported raw rule",
    )
    retain.set_defaults(func=cmd_retain)


def _report_parser(sub: argparse._SubParsersAction) -> None:
    from pipeline.report.build import RANGE_BYTES

    report = sub.add_parser("report", help="cost report: retained vs read, $ per month")
    _add_config_args(report)
    report.add_argument(
        "--run-id",
        type=cli_args.utf8_text,
        help="whose _work/<run>/stats.json (default: the run of the newest committed version)",
    )
    report.add_argument(
        "--stats", type=cli_args.existing_file, help="a stage stats JSON file instead"
    )
    report.add_argument(
        "--runs-per-month",
        type=cli_args.non_negative_float,
        default=1.0,
        help="pipeline runs a month, for the monthly request bill (default 1)",
    )
    report.add_argument(
        "--reader-stats",
        type=cli_args.existing_file,
        help="stream-reader counters JSON (training reads)",
    )
    report.add_argument(
        "--epochs",
        type=cli_args.non_negative_float,
        default=1.0,
        help="training epochs per month (default 1; 0: no training reads this month)",
    )
    report.add_argument(
        "--range-bytes",
        type=cli_args.positive_int,
        default=RANGE_BYTES,
        help="range GET size for the training estimate without reader stats",
    )
    report.add_argument(
        "--corpus-bytes",
        type=cli_args.size,
        help="e.g. 10TB: add the projected monthly bill at that input size",
    )
    report.add_argument(
        "--json", metavar="PATH", type=cli_args.file_to_write, help="also write the report as JSON"
    )
    report.add_argument(
        "--html",
        metavar="PATH",
        type=cli_args.file_to_write,
        help="also write a self-contained HTML page",
    )
    report.add_argument(
        "--store", action="store_true", help="store md/json/html under the dataset's _reports/"
    )
    report.set_defaults(func=cmd_report)


def _plan_parser(sub: argparse._SubParsersAction) -> None:
    from pipeline.config.sections import IngestConfig, PackConfig
    from pipeline.core.units import MB
    from pipeline.report.dry_run import DOC_BYTES, TOKEN_BYTES_RATIO, TOKEN_STORED_RATIO
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


def _bench_parser(sub: argparse._SubParsersAction) -> None:
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


def _config_parser(sub: argparse._SubParsersAction) -> None:
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


def _warm_parser(sub: argparse._SubParsersAction) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline",
        epilog=exit_codes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _run_parser,
        _verify_parser,
        _retain_parser,
        _report_parser,
        _plan_parser,
        _bench_parser,
        _find_parser,
        _blend_parser,
        _config_parser,
        _remove_parser,
        _curate_preview_parser,
        _lift_parser,
        _warm_parser,
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
            cause = f"storage refused: {', '.join(_URIS) or 'storage'}: {cause}"
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

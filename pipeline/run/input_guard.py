"""No empty, shrunken or vanished version: the one shrink rule of every command that commits a
version (`run`, `remove`), against the dataset's newest committed version.

Refused (RunError, exit 3, nothing committed), unless the command's `--allow-empty`:
- a source whose listing holds no file to read (an empty folder or prefix, globs that match
  nothing, raw files this dataset's own retention deleted), or a run that keeps no document
  (every listed file empty, every record quarantined under a permissive
  `ingest.max_error_rate`): checked before anything is read or written;
- a source of the newest version that the new one lacks: renamed or dropped counts as shrunk
  to 0 (`shrinkage`);
- a source whose bytes shrank by more than `run.max_input_shrink` (a fraction, default 0.5)
  against the newest version's manifest `sources.<name>.input_bytes`: checked on the listing
  (`check_listing`, before any read) and again on the manifest before the commit;
- a source, or a version, with 0 documents out (every record a duplicate of another source's,
  or every document taken down): checked on the manifest before the commit (`check_publish`).
The newest version of a dataset folder is what readers train on, so it never shrinks by
accident. The message names each source, its sizes before and now, the flag, and, when this
dataset's retention deleted raw files under it (its `_audit/retention-*.jsonl` logs), says so.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pipeline.config.model import Config
from pipeline.core.layout import AUDIT_DIR
from pipeline.core.storage import Location
from pipeline.formats.manifest import ManifestError, load_manifest
from pipeline.formats.versions import committed_versions
from pipeline.run.results import ListResult, RunError

ALLOW_FLAG = "--allow-empty"
NO_VERSION: tuple[str, dict[str, Any], dict[str, str]] = ("", {}, {})  # nothing to compare with


def check_listing(cfg: Config, listed: ListResult, dataset: Location) -> None:
    """RunError when a source lists nothing to read or shrank past run.max_input_shrink."""
    per_origin = listed.inputs.group_by("origin").aggregate([("size", "count"), ("size", "sum")])
    origins = per_origin["origin"].to_pylist()
    files = Counter(dict(zip(origins, per_origin["size_count"].to_pylist(), strict=True)))
    sizes = Counter(dict(zip(origins, per_origin["size_sum"].to_pylist(), strict=True)))
    deleted = _deleted_by_retention(dataset)
    empty = [s for s in cfg.sources if not files[s.name] or not sizes[s.name]]
    if empty:
        skipped = Counter(
            (o, r)
            for o, r in zip(
                listed.skipped["origin"].to_pylist(),
                listed.skipped["reason"].to_pylist(),
                strict=True,
            )
        )
        parts = []
        for src in empty:
            why = "no file to read" if not files[src.name] else f"{files[src.name]} empty files"
            why += f" (include {src.include}" + (f", exclude {src.exclude}" if src.exclude else "")
            passed = {r: n for (o, r), n in sorted(skipped.items()) if o == src.name}
            if passed:
                why += f"; skipped: {', '.join(f'{n} {r}' for r, n in passed.items())}"
            why += ")"
            parts.append(f"{_label(cfg, src)}: {why}{_deleted_note(cfg, src, deleted)}")
        raise RunError(
            f"the listing yields no document: {'; '.join(parts)}. Nothing was committed;"
            f" `run {ALLOW_FLAG}` publishes an empty version on purpose."
        )
    newest = _newest_sources(dataset)
    if newest is None:
        return
    listed = {src.name: {"input_bytes": sizes[src.name]} for src in cfg.sources}
    notes = {src.name: _deleted_note(cfg, src, deleted) for src in cfg.sources}
    _refuse(newest, listed, cfg.run.max_input_shrink, "run", source_labels(cfg), notes)


def check_publish(
    dataset: Location,
    manifest: dict[str, Any],
    max_shrink: float,
    command: str,
    labels: dict[str, str] | None = None,
) -> None:
    """The one shrink rule, applied to the manifest of the version about to be committed (by
    `run` and `remove`): RunError unless every source of the dataset's newest committed version
    is a source of the new one, none read past `max_shrink` fewer bytes, none (nor the version)
    holds 0 documents. `labels`: how the message names a source (default `source NAME`)."""
    sources = manifest.get("sources")
    if isinstance(sources, dict) and sources:
        _refuse(_newest_sources(dataset) or NO_VERSION, sources, max_shrink, command, labels or {})
    else:  # a manifest without per-source counts: the version's own
        _refuse(NO_VERSION, {"": manifest.get("counts") or {}}, max_shrink, command, {})


def shrinkage(before: dict[str, Any], after: dict[str, Any], max_shrink: float) -> dict[str, str]:
    """source -> why it shrank: each source of `before` (the newest committed version's manifest
    `sources`) that `after` (the new version's, or at the listing only `input_bytes`) lacks
    (renamed or dropped: shrunk to 0) or lists more than `max_shrink` fewer bytes of; each
    source of `after` with 0 documents out."""
    out = {}
    for name, was in before.items():
        was = was if isinstance(was, dict) else {}
        was_bytes, was_docs = _count(was.get("input_bytes")), _count(was.get("docs_out"))
        now = after.get(name)
        if now is None:
            out[name] = (
                f"not a source of the new version (renamed or dropped: shrunk to 0 from"
                f" {was_bytes:,} bytes, {was_docs:,} documents)"
            )
            continue
        now_bytes = now.get("input_bytes")
        if was_bytes and isinstance(now_bytes, int) and now_bytes < (1 - max_shrink) * was_bytes:
            out[name] = (
                f"shrank by more than run.max_input_shrink = {max_shrink:g}: {now_bytes:,}"
                f" bytes listed, {was_bytes:,} read ({1 - now_bytes / was_bytes:.1%} less)"
            )
    for name, now in after.items():
        if name not in out and now.get("docs_out") == 0:
            removed = {
                "duplicates": _count(now.get("removed_exact")) + _count(now.get("removed_near")),
                "quarantined": _count(now.get("quarantined")),
                "taken down": _count(now.get("removed_takedown")),
            }
            why = ", ".join(f"{n:,} {what}" for what, n in removed.items() if n)
            was = _count((before.get(name) or {}).get("docs_out"))
            out[name] = (
                f"0 documents out of {_count(now.get('docs_in')):,} read"
                + (f" ({why})" if why else "")
                + (f", {was:,} before" if was else "")
            )
    return out


def check_documents(cfg: Config, docs_kept: int, docs_in: int) -> None:
    """RunError when the read kept no document (files listed, but no record, or every record
    quarantined within ingest.max_error_rate)."""
    if docs_kept == 0:
        inputs = ", ".join(_label(cfg, s) for s in cfg.sources)
        raise RunError(
            f"the input yields no document: {inputs}: {docs_in} records read, all quarantined"
            f" or none at all. Nothing was committed; `run {ALLOW_FLAG}` publishes an empty"
            " version on purpose."
        )


def _label(cfg: Config, src: Any) -> str:
    if not cfg.named_sources:
        return f"input {src.uri}"
    return f"inputs[{cfg.sources.index(src)}] ({src.name}) {src.uri}"


def _deleted_note(cfg: Config, src: Any, deleted: list[dict[str, Any]]) -> str:
    root = Location.from_uri(src.uri, cfg.storage).uri.rstrip("/") + "/"
    gone = [e for e in deleted if str(e.get("uri", "")).startswith(root)]
    if not gone:
        return ""
    return (
        f"; this dataset's retention deleted {len(gone)} raw files under it that an earlier"
        f" version read ({sum(int(e.get('bytes') or 0) for e in gone):,} bytes, rule"
        f" {gone[-1].get('rule')}; audit logs under _audit/)"
    )


def _deleted_by_retention(dataset: Location) -> list[dict[str, Any]]:
    """The raw files retention deleted, from the dataset's audit logs (oldest first)."""
    audit = dataset / AUDIT_DIR
    entries = []
    for name in audit.ls_names():
        if not (name.startswith("retention-") and name.endswith(".jsonl")):
            continue
        try:
            lines = (audit / name).read_bytes().decode().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if (
                isinstance(entry, dict)
                and entry.get("action") == "delete"
                and entry.get("status") == "done"
                and entry.get("data_class") == "raw"
            ):
                entries.append(entry)
    return entries


def _newest_sources(dataset: Location) -> tuple[str, dict[str, Any], dict[str, str]] | None:
    """(version id, manifest `sources`, {source: input URI}) of the dataset's newest committed
    version; None if there is none."""
    versions = committed_versions(dataset)
    if not versions:
        return None
    try:
        manifest = load_manifest(dataset / versions[-1])
    except (ManifestError, OSError):
        return None
    sources = manifest.get("sources")
    sources = sources if isinstance(sources, dict) else {}
    uris = (manifest.get("run") or {}).get("input_uris")
    return (
        versions[-1],
        {n: e for n, e in sources.items() if isinstance(e, dict)},
        uris if isinstance(uris, dict) else {},
    )


def _refuse(
    newest: tuple[str, dict[str, Any], dict[str, str]],
    after: dict[str, Any],
    max_shrink: float,
    command: str,
    labels: dict[str, str],
    notes: dict[str, str] | None = None,
) -> None:
    version, before, uris = newest
    shrunk = shrinkage(before, after, max_shrink)
    if not shrunk:
        return
    parts = []
    for name, why in shrunk.items():
        label = labels.get(name) or (f"source {name}" if name else "the version")
        if name not in labels and isinstance(uris.get(name), str):
            label += f" ({uris[name]})"
        parts.append(f"{label}: {why}{(notes or {}).get(name, '')}")
    against = f" against the newest version {version}" if version else ""
    raise RunError(
        f"the new version shrinks or holds an empty source{against}: {'; '.join(parts)}."
        f" Nothing was committed; `{command} {ALLOW_FLAG}` publishes it on purpose."
    )


def source_labels(cfg: Config) -> dict[str, str]:
    """How a message names each configured source: its place in the config and its input."""
    return {s.name: _label(cfg, s) for s in cfg.sources}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0

"""No empty or vanished version: the listing is checked against the dataset's newest version
before anything is read or written.

A run is refused (RunError, exit 3, nothing committed) when
- a source's listing holds no file to read (an empty folder or prefix, globs that match nothing,
  raw files this dataset's own retention deleted), or the run keeps no document at all (every
  listed file empty, or every record quarantined under a permissive `ingest.max_error_rate`):
  the newest version of a dataset folder is what readers train on, so an empty one is never
  published by accident;
- a source's listed bytes shrank by more than `run.max_input_shrink` (a fraction, default 0.5)
  against what the dataset's newest committed version read from it (its manifest's
  `sources.<name>.input_bytes`).
`run --allow-empty` publishes such a version on purpose. The message names each input and, when
this dataset's retention deleted raw files under it (its `_audit/retention-*.jsonl` logs), says so.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pipeline.config import Config
from pipeline.core.layout import AUDIT_DIR
from pipeline.core.storage import Location
from pipeline.formats.manifest import ManifestError, committed_versions, load_manifest
from pipeline.run.results import ListResult, RunError

ALLOW_FLAG = "--allow-empty"


def check_listing(cfg: Config, listed: ListResult, dataset: Location) -> None:
    """RunError when a source lists nothing to read or shrank past run.max_input_shrink."""
    files = Counter(listed.inputs["origin"].to_pylist())
    sizes: Counter = Counter()
    for origin, size in zip(
        listed.inputs["origin"].to_pylist(), listed.inputs["size"].to_pylist(), strict=True
    ):
        sizes[origin] += size
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
    newest = _newest_input_bytes(dataset)
    if newest is None:
        return
    version, before = newest
    keep = 1.0 - cfg.run.max_input_shrink
    shrunk = []
    for src in cfg.sources:
        was = before.get(src.name)
        if isinstance(was, int) and was > 0 and sizes[src.name] < keep * was:
            shrunk.append(
                f"{_label(cfg, src)}: {sizes[src.name]:,} bytes listed, {was:,} read by the newest"
                f" version {version} ({1 - sizes[src.name] / was:.1%} less)"
                + _deleted_note(cfg, src, deleted)
            )
    if shrunk:
        raise RunError(
            f"the input shrank by more than run.max_input_shrink = {cfg.run.max_input_shrink:g}:"
            f" {'; '.join(shrunk)}. Nothing was committed; `run {ALLOW_FLAG}` publishes it on"
            " purpose."
        )


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


def _newest_input_bytes(dataset: Location) -> tuple[str, dict[str, Any]] | None:
    """(version id, {source: input_bytes}) of the newest committed version, None if none."""
    versions = committed_versions(dataset)
    if not versions:
        return None
    try:
        manifest = load_manifest(dataset / versions[-1])
    except (ManifestError, OSError):
        return None
    sources = manifest.get("sources") or {}
    before = {n: e.get("input_bytes") for n, e in sources.items() if isinstance(e, dict)}
    return versions[-1], before

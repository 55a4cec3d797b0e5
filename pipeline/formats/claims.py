"""The manifest judge: every claim a manifest makes that can be checked from the manifest alone.

Contract: `judged_manifest` is `load_manifest` (the model: every field's type, names and
versions that are one path part, splits, the fields each format's writers always write) plus
`check_claims` (the fields agree with each other: counts, sources, splits, blend). `verify`,
`find`, `blend` and StreamReader all judge a manifest with this code before they trust it, so
the reader never reads a version that `verify` rejects for what its manifest says; `verify` then
also reads every byte (formats/verify.py), the reader the blocks it reads (verify_checksums).
A failed claim is a ManifestError naming the field. In full: docs/versions.md, "Manifest formats
and what `verify` requires of them".
"""

from __future__ import annotations

import math
import re
from typing import Any

from pipeline.core.storage import Location
from pipeline.formats.manifest import (
    COUNT_KEYS,
    DOCUMENT_KINDS,
    FILTERED_KEY,
    RECORDS_KEY,
    TAKEDOWN_KEY,
    ManifestError,
    check_weights,
    load_manifest,
    parse_blend,
    split_shards,
)

HEX128 = re.compile(r"[0-9a-f]{32}")
BLEND_TOLERANCE = 1e-9  # the blend line's weights are written with 12 significant digits


def documents_accounted(counts: dict[str, int]) -> int:
    """Documents out + removed (per rule) + quarantined: must equal documents in."""
    return (
        counts["docs_out"]
        + counts["removed_exact"]
        + counts["removed_near"]
        + counts.get(TAKEDOWN_KEY, 0)
        + sum((counts.get(FILTERED_KEY) or {}).values())
        + counts["quarantined"]
    )


def judged_manifest(version: Location) -> dict[str, Any]:
    """The version's manifest, refused (ManifestError) unless the model and every claim hold."""
    manifest = load_manifest(version)
    check_claims(manifest, version.uri)
    return manifest


def check_claims(manifest: dict[str, Any], where: str) -> None:
    """The claims of a manifest the model has accepted (load_manifest, check_structure), in
    the order a reader relies on them: each shard's split and source, the counts, the sources,
    the blend lines."""
    check_splits(manifest, where)
    check_shard_sources(manifest, where)
    every = manifest["shards"] + split_shards(manifest, "valid")
    check_counts(manifest, every, where)
    check_sources(manifest, every, where)
    check_blend(manifest, where)
    check_lineage(manifest, where)


def check_splits(manifest: dict[str, Any], where: str) -> None:
    """A shard entry's `split`, where it has one, is the split whose list holds it."""
    for split in ("train", "valid"):
        for i, shard in enumerate(split_shards(manifest, split)):
            if shard.get("split", split) != split:
                field = "shards" if split == "train" else "splits.valid"
                raise ManifestError(
                    f"{where}: {field}.{i}.split: {shard['split']!r} is not {split!r}"
                    f" (the list that holds {shard['bin']})"
                )


def check_shard_sources(manifest: dict[str, Any], where: str) -> None:
    """Where a shard names a source, `sources` must be there and every shard's `source` one of
    its keys (the reader weighs a shard by its source's weight, and a shard of no known source
    would be read at weight 1 or left out of a source's balance). A version from before sources
    (format 1) has neither."""
    sources = manifest.get("sources")
    shards = manifest["shards"] + split_shards(manifest, "valid")
    if sources is None:
        named = next((s for s in shards if "source" in s), None)
        if named is not None:
            raise ManifestError(
                f"{where}: sources is missing or null, yet shard {named['bin']} names source"
                f" {named['source']!r}"
            )
        return
    for shard in shards:
        if shard.get("source") not in sources:
            raise ManifestError(
                f"{where}: shard {shard['bin']}: source {shard.get('source')!r} is not one of"
                f" sources ({', '.join(sources)})"
            )


def check_counts(manifest: dict[str, Any], shards: list[dict], where: str) -> None:
    """The shards hold docs_out and tokens; in = out + removed + quarantined."""
    tokens = sum(shard["tokens"] for shard in shards)
    docs = sum(shard["documents"] for shard in shards)
    counts = manifest["counts"]
    if tokens != counts["tokens"] or docs != counts["docs_out"]:
        raise ManifestError(
            f"{where}: shards hold {tokens} tokens / {docs} documents, counts"
            f" say {counts['tokens']} / {counts['docs_out']}"
        )
    if (accounted := documents_accounted(counts)) != counts["docs_in"]:
        raise ManifestError(
            f"{where}: docs_in {counts['docs_in']} != out + removed +"
            f" quarantined = {accounted}"
        )
    by_reason = counts.get("quarantined_by_reason") or {}  # written by every run
    if sum(by_reason.values()) != counts["quarantined"]:
        raise ManifestError(
            f"{where}: counts.quarantined_by_reason {by_reason} adds up to"
            f" {sum(by_reason.values())}, counts.quarantined says {counts['quarantined']}"
        )
    check_records(counts, "counts", where)


def check_records(counts: dict[str, Any], field: str, where: str) -> None:
    """The web archive records that became documents or quarantine rows are among docs_in (the
    other record kinds are counted beside them, never as documents)."""
    records = counts.get(RECORDS_KEY) or {}
    entered = sum(records.get(kind, 0) for kind in DOCUMENT_KINDS)
    if entered > counts["docs_in"]:
        raise ManifestError(
            f"{where}: {field}.{RECORDS_KEY}: {entered} web archive records became documents or"
            f" quarantine rows, more than docs_in {counts['docs_in']}"
        )


def check_sources(manifest: dict[str, Any], shards: list[dict], where: str) -> None:
    """Per source (a manifest with `sources`): in = out + removed + quarantined; its shards
    hold its docs_out and tokens; the sources add up to `counts`."""
    sources = manifest.get("sources")
    if sources is None:
        return
    counts = manifest["counts"]
    for name, entry in sources.items():
        if (accounted := documents_accounted(entry)) != entry["docs_in"]:
            raise ManifestError(
                f"{where}: source {name}: docs_in {entry['docs_in']} != out + removed +"
                f" quarantined = {accounted}"
            )
        check_records(entry, f"sources.{name}", where)
        mine = [s for s in shards if s.get("source") == name]
        docs, tokens = sum(s["documents"] for s in mine), sum(s["tokens"] for s in mine)
        if (docs, tokens) != (entry["docs_out"], entry["tokens"]):
            raise ManifestError(
                f"{where}: source {name}: its shards hold {tokens} tokens / {docs}"
                f" documents, sources say {entry['tokens']} / {entry['docs_out']}"
            )
    for key in COUNT_KEYS + ((TAKEDOWN_KEY,) if TAKEDOWN_KEY in counts else ()):
        total = sum(entry.get(key) or 0 for entry in sources.values())
        if total != (counts.get(key) or 0):
            raise ManifestError(
                f"{where}: sources add up to {key} = {total}, counts say {counts.get(key)}"
            )
    by_kind = counts.get(RECORDS_KEY) or {}
    kinds = {k for entry in sources.values() for k in entry.get(RECORDS_KEY) or {}} | set(by_kind)
    for kind in sorted(kinds):
        total = sum((entry.get(RECORDS_KEY) or {}).get(kind, 0) for entry in sources.values())
        if total != by_kind.get(kind, 0):
            raise ManifestError(
                f"{where}: sources add up to {RECORDS_KEY}.{kind} = {total}, counts say"
                f" {by_kind.get(kind, 0)}"
            )


def check_blend(manifest: dict[str, Any], where: str) -> None:
    """Each blend line (where the manifest has one) names its split's shards with tokens, in
    order, weighed as the writer weighs them (data_path.blend_line): train by the sources'
    weights x tokens, valid by tokens; so the line Megatron is given is the mixture the reader
    reads."""
    weights = check_weights(manifest, where)
    for split in ("train", "valid"):
        line = (manifest.get("blend") or {}).get(split)
        if line is None:
            continue
        shards = [s for s in split_shards(manifest, split) if s["tokens"]]
        named = parse_blend(line)
        if [prefix for _, prefix in named] != [s["bin"].removesuffix(".bin") for s in shards]:
            raise ManifestError(f"{where}: blend.{split} does not name the {split} shards")
        mix = weights if split == "train" else {}
        expected = [mix.get(s.get("source"), 1.0) * s["tokens"] for s in shards]
        total = sum(expected)
        for (weight, prefix), want in zip(named, expected, strict=True):
            if not math.isclose(weight, want / total, rel_tol=BLEND_TOLERANCE):
                raise ManifestError(
                    f"{where}: blend.{split} weighs {prefix} {weight:.12g}, its"
                    f" {'source weight x ' if split == 'train' else ''}tokens give"
                    f" {want / total:.12g}"
                )


LINEAGE_KEYS = ("input_manifest", "input_manifest_xxh3_128", "removed", "quarantine")


def check_lineage(manifest: dict[str, Any], where: str) -> None:
    """`lineage` names the run's records `verify` reads (LINEAGE_KEYS, strings; removed_ids in
    a `remove` version), each a path relative to the dataset folder that stays inside it."""
    lineage = manifest.get("lineage")
    if not isinstance(lineage, dict) or any(
        not isinstance(lineage.get(k), str) for k in LINEAGE_KEYS
    ):
        raise ManifestError(f"{where}: lineage must name {', '.join(LINEAGE_KEYS)}")
    digest = lineage["input_manifest_xxh3_128"]
    if not HEX128.fullmatch(digest):
        raise ManifestError(
            f"{where}: lineage.input_manifest_xxh3_128: {digest!r} is not an xxh3-128 hex digest"
        )
    for key in ("input_manifest", "removed", "quarantine", "removed_ids"):
        path = lineage.get(key)
        if key == "removed_ids" and not isinstance(path, str):
            continue  # a version not written by `remove`
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise ManifestError(
                f"{where}: lineage.{key}: {path!r} is not a path inside the dataset folder"
            )

"""The last stage: the manifest from every stage's results, `verify`'s checks, stats.json, then
the manifest itself, fenced by the lease: written last, so a version is complete or absent."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa

from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.formats import documents
from pipeline.formats.data_path import blend_line
from pipeline.formats.manifest import ManifestError, build_manifest, commit_manifest, load_manifest
from pipeline.formats.run_stats import RunStats
from pipeline.formats.verify import VerifyError, verify_manifest
from pipeline.run import input_guard
from pipeline.run.accounting import bytes_moved, run_counts, shard_entries, source_counts
from pipeline.run.pack_stage import Packed
from pipeline.run.read_stage import Listing, Reads, Units
from pipeline.run.results import AuditResult, RunError, RunResult
from pipeline.run.tokenize_stage import Tokenized
from pipeline.run.waves import Waves


@dataclass(frozen=True)
class Counted:
    """What the manifest's counts come from: every stage's results."""

    reads: Reads
    audit: AuditResult
    tokenized: Tokenized
    quarantined: Counter  # every quarantined record by reason, tokenize's included


def commit(
    waves: Waves,
    listing: Listing,
    units: Units,
    counted: Counted,
    packed: Packed,
    started: dt.datetime,
    allow_empty: bool = False,
) -> RunResult:
    """The manifest and stats.json, then the commit (fenced by the waves' lease when held);
    RunError when the version shrinks the dataset (run/input_guard.py) unless `allow_empty`."""
    cfg, layout = listing.cfg, listing.layout
    version = layout.version(packed.version_id)
    splits = shard_entries(packed.parts)
    manifest = version_manifest(listing, units, counted, packed, splits, started)
    waves.close_last()  # the last stage's own I/O, before the commit's
    if not allow_empty:
        labels = input_guard.source_labels(cfg)
        input_guard.check_publish(layout.dataset, manifest, cfg.run.max_input_shrink, "run", labels)
    fields = documents.read_fields(
        layout, units.origin_of, {src.name: cfg.kept_fields(src) for src in cfg.sources}
    )
    manifest["documents"] = document_index(layout, version, splits, fields)  # before it
    try:  # `verify`'s own checks; the pack tasks checked each shard as they wrote it
        verify_manifest(version, manifest, shards_checked=True)
    except VerifyError as e:
        raise RunError(f"the version fails verify: {e}; nothing was committed") from None
    if waves.lease is not None:
        waves.lease.renew()  # fenced: LeaseLost if another run took the dataset over meanwhile
    # the commit's I/O: the document index, the checks, the lease; not this file itself,
    # nor the manifest written after it
    waves.driver_stage("commit")
    moved = bytes_moved(waves.stats, listing.listed.listed_bytes)
    stats = RunStats.model_validate({"run_id": layout.run_id, **moved, "stages": waves.stats})
    layout.stats.write_bytes(stats.to_json())
    commit_manifest(version, manifest)
    return RunResult(version, manifest, waves.reports, moved=moved)


def version_manifest(
    listing: Listing,
    units: Units,
    counted: Counted,
    packed: Packed,
    splits: dict[str, list[dict]],
    started: dt.datetime,
) -> dict:
    """The manifest (formats/manifest.py) of the version the run made, before its document
    index; RunError unless every document is accounted for (run/accounting.py). `splits`:
    each split's shard entries (accounting.shard_entries)."""
    cfg = listing.cfg
    weights = {s.name: s.weight for s in cfg.sources}
    tokenized, reads = counted.tokenized.results, counted.reads
    if reads.removed_takedown != counted.audit.removed_takedown:
        raise RunError(
            f"the read tasks took down {reads.removed_takedown} documents, the audit lists"
            f" {counted.audit.removed_takedown}; nothing was committed"
        )
    if reads.removed_filtered != counted.audit.removed_filtered:
        raise RunError(
            f"the read tasks' curation removed {reads.removed_filtered}, the audit lists"
            f" {counted.audit.removed_filtered}; nothing was committed"
        )
    manifest = build_manifest(
        cfg,
        listing.layout,
        packed.version_id,
        packed.tokenizer,
        run_counts(reads, packed.shards, counted.audit, counted.quarantined, tokenized),
        splits["train"],
        listing.input_digest,
        run={
            "input_uri": cfg.sources[0].uri,
            "input_uris": {s.name: s.uri for s in cfg.sources},
            "started_at": started.isoformat(),
            "skipped_files": dict(Counter(listing.listed.skipped["reason"].to_pylist())),
        },
        sources=source_counts(
            cfg,
            units.origin_of,
            reads.results,
            counted.audit,
            packed.parts,
            tokenized,
            listing.input_bytes,
        ),
        splits=splits,
        blend={
            "train": blend_line(splits["train"], weights),
            "valid": blend_line(splits["valid"], {name: 1.0 for name in weights}),
        },
    )
    down = listing.takedown
    if down.active:  # the list this version honours (formats/takedowns.py)
        manifest["takedowns"] = {
            "entries": [e["entry"] for e in down.active],
            "ids_sha256": down.digest,
        }
    return manifest


def document_index(
    layout: RunLayout, version: Location, splits: dict, fields: pa.Table | None = None
) -> dict:
    """The version's documents.parquet (formats/documents.py) from the run's per-shard records,
    shards in manifest order, with the kept input fields' columns of `fields`
    (documents.with_fields) when given; returns the manifest's `documents` entry."""
    tables = []
    for split in ("train", "valid"):
        for shard in splits[split]:
            name = shard["bin"].removesuffix(".bin")
            docs = layout.shard_docs(name).read_parquet()
            tables.append(documents.shard_rows(docs, shard["source"], split, name))
    if fields is not None:
        index = pa.concat_tables(tables) if tables else documents.INDEX_SCHEMA.empty_table()
        tables = [documents.with_fields(index, fields)]
    return documents.write_index(version, tables)


def already_committed(layout: RunLayout) -> RunResult | None:
    """The same input and config were committed before and that version still exists."""
    try:
        version_id = json.loads(layout.committed.read_bytes())["version"]
        manifest = load_manifest(layout.version(version_id))
    except (FileNotFoundError, ManifestError, KeyError, ValueError):
        return None
    return RunResult(layout.version(version_id), manifest, [], already_committed=True)

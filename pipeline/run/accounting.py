"""The run's accounting: which packs a run makes, and the manifest's `counts`, `sources` and
split sections, from the tasks' small results. Every function raises RunError rather than let a
run commit documents it cannot account for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.config.model import Config
from pipeline.formats.claims import documents_accounted
from pipeline.formats.manifest import CURATED_KEY, FILTERED_KEY, RECORDS_KEY, TAKEDOWN_KEY
from pipeline.run.results import AuditResult, PackResult, ReadResult, RunError, TokenizeResult

if TYPE_CHECKING:
    from pipeline.run.read_stage import Reads
from pipeline.core.layout import SPLITS

Parts = list[tuple[str, str, list[PackResult]]]  # (source, split, its shards) in pack order


def pack_parts(cfg: Config) -> list[tuple[str, str, str, float]]:
    """(source, split, shard name prefix, share of the source's tokens) of each pack of a run,
    in manifest order. split "" (no validation split) keeps every document."""
    fraction, parts = cfg.split.valid_fraction, []
    for src in cfg.sources:
        if cfg.named_sources:
            prefixes = {"train": f"train-{src.name}", "valid": f"valid-{src.name}"}
        else:
            prefixes = {"train": "shard", "valid": "valid"}
        if fraction > 0:
            parts.append((src.name, "train", prefixes["train"], 1.0 - fraction))
            parts.append((src.name, "valid", prefixes["valid"], fraction))
        else:
            parts.append((src.name, "", prefixes["train"], 1.0))
    return parts


def run_counts(
    reads: Reads,
    packed: list[PackResult],
    audit: AuditResult,
    quarantined: dict[str, int],
    tokenized: list[TokenizeResult],
) -> dict[str, Any]:
    """The manifest's counts (removed_takedown only when the takedown list removed any, the
    curation rules' removals and what its transforms changed only where a chain ran); RunError
    unless every document read is accounted for."""
    docs_in = reads.docs_in
    curated = reads.curated
    counts = {
        "docs_in": docs_in,
        "docs_out": sum(s.documents for s in packed),
        "removed_exact": audit.removed_exact,
        "removed_near": audit.removed_near,
        **({TAKEDOWN_KEY: audit.removed_takedown} if audit.removed_takedown else {}),
        **({FILTERED_KEY: audit.removed_filtered} if audit.removed_filtered else {}),
        **({CURATED_KEY: curated} if any(curated.values()) else {}),
        "quarantined": sum(quarantined.values()),
        "tokens": sum(s.tokens for s in packed),
        "quarantined_by_reason": dict(sorted(quarantined.items())),
        **_records(reads.results),
    }
    accounted = documents_accounted(counts)
    if accounted != docs_in or counts["docs_out"] != sum(r.docs for r in tokenized):
        raise RunError(
            f"accounting does not balance: docs_in {docs_in} != out + removed +"
            f" quarantined = {accounted}; nothing was committed"
        )
    return counts


def _records(reads: list[ReadResult]) -> dict[str, dict[str, int]]:
    """{RECORDS_KEY: web archive records by kind, summed} where any unit read one, else {}."""
    total: dict[str, int] = {}
    for r in reads:
        for kind, n in r.records.items():
            total[kind] = total.get(kind, 0) + n
    return {RECORDS_KEY: dict(sorted(total.items()))} if total else {}


def source_counts(
    cfg: Config,
    origin_of: dict[str, str],
    read: list[ReadResult],
    audit: AuditResult,
    parts: Parts,
    tokenized: list[TokenizeResult],
    input_bytes: dict[str, int],
) -> dict[str, dict[str, Any]]:
    """The manifest's `sources`: per source the counts, the removals in favour of each other
    source, its weight and its split sizes; RunError unless each balances. `origin_of` maps a
    unit to its source (a unit never mixes sources)."""
    out: dict[str, dict[str, Any]] = {}
    for src in cfg.sources:
        name = src.name
        reads = [r for r in read if origin_of[r.unit] == name]
        removed = audit.by_origin.get(name, {})
        shards = {
            split: [r for s, sp, rs in parts if s == name and sp == split for r in rs]
            for split in SPLITS
        }
        entry = {
            "docs_in": sum(r.docs_in for r in reads),
            "docs_out": sum(r.documents for rs in shards.values() for r in rs),
            "removed_exact": removed.get("exact", 0),
            "removed_near": removed.get("near", 0),
            **({TAKEDOWN_KEY: removed.get("takedown", 0)} if audit.removed_takedown else {}),
            **(
                {FILTERED_KEY: {r: removed.get(r, 0) for r in audit.removed_filtered}}
                if audit.removed_filtered else {}
            ),  # fmt: skip
            "quarantined": sum(sum(r.quarantined.values()) for r in reads),
            "tokens": sum(r.tokens for rs in shards.values() for r in rs),
            "removed_in_favour_of": dict(sorted(removed.get("in_favour_of", {}).items())),
            "weight": src.weight,
            "input_bytes": input_bytes.get(name, 0),
            **_records(reads),
        }
        for split, rs in shards.items():
            entry[f"{split}_documents"] = sum(r.documents for r in rs)
            entry[f"{split}_tokens"] = sum(r.tokens for r in rs)
        docs_tokenized = sum(r.docs for r in tokenized if origin_of[r.unit] == name)
        if documents_accounted(entry) != entry["docs_in"] or entry["docs_out"] != docs_tokenized:
            raise RunError(
                f"accounting does not balance for source {name!r}: docs_in"
                f" {entry['docs_in']} != out + removed + quarantined ="
                f" {documents_accounted(entry)}; nothing was committed"
            )
        out[name] = entry
    return out


def shard_entries(parts: Parts) -> dict[str, list[dict[str, Any]]]:
    """Each split's shard entries, each naming its source and split, in pack order."""
    splits: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    for source, split, results in parts:
        splits[split] += [{**r.entry(), "source": source, "split": split} for r in results]
    return splits


def bytes_moved(stages: list[dict[str, Any]], input_bytes: int) -> dict[str, Any]:
    """stats.json's storage traffic: (bytes read + bytes written through the storage layer) /
    listed input bytes, in total and per stage name (its waves and the driver's own I/O summed;
    each entry also gets its own figure)."""
    per_stage: dict[str, float] = {}
    read = written = 0
    for s in stages:
        io = s.get("io", {})
        moved = io.get("bytes_read", 0) + io.get("bytes_written", 0)
        read, written = read + io.get("bytes_read", 0), written + io.get("bytes_written", 0)
        s["bytes_moved_per_input_byte"] = round(moved / input_bytes, 4) if input_bytes else 0.0
        per_stage[s["stage"]] = per_stage.get(s["stage"], 0.0) + moved
    ratio = (lambda n: round(n / input_bytes, 4)) if input_bytes else (lambda n: 0.0)
    return {
        "input_bytes": input_bytes,
        "bytes_read": read,
        "bytes_written": written,
        "bytes_moved_per_input_byte": {
            "total": ratio(read + written),
            **{name: ratio(n) for name, n in per_stage.items()},
        },
    }

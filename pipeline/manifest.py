"""The dataset manifest: written last, so that a dataset version is complete or absent.

`OUTPUT/<name>/<version>/manifest.json` (UTF-8 JSON, one object) is written only after every shard
it names has been written and read back with the right size and checksum, in one atomic write
(local: temp file + rename; S3: one PUT of the complete object). A version folder without it does
not exist for any command or reader here. Fields:

    format              "pipeline.dataset/1"
    name, version       dataset name; version id (UTC timestamp + run id, sorts by time)
    created_at          ISO-8601 UTC time of the commit
    config              the output-determining config (input selection, dedup, tokenize, pack)
    config_hash         hash of `config` plus the tokenizer file's digest
    tokenizer           fingerprint (sha256 of tokenizer.json), vocab_size, eos, eos_id, dtype;
                        since special-token handling: special_tokens_in_text ("text": special
                        and added tokens' text was encoded as text, so EOS ids occur only at
                        document ends, checked by verify; "special"), bos and bos_id (null when
                        none), engine (fastokens | tokenizers: the bytes are the same either
                        way) and engine_reason (why tokenizers ran, null when fastokens did)
    counts              docs_in, docs_out, removed_exact, removed_near, quarantined, tokens,
                        quarantined_by_reason {reason: n}
    lineage             paths (relative to the dataset folder) of the run's records: input_manifest
                        (with its xxh3-128), units, removed (the dedup audit), quarantine,
                        skipped (listed files not read), stats (per-stage I/O)
    shards              [{bin, idx, bin_bytes, idx_bytes, tokens, documents,
                          bin_xxh3_128, idx_xxh3_128}] in shard order
    run                 where and when: run_id, input_uri, output_uri, started_at, and
                        skipped_files (count per reason)

Everything outside `version`, `created_at`, `run`, `lineage` and the tokenizer's engine fields
(which depend on what the machine could run) is a function of the input's content and the config
alone: the same input and config give the same manifest, from local or S3 input, with one worker
or many.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pipeline.layout import MANIFEST, is_version_name
from pipeline.storage import Location

FORMAT = "pipeline.dataset/1"
COUNT_KEYS = ("docs_in", "docs_out", "removed_exact", "removed_near", "quarantined", "tokens")
SHARD_KEYS = (
    "bin",
    "idx",
    "bin_bytes",
    "idx_bytes",
    "tokens",
    "documents",
    "bin_xxh3_128",
    "idx_xxh3_128",
)
VARYING_KEYS = ("version", "created_at", "run", "lineage")


class ManifestError(Exception):
    """A version is not a committed, well-formed dataset."""


def documents_accounted(counts: dict[str, int]) -> int:
    """Documents out + removed (per rule) + quarantined: must equal documents in."""
    return (
        counts["docs_out"]
        + counts["removed_exact"]
        + counts["removed_near"]
        + counts["quarantined"]
    )


def build_manifest(
    cfg,
    layout,
    version_id: str,
    tokenizer: dict[str, Any],
    counts: dict[str, Any],
    shards: list[dict[str, Any]],
    input_digest: str,
    run: dict[str, Any],
) -> dict[str, Any]:
    """The manifest of a version of `layout.dataset` (cfg: Config, layout: RunLayout)."""
    dataset = layout.dataset
    return {
        "format": FORMAT,
        "name": cfg.name,
        "version": version_id,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "config": cfg.output_config(),
        "config_hash": cfg.output_hash(),
        "tokenizer": tokenizer,
        "counts": counts,
        "lineage": {
            "input_manifest": layout.inputs.relative_to(dataset),
            "input_manifest_xxh3_128": input_digest,
            "units": layout.units.relative_to(dataset),
            "removed": layout.removed.relative_to(dataset),
            "quarantine": layout.quarantine.relative_to(dataset),
            "skipped": layout.skipped.relative_to(dataset),
            "stats": layout.stats.relative_to(dataset),
        },
        "shards": [{k: s[k] for k in SHARD_KEYS} for s in shards],
        "run": {"run_id": layout.run_id, "output_uri": dataset.uri, **run},
    }


def commit_manifest(version: Location, manifest: dict[str, Any]) -> None:
    check_structure(manifest)
    data = json.dumps(manifest, indent=2, sort_keys=True).encode()
    (version / MANIFEST).write_bytes(data)


def load_manifest(version: Location) -> dict[str, Any]:
    loc = version / MANIFEST
    try:
        raw = loc.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"{version.uri}: no {MANIFEST}: not a committed version") from None
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise ManifestError(f"{loc.uri}: not valid JSON: {e}") from None
    check_structure(manifest, where=loc.uri)
    return manifest


def check_structure(manifest: Any, where: str = "manifest") -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ManifestError(f"{where}: format is not {FORMAT}")
    counts = manifest.get("counts")
    if not isinstance(counts, dict) or any(not isinstance(counts.get(k), int) for k in COUNT_KEYS):
        raise ManifestError(f"{where}: counts must hold integers {', '.join(COUNT_KEYS)}")
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        raise ManifestError(f"{where}: shards must be a list")
    for i, shard in enumerate(shards):
        missing = [k for k in SHARD_KEYS if k not in shard]
        if missing:
            raise ManifestError(f"{where}: shard {i} lacks {', '.join(missing)}")
        for key in ("bin", "idx"):
            name = shard[key]
            if "/" in name or name.startswith("."):
                raise ManifestError(f"{where}: shard {i} {key} path {name!r} leaves the version")


def committed_versions(dataset: Location) -> list[str]:
    """Version ids under a dataset folder that have a manifest, oldest first."""
    names = [n for n in dataset.ls_names() if is_version_name(n)]
    return [n for n in names if (dataset / n / MANIFEST).exists()]


def resolve_version(uri_loc: Location) -> Location:
    """A version folder as given, or the newest committed version of a dataset folder."""
    if (uri_loc / MANIFEST).exists():
        return uri_loc
    versions = committed_versions(uri_loc)
    if not versions:
        raise ManifestError(f"{uri_loc.uri}: no committed version (no {MANIFEST} found)")
    return uri_loc / versions[-1]


def comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    """The part of a manifest that must not depend on where, when or with how many workers."""
    out = {k: v for k, v in manifest.items() if k not in VARYING_KEYS}
    if isinstance(out.get("tokenizer"), dict):
        out["tokenizer"] = {
            k: v for k, v in out["tokenizer"].items() if k not in ("engine", "engine_reason")
        }
    return out

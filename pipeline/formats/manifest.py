"""The dataset manifest: written last, so that a dataset version is complete or absent.

Contract: a version exists exactly when its manifest does (formats/versions.py lists them);
the manifest is written after every file it names is written and verified (`commit_manifest`:
an exclusive, atomic write); `load_manifest` accepts only what the model (`Manifest`, its field
types in formats/manifest_fields.py, `check_structure`) validates, so every command and reader
trusts the fields it reads, and refuses a broken one in one line (ManifestError); format 1
versions still read. What the fields claim of each other (counts, sources, splits, blend,
lineage) is judged by formats/claims.py, for verify and the reader alike. Counts balance:
documents in = out + removed (per rule: exact, near, curation rules, takedown) + quarantined
(claims.py `documents_accounted`). The blend line: formats/data_path.py `blend_line`.
In full: docs/formats.md, "The manifest: manifest.json".
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

from pipeline.core.layout import MANIFEST
from pipeline.core.storage import Location
from pipeline.formats.manifest_fields import (
    Count,
    DatasetName,
    FileName,
    Hex64,
    Hex128,
    IndexFile,
    Number,
    SplitName,
    VersionId,
)
from pipeline.formats.megatron import token_dtype

FORMAT = "pipeline.dataset/2"
FORMAT_V1 = "pipeline.dataset/1"  # no block checksums: still read (whole-shard checksums only)
FORMATS = (FORMAT_V1, FORMAT)
MAX_WEIGHT = 1e6  # a source's largest weight (config/sections.py SourceConfig.weight's bound too)
TAKEDOWN_KEY = "removed_takedown"  # only where a takedown removed documents
FILTERED_KEY = "removed_filtered"  # {curation rule: documents}: only where a chain removed any
CURATED_KEY = "curated"  # {changed: {transform: documents}, spans: {kind: n}}: where one ran
# {kind: records} of the web archives read: the records that are not documents by what they
# were, and `documents` (those that entered docs_in); only where a web archive was read
RECORDS_KEY = "records"
# the kinds ingest/web_archive.py counts the records in docs_in under
DOCUMENT_KINDS = ("documents", "quarantined")
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
SHARD_OPTIONAL_KEYS = ("source", "split", "bin_block_bytes", "bin_blocks_xxh3_64")
# Optional fields a format's every writer writes (run, remove): required on read. Format 1 also
# holds versions from before sources, splits and blend (2026-11-30) and the document index
# (2026-12-01); its `sources` is required only where a shard names a source (formats/claims.py).
FORMAT_FIELDS = {FORMAT_V1: (), FORMAT: ("sources", "splits", "blend", "documents")}


class ManifestError(Exception):
    """A version is not a committed, well-formed dataset."""


class WeightError(ManifestError, ValueError):
    """A source's weight is not a finite number in (0, MAX_WEIGHT]."""


def check_weights(manifest: dict[str, Any], where: str = "manifest") -> dict[str, float]:
    """Each source's weight (1.0 where a source has none): a number, not a bool or a string,
    finite, > 0 and <= MAX_WEIGHT. A weight outside that range would make the reader drop the
    source (<= 0) or build an epoch it cannot hold (huge), so it is refused, naming the field."""
    sources = manifest.get("sources") or {}
    weights = {}
    for name, entry in sources.items():
        value = entry.get("weight", 1.0) if isinstance(entry, dict) else None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (ok and math.isfinite(value) and 0 < value <= MAX_WEIGHT):
            raise WeightError(
                f"{where}: sources.{name}.weight: {value!r} is not a number in (0, {MAX_WEIGHT:g}]"
            )
        weights[name] = float(value)
    return weights


def build_manifest(
    cfg,
    layout,
    version_id: str,
    tokenizer: dict[str, Any],
    counts: dict[str, Any],
    shards: list[dict[str, Any]],
    input_digest: str,
    run: dict[str, Any],
    sources: dict[str, dict[str, Any]] | None = None,
    splits: dict[str, list[dict[str, Any]]] | None = None,
    blend: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The manifest of a version of `layout.dataset` (cfg: Config, layout: RunLayout)."""
    dataset = layout.dataset
    extra: dict[str, Any] = {}
    if sources is not None:
        extra["sources"] = sources
    if splits is not None:
        extra["splits"] = {
            "train": [s["bin"] for s in shards],
            "valid": [_shard_entry(s) for s in splits.get("valid", [])],
        }
    if blend is not None:
        extra["blend"] = blend
    return {
        **extra,
        "format": FORMAT,  # every shard entry carries block checksums (ShardWriter)
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
            "tokens": layout.tokens.relative_to(dataset),
        },
        "shards": [_shard_entry(s) for s in shards],
        "run": {"run_id": layout.run_id, "output_uri": dataset.uri, **run},
    }


def _shard_entry(shard: dict[str, Any]) -> dict[str, Any]:
    keys = SHARD_KEYS + tuple(k for k in SHARD_OPTIONAL_KEYS if k in shard)
    return {k: shard[k] for k in keys}


def parse_blend(line: str) -> list[tuple[float, str]]:
    """(weight, prefix) pairs of a data_path line, as Megatron reads it (an even number of
    words, alternately a float and a path prefix)."""
    words = line.split()
    if len(words) % 2:
        raise ManifestError(f"blend line has an odd number of words: {line!r}")
    pairs = []
    for i in range(0, len(words), 2):
        try:
            weight = float(words[i])
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ManifestError(f"blend line weight {words[i]!r} is not a number above 0")
        pairs.append((weight, words[i + 1]))
    return pairs


def split_shards(manifest: dict[str, Any], split: str = "train") -> list[dict[str, Any]]:
    """The shard entries of a split; a version from before splits has only training shards."""
    if split == "train":
        return manifest["shards"]
    return (manifest.get("splits") or {}).get(split, [])


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
    except RecursionError:  # json nests by recursion: `[` x 100,000 exhausts the stack
        raise ManifestError(f"{loc.uri}: not a manifest: JSON nested too deeply") from None
    check_structure(manifest, where=loc.uri)
    return manifest


def check_structure(manifest: Any, where: str = "manifest") -> None:
    """Every field a command or reader relies on, with its type (the Manifest model): a
    malformed or hand-edited manifest is a ManifestError naming the field, never a TypeError or
    KeyError later."""
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS:
        raise ManifestError(f"{where}: format is not one of {', '.join(FORMATS)}")
    try:
        Manifest.model_validate(manifest)
    except ValidationError as e:
        raise ManifestError(f"{where}: {_first_problem(e)}") from None
    check_weights(manifest, where)
    check_special_tokens(manifest, where)


def _first_problem(err: ValidationError) -> str:
    """The first thing the model rejects, as one line: `shards.0.bin: 5 is not a file name`."""
    e = err.errors()[0]
    key = ".".join(str(p) for p in e["loc"])
    if e["type"] == "missing":
        return f"{key} is missing"
    if e["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return f"{key} is not an object"
    if e["type"] == "list_type":
        return f"{key} must be a list"
    msg = e["msg"].removeprefix("Value error, ")
    return f"{key}: {msg}" if key else msg


def _blend_line(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a blend line (a string)")
    try:
        parse_blend(value)
    except ManifestError as e:
        raise ValueError(str(e)) from None
    return value


BlendLine = Annotated[str, BeforeValidator(_blend_line)]


class _Entry(BaseModel):
    """A manifest object: the fields readers rely on are typed; others pass through."""

    model_config = ConfigDict(extra="allow")


class Counts(_Entry):
    """`counts`, and each entry of `sources` (COUNT_KEYS)."""

    docs_in: Count
    docs_out: Count
    removed_exact: Count
    removed_near: Count
    quarantined: Count
    tokens: Count
    removed_takedown: Count | None = None  # TAKEDOWN_KEY: only where a takedown removed any
    removed_filtered: dict[str, Count] | None = None  # FILTERED_KEY: per curation rule
    quarantined_by_reason: dict[str, Count] | None = None  # in `counts`, not in a source's
    records: dict[str, Count] | None = None  # RECORDS_KEY: where a web archive was read
    weight: Number = 1.0  # in a source's entry: absent means 1, null is not a weight


class TokenizerEntry(_Entry):
    """vocab_size a positive integer and dtype the one the pipeline writes for the largest id
    (max_id; vocab_size - 1 where a version predates it; formats/megatron.py): a reader
    trusting a wider dtype would read two token ids as one. EOS and BOS ids within range."""

    vocab_size: Count
    max_id: Count | None = None
    dtype: Any = None
    eos_id: Count | None = None
    bos_id: Count | None = None
    special_tokens_in_text: str | None = None

    @model_validator(mode="after")
    def _dtype_of_ids(self) -> TokenizerEntry:
        vocab = self.vocab_size
        if vocab == 0:
            raise ValueError("vocab_size must be a positive integer")
        bound = vocab if self.max_id is None else self.max_id + 1
        what = f"ids 0 .. {bound - 1}" if self.max_id is not None else f"a {vocab}-token vocabulary"
        expected = np.dtype(token_dtype(bound)).name
        if self.dtype != expected:
            raise ValueError(f"dtype {self.dtype!r} is not {expected!r}, the dtype of {what}")
        for key in ("eos_id", "bos_id"):
            value = getattr(self, key)
            if value is not None and value >= bound:
                raise ValueError(f"{key} {value!r} is not an id below {bound}")
        return self


class ShardEntry(_Entry):
    """One shard (SHARD_KEYS, and SHARD_OPTIONAL_KEYS since sources and splits)."""

    bin: FileName
    idx: FileName
    bin_bytes: Count
    idx_bytes: Count
    tokens: Count
    documents: Count
    bin_xxh3_128: Hex128
    idx_xxh3_128: Hex128
    source: str | None = None  # a key of `sources` (formats/claims.py)
    split: SplitName | None = None  # the split whose list holds the entry (formats/claims.py)
    bin_block_bytes: Count | None = None
    bin_blocks_xxh3_64: list[Hex64] | None = None

    @model_validator(mode="after")
    def _blocks_cover_the_bin(self) -> ShardEntry:
        """Block checksums: both fields or neither, one digest per block of the .bin."""
        size, sums = self.bin_block_bytes, self.bin_blocks_xxh3_64
        if size is None and sums is None:
            return self
        if size is None or sums is None or size == 0:
            raise ValueError("bin_block_bytes (> 0) and bin_blocks_xxh3_64 go together")
        if len(sums) != -(-self.bin_bytes // size):
            raise ValueError(
                f"bin_blocks_xxh3_64 has {len(sums)} digests, {self.bin_bytes} bytes in blocks"
                f" of {size} need {-(-self.bin_bytes // size)}"
            )
        return self

    @property
    def has_blocks(self) -> bool:
        return self.bin_blocks_xxh3_64 is not None


class BlendEntry(_Entry):
    train: BlendLine | None = None
    valid: BlendLine | None = None


class DocumentsEntry(_Entry):
    """`documents`: the document index's size, checksum and rows (formats/documents.py)."""

    bytes: Count
    xxh3_128: Hex128
    rows: Count
    file: IndexFile


class Splits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    train: list[Any]
    valid: list[ShardEntry] = []


class Manifest(_Entry):
    """The fields of manifest.json every command and reader relies on (see this module's
    docstring for all of them), validated on read (load_manifest) and before a commit."""

    format: Literal["pipeline.dataset/1", "pipeline.dataset/2"]
    name: DatasetName
    version: VersionId
    counts: Counts
    tokenizer: TokenizerEntry
    shards: list[ShardEntry]
    splits: Splits | None = None
    sources: dict[str, Counts] | None = None
    blend: BlendEntry | None = None
    documents: DocumentsEntry | None = None

    @model_validator(mode="after")
    def _names_once(self) -> Manifest:
        """Each file named once across all shards; splits.train names the training shards."""
        seen: dict[str, int] = {}
        every = self.shards + (self.splits.valid if self.splits else [])
        for i, shard in enumerate(every):
            for key in ("bin", "idx"):
                name = getattr(shard, key)
                if name in seen:
                    raise ValueError(
                        f"shard {i} {key} {name!r} is already named by shard {seen[name]}"
                    )
                seen[name] = i
        if self.splits is not None and self.splits.train != [s.bin for s in self.shards]:
            raise ValueError("splits.train does not name the shards list")
        if self.format == FORMAT:
            for i, shard in enumerate(every):
                if not shard.has_blocks:
                    raise ValueError(f"shard {i} ({shard.bin}) has no bin_blocks_xxh3_64")
        return self

    @model_validator(mode="after")
    def _fields_written(self) -> Manifest:
        """The fields every writer of the format writes (FORMAT_FIELDS) are there, not null,
        and `sources` names at least one source: deleting one must not switch a check off
        (the per-source balances, the mixture's weights, the document index's)."""
        for key in FORMAT_FIELDS[self.format]:
            if getattr(self, key) is None:
                raise ValueError(f"{key} is missing or null (every {self.format} manifest has it)")
        if self.sources is not None and not self.sources:
            raise ValueError("sources is empty (a version has at least one source)")
        return self


def check_special_tokens(manifest: dict[str, Any], where: str = "manifest") -> None:
    """The fields the EOS/BOS document checks rely on (formats/verify.py), where the manifest's
    version has them: tokenizer.special_tokens_in_text ("text" or "special") in format 2, and in
    a format-1 manifest written since special-token handling (its tokenizer names bos_id or
    engine, or its config names tokenize.special_tokens_in_text); with "text", eos_id. A deleted
    or misspelled field must not switch the checks off."""
    tok = manifest["tokenizer"]
    config = manifest.get("config")
    tokenize = config.get("tokenize") if isinstance(config, dict) else None
    configured = tokenize.get("special_tokens_in_text") if isinstance(tokenize, dict) else None
    needed = (
        manifest["format"] == FORMAT
        or "bos_id" in tok
        or "engine" in tok
        or configured is not None
    )
    value = tok.get("special_tokens_in_text")
    if value is None and not needed:
        return  # a version from before special-token handling: nothing to check
    if value not in ("text", "special"):
        problem = "is missing" if value is None else f"{value!r} is not 'text' or 'special'"
        raise ManifestError(f"{where}: tokenizer.special_tokens_in_text {problem}")
    if configured is not None and configured != value:
        raise ManifestError(
            f"{where}: tokenizer.special_tokens_in_text {value!r} is not"
            f" config.tokenize.special_tokens_in_text {configured!r}"
        )
    if value == "text" and tok.get("eos_id") is None:
        raise ManifestError(f"{where}: tokenizer.eos_id is missing (the EOS checks need it)")

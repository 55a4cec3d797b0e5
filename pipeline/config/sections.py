"""The sections of a run configuration: one model per top-level key of the YAML file.

config/model.py assembles them into Config (with the rules across sections, the reuse keys and
load_config); the retention and prices sections live with their own code
(retention/policy.py, report/prices.py). Each field declares which stages' bytes it changes,
`changes(...)` (pipeline/config/reuse_keys.py: the reuse keys and the run's key derive from it).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ByteSize, Field, field_validator, model_validator

from pipeline.config.reuse_keys import changes
from pipeline.core.model import MAX_BYTES, MAX_COUNT, MAX_SECONDS, Bytes, Seed, StrictModel
from pipeline.exchange.plan import SMALL_GETS

# Keys that change how or where bytes move, never which.
NO_BYTES = changes()
# Keys that decide what a unit's read outputs hold (and so everything after them).
READ = changes("read", "output")
# Keys that decide the token ids of a document (the token files) and so the shards.
TOKENS = changes("tokens", "output")
# Keys that decide the dataset only: drawn, cut or decided from the intermediates at a later
# stage (dedup decisions, the split, the shards), so a rerun reuses every intermediate.
OUTPUT = changes("output")


class InputConfig(StrictModel):
    uri: str = Field(
        description="folder or prefix the documents are listed under: a local path, file:// or"
        " s3:// (relative paths: from the config file's folder)",
        examples=["s3://raw-bucket/web/"],
        json_schema_extra=NO_BYTES,
    )
    include: list[str] = Field(
        default_factory=lambda: ["**"],
        description="globs over the path relative to uri; a file is read if one matches ('*'"
        " stays in one folder: '**/*.jsonl' for any depth)",
        json_schema_extra=OUTPUT,
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="globs over the relative path; a matching file is skipped as 'excluded'",
        json_schema_extra=OUTPUT,
    )
    text_field: str = Field(
        default="text",
        description="JSONL key or Parquet column holding the document's text",
        json_schema_extra=READ,
    )
    id_field: str | None = Field(
        default="id",
        description="JSONL key or Parquet column of a document id; absent, null or no field:"
        " an id derived from the file path and row",
        json_schema_extra=READ,
    )
    keep_fields: list[str] = Field(
        default_factory=list,
        description="top-level record fields (JSONL keys, Parquet columns) carried into the"
        " version's documents.parquet, one string column each; a value that is not a string or"
        " number quarantines the record (non_scalar_field)",
        examples=[["url"]],
        json_schema_extra=changes("read", "output", columns_only=True),
    )

    curate: list[dict[str, Any]] | None = Field(
        default=None,
        description="this source's curation chain, run in the read pass (docs/curate.md): a"
        " list of {step: parameters}; null: the config's `curate`",
        examples=[[{"language": {"languages": ["en"]}}, {"gopher_quality": {}}]],
        json_schema_extra=READ,
    )

    @field_validator("curate")
    @classmethod
    def _curate_chain(cls, steps: list | None) -> list | None:
        from pipeline.curate.chain import parse

        return None if steps is None else [{n: p} for n, p in parse(steps, "chain")]

    @field_validator("keep_fields")
    @classmethod
    def _kept_field_names(cls, names: list[str]) -> list[str]:
        from pipeline.formats.documents import INDEX_SCHEMA

        for name in names:
            if not name or name in INDEX_SCHEMA.names:
                raise ValueError(
                    f"{name!r} cannot be kept: a field name must be non-empty and none of the"
                    f" index's own columns ({', '.join(INDEX_SCHEMA.names)})"
                )
        if len(set(names)) != len(names):
            raise ValueError("a field is named twice")
        return names


# A named source: its files, how to read them, and its weight in the training mixture.
SOURCE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # safe as part of a file name (shards, blend)


class SourceConfig(InputConfig):
    """One entry of `inputs:`. `weight` (> 0, default 1) makes the source contribute weight x its
    tokens per epoch: it sets the manifest's Megatron blend line and the StreamReader's mixture,
    never the shard bytes (see formats/manifest.py)."""

    name: str = Field(
        pattern=SOURCE_NAME,
        description="the source's name: prefixes its document ids and names its shards",
        examples=["web"],
        json_schema_extra=READ,
    )
    weight: float = Field(
        default=1.0,
        gt=0.0,
        le=1e6,
        description="share of the training mixture: weight x the source's tokens per epoch"
        " (the blend line; never changes shard bytes)",
        json_schema_extra=OUTPUT,
    )


class SplitConfig(StrictModel):
    # by the stable-id hash (tokens/split.py), so a document stays on its side across runs
    valid_fraction: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="share of documents held out as the validation split (by a hash of their"
        " id); 0: no validation shards",
        # a token file holds each split in one block (tokens/pack.py): changing it re-reads
        json_schema_extra=TOKENS,
    )


class OutputConfig(StrictModel):
    uri: str = Field(
        description="folder or prefix the dataset is written under, as <uri>/<name>/<version>/",
        examples=["s3://datasets-bucket/tokenized/"],
    )


class StorageConfig(StrictModel):
    """Options passed to s3fs for s3:// URIs (ignored for local paths)."""

    endpoint_url: str | None = Field(
        default=None, description="S3 endpoint URL; null: AWS S3 (e.g. http://127.0.0.1:9000)"
    )
    region: str | None = Field(default=None, description="S3 region; null: the AWS default")
    profile: str | None = Field(
        default=None,
        description="AWS profile name for credentials (credentials never go in the config)",
    )
    anon: bool = Field(default=False, description="unsigned (anonymous) requests, public buckets")
    max_pool_connections: int = Field(
        default=32, ge=1, le=10_000, description="HTTP connections per process to the store"
    )
    # botocore's "standard" mode: jittered exponential backoff
    retries: int = Field(
        default=10,
        ge=1,
        le=100,
        description="attempts per request in all, retried on 503 SlowDown, 500, resets and"
        " timeouts",
    )
    read_timeout: float = Field(
        default=15.0,
        gt=0,
        le=MAX_SECONDS,
        description="seconds without a byte before a request is retried",
    )
    connect_timeout: float = Field(
        default=5.0,
        gt=0,
        le=MAX_SECONDS,
        description="seconds to connect; also the reach check's (exit 5)",
    )
    # Checked by the store before it accepts a PUT (S3 ChecksumAlgorithm; a corrupted upload is
    # refused, BadDigest). SHA256 is the algorithm s3fs carries through a multipart upload.
    upload_checksum: Literal["SHA256", "none"] = Field(
        default="SHA256",
        description="checksum sent with every PUT and multipart part, checked by the store before"
        " it accepts the bytes; none: for a store that rejects checksum headers (then botocore"
        " sends none either)",
    )


class RayConfig(StrictModel):
    address: str | None = Field(
        default=None,
        description="Ray cluster address; null: RAY_ADDRESS if set, else a local Ray",
    )
    num_cpus: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="CPUs of a local Ray (null: all); ignored on a cluster",
    )


class RunConfig(StrictModel):
    max_input_shrink: float = Field(  # run/input_guard.py
        default=0.5,
        ge=0.0,
        le=1.0,
        description="refuse (exit 3) a run whose listed bytes of a source fell by more than this"
        " fraction against the newest committed version's; a source of that version renamed"
        " or dropped, a source or an input that yields no document are refused too;"
        " `run --allow-empty` publishes anyway",
    )


class IngestConfig(StrictModel):
    unit_bytes: Bytes = Field(
        default=ByteSize(64 * 2**20),
        description="bytes of input per work unit (one read task); larger files are split"
        " where the format allows",
        json_schema_extra=OUTPUT,
    )
    max_error_rate: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="the run stops (exit 3) when more than this share of records, or of bytes,"
        " is quarantined",
        json_schema_extra=OUTPUT,
    )
    # never held whole or tokenized (see ingest/records.py)
    max_doc_bytes: Bytes = Field(
        default=ByteSize(16 * 2**20),
        description="a larger record (JSONL line, Parquet text value, text file) is quarantined"
        " as too_large",
        json_schema_extra=READ,
    )


class NearDedupConfig(StrictModel):
    enabled: bool = Field(
        default=True, description="remove near-duplicates (MinHash LSH)", json_schema_extra=OUTPUT
    )
    ngram: int = Field(
        default=5, ge=1, le=1024, description="words per shingle", json_schema_extra=OUTPUT
    )
    # 32 bands x 8 rows: see dedup/minhash.py for why
    num_perm: int = Field(
        default=256,
        ge=8,
        le=8192,
        description="MinHash permutations per document",
        json_schema_extra=OUTPUT,
    )
    bands: int = Field(
        default=32,
        ge=1,
        le=8192,
        description="LSH bands (bands x rows <= num_perm)",
        json_schema_extra=OUTPUT,
    )
    rows: int = Field(
        default=8,
        ge=1,
        le=8192,
        description="signature rows per LSH band",
        json_schema_extra=OUTPUT,
    )
    threshold: float = Field(
        default=0.8,
        gt=0.0,
        le=1.0,
        description="estimated Jaccard similarity at or above which a candidate pair is a"
        " duplicate",
        json_schema_extra=OUTPUT,
    )
    seed: Seed = Field(
        default=42, description="seed of the MinHash permutations", json_schema_extra=OUTPUT
    )

    @model_validator(mode="after")
    def _bands_fit(self) -> NearDedupConfig:
        # else the first signing task fails (dedup/minhash.py MinHashParams), after the listing
        if self.bands * self.rows > self.num_perm:
            raise ValueError(
                f"bands x rows = {self.bands} x {self.rows} is more than num_perm {self.num_perm}"
            )
        return self


class DedupConfig(StrictModel):
    exact: bool = Field(
        default=True,
        description="remove exact duplicates (same normalized text)",
        json_schema_extra=OUTPUT,
    )
    # One task per hash partition, ceil(bytes / partition_bytes) of them, so a partition task's
    # memory (hash rows, 256 B of signature per candidate document) stays bounded at any size.
    partitions: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="dedup hash partitions (one task each); null: from the listed bytes and"
        " partition_bytes",
        json_schema_extra=READ,
    )
    partition_bytes: ByteSize = Field(
        default=ByteSize(2**30),
        gt=0,
        le=MAX_BYTES,
        description="listed input bytes per dedup partition when partitions is null",
        json_schema_extra=NO_BYTES,
    )
    # writers are grouped until a group's part of a partition is this big (exchange/plan.py)
    exchange_request_bytes: Bytes = Field(
        default=ByteSize(16 * 2**20),
        description="smallest piece a dedup exchange aims to move per GET (how bytes move,"
        " never which)",
        json_schema_extra=NO_BYTES,
    )
    # beyond it the exchange takes more, smaller requests rather than one task whose disk and
    # time grow with the corpus
    exchange_task_bytes: Bytes = Field(
        default=ByteSize(4 * 2**30),
        description="most bytes one regroup task of a dedup exchange moves",
        json_schema_extra=NO_BYTES,
    )
    # a constant, so requests stay linear in the data (exchange/plan.py SMALL_GETS)
    exchange_small_gets: int = Field(
        default=SMALL_GETS,
        ge=0,
        le=MAX_COUNT,
        description="GETs a small dedup exchange may spend to save a wave: one of at most this"
        " many GETs reads the writers' objects directly, and a pass 1 with fewer tasks than"
        " partitions is cut finer within it; 0: neither",
        json_schema_extra=NO_BYTES,
    )
    near: NearDedupConfig = Field(
        default=NearDedupConfig(), description="near-duplicate removal (MinHash LSH)"
    )

    def partition_count(self, listed_bytes: int) -> int:
        if self.partitions is not None:
            return self.partitions
        return max(1, -(-int(listed_bytes) // int(self.partition_bytes)))


class TokenizeConfig(StrictModel):
    tokenizer: str = Field(
        description="a Hugging Face tokenizer.json (relative: from the config file's folder)",
        examples=["tokenizer.json"],
        json_schema_extra=changes("tokens", "output", by_content=True),
    )
    eos: str = Field(
        default="<|endoftext|>",
        description="token appended after every document; must be in the tokenizer",
        json_schema_extra=TOKENS,
    )
    batch_docs: int = Field(
        default=1024,
        ge=1,
        le=MAX_COUNT,
        description="documents per encode batch",
        json_schema_extra=NO_BYTES,
    )
    # The shards are the same bytes whichever engine runs (see tokens/check.py).
    engine: Literal["auto", "fastokens", "tokenizers"] = Field(
        default="auto",
        description="auto: fastokens when it loads the tokenizer and passes the equality"
        " probe, else tokenizers",
        json_schema_extra=NO_BYTES,
    )
    # text keeps the EOS id only where the pipeline appends it (verify checks it)
    special_tokens_in_text: Literal["text", "special"] = Field(
        default="text",
        description="text: special-token text inside a document is encoded as ordinary text;"
        " special: as the token's id",
        json_schema_extra=TOKENS,
    )
    bos: str | None = Field(
        default=None,
        description='token prepended to every document, e.g. "<s>"; null: none',
        json_schema_extra=TOKENS,
    )
    verify_fraction: float = Field(
        default=0.001,
        ge=0.0,
        le=1.0,
        description="share of documents re-encoded with tokenizers to check the engine's ids",
        json_schema_extra=NO_BYTES,
    )
    # tokenizers is ~100x slower per byte than fastokens (one core each), so the check costs
    # ~100 x the share of bytes it re-encodes: 0.1 % of the documents, at most 32 KiB, keeps it
    # under 10 % of the engine from ~16 MiB units up (1 % uncapped cost as much as the engine)
    verify_bytes: Bytes = Field(
        default=ByteSize(32 * 2**10),
        description="most text bytes per tokenize task re-encoded with tokenizers (of the"
        " verify_fraction sample, lowest shuffle keys first); 0: no per-task check",
        json_schema_extra=NO_BYTES,
    )


class PackConfig(StrictModel):
    shard_bytes: Bytes = Field(
        default=ByteSize(256 * 2**20),
        description="token bytes per Megatron shard (.bin)",
        json_schema_extra=OUTPUT,
    )
    seed: Seed = Field(
        default=0,
        description="seed of the document shuffle across shards",
        json_schema_extra=TOKENS,
    )
    # see tokens/pack.py
    exchange_request_bytes: Bytes = Field(
        default=ByteSize(16 * 2**20),
        description="smallest token piece pack's two-pass exchange aims to move per GET",
        json_schema_extra=NO_BYTES,
    )
    # Beyond it the exchange takes more, smaller requests rather than one task whose disk and
    # time grow with the corpus. The default is reached past ~13 TB of tokens at 256 MiB units
    # and shards (10 TB of text: ~41 GB per task, uncapped); lower it to trade local disk for
    # requests (plan --corpus-bytes)
    exchange_task_bytes: Bytes = Field(
        default=ByteSize(64 * 2**30),
        description="most token bytes one pack pass-1 task moves and spills to local disk",
        json_schema_extra=NO_BYTES,
    )

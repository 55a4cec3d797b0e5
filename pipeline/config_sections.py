"""The sections of a run configuration: one model per top-level key of the YAML file.

pipeline.config assembles them into Config (with the rules across sections, the reuse keys and
load_config); the retention and prices sections live with their own code
(retention/policy.py, report/prices.py). Each model's comments say what a key changes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ByteSize, Field

from pipeline.core.model import Bytes, Seed, StrictModel


class InputConfig(StrictModel):
    uri: str
    include: list[str] = Field(default_factory=lambda: ["**"])
    exclude: list[str] = Field(default_factory=list)
    text_field: str = "text"
    id_field: str | None = "id"


# A named source: its files, how to read them, and its weight in the training mixture.
SOURCE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # safe as part of a file name (shards, blend)


class SourceConfig(InputConfig):
    """One entry of `inputs:`. `weight` (> 0, default 1) makes the source contribute weight x its
    tokens per epoch: it sets the manifest's Megatron blend line and the StreamReader's mixture,
    never the shard bytes (see formats/manifest.py)."""

    name: str = Field(pattern=SOURCE_NAME)
    weight: float = Field(default=1.0, gt=0.0, le=1e6)


class SplitConfig(StrictModel):
    # Share of documents held out as the validation set: those whose stable-id hash falls below
    # it (tokens/split.py). 0: no validation shards.
    valid_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)


class OutputConfig(StrictModel):
    uri: str


class StorageConfig(StrictModel):
    """Options passed to s3fs for s3:// URIs (ignored for local paths)."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    anon: bool = False
    max_pool_connections: int = Field(default=32, ge=1)
    # Each request is retried by botocore ("standard" mode: jittered exponential backoff) on
    # 503 SlowDown / 500 / connection resets / timeouts, up to `retries` attempts in all.
    retries: int = Field(default=10, ge=1)
    read_timeout: float = Field(default=15.0, gt=0)  # seconds without a byte: retry the request
    connect_timeout: float = Field(default=5.0, gt=0)  # seconds to connect; also the reach check
    # Every object written is sent with this checksum of its bytes (of each part, in a multipart
    # upload), which the store checks before it accepts the PUT (S3 ChecksumAlgorithm; a
    # corrupted upload is refused, BadDigest). SHA256 is the algorithm s3fs carries through a
    # multipart upload; "none" for a store that rejects checksum headers (then botocore sends
    # none of its own either: request_checksum_calculation when_required).
    upload_checksum: Literal["SHA256", "none"] = "SHA256"


class RayConfig(StrictModel):
    address: str | None = None  # None: RAY_ADDRESS if set, else a local ray.init
    num_cpus: int | None = Field(default=None, ge=1)  # only for a local ray.init


class RunConfig(StrictModel):
    # Refuse (exit 3) a run whose listed bytes of a source fell by more than this fraction
    # against the newest committed version's (run --allow-empty overrides; run/input_guard.py).
    max_input_shrink: float = Field(default=0.5, ge=0.0, le=1.0)


class IngestConfig(StrictModel):
    unit_bytes: Bytes = ByteSize(64 * 2**20)
    max_error_rate: float = Field(default=0.01, ge=0.0, le=1.0)
    # A record larger than this (JSONL: the line; Parquet: the text value; text file: the file)
    # is quarantined as too_large, never held whole or tokenized (see ingest/records.py).
    max_doc_bytes: Bytes = ByteSize(16 * 2**20)


class NearDedupConfig(StrictModel):
    enabled: bool = True
    ngram: int = Field(default=5, ge=1)
    num_perm: int = Field(default=256, ge=8)  # 32 bands x 8 rows: see dedup/minhash.py for why
    bands: int = Field(default=32, ge=1)
    rows: int = Field(default=8, ge=1)
    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    seed: Seed = 42


class DedupConfig(StrictModel):
    exact: bool = True
    # Exact and near dedup run one task per hash partition. Their count follows from the listed
    # input bytes, ceil(bytes / partition_bytes), so a partition task's memory (hash rows, about
    # 1 KiB of signature per document) stays bounded whatever the corpus; `partitions` overrides.
    partitions: int | None = Field(default=None, ge=1)
    partition_bytes: ByteSize = Field(default=ByteSize(2**30), gt=0)
    # smallest piece each dedup exchange (hash rows, signatures, bands, edges, removals) aims to
    # move per GET: writers are grouped until a group's part of a partition is this big
    # (formats/sectioned.py); how bytes move, never which
    exchange_request_bytes: Bytes = ByteSize(16 * 2**20)
    # most bytes one regroup task of an exchange moves: beyond it the exchange takes more,
    # smaller requests rather than one task whose disk and time grow with the corpus
    exchange_task_bytes: Bytes = ByteSize(4 * 2**30)
    near: NearDedupConfig = NearDedupConfig()

    def partition_count(self, listed_bytes: int) -> int:
        if self.partitions is not None:
            return self.partitions
        return max(1, -(-int(listed_bytes) // int(self.partition_bytes)))


class TokenizeConfig(StrictModel):
    tokenizer: str
    eos: str = "<|endoftext|>"
    batch_docs: int = Field(default=1024, ge=1)
    # auto: fastokens when it loads the tokenizer and passes the equality probe, else tokenizers.
    # The shards are the same bytes whichever engine runs (see tokens/check.py).
    engine: Literal["auto", "fastokens", "tokenizers"] = "auto"
    # text: special/added tokens' text inside a document is encoded as ordinary text, so the EOS
    # id occurs only where the pipeline appends it; special: such text becomes the token's id.
    special_tokens_in_text: Literal["text", "special"] = "text"
    bos: str | None = None  # a token prepended to every document, e.g. "<s>"
    verify_fraction: float = Field(default=0.01, ge=0.0, le=1.0)  # re-encoded by tokenizers


class PackConfig(StrictModel):
    shard_bytes: Bytes = ByteSize(256 * 2**20)
    seed: Seed = 0
    # smallest token piece pack's two-pass exchange aims to move per GET (see tokens/pack.py)
    exchange_request_bytes: Bytes = ByteSize(16 * 2**20)
    # most token bytes one pass-1 task moves (and spills to local disk): beyond it the exchange
    # takes more, smaller requests rather than one task whose disk and time grow with the corpus.
    # The default is reached past ~13 TB of tokens at 256 MiB units and shards (10 TB of text:
    # ~41 GB per task, uncapped); lower it to trade local disk for requests (plan --corpus-bytes)
    exchange_task_bytes: Bytes = ByteSize(64 * 2**30)

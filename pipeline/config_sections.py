"""The sections of a run configuration: one model per top-level key of the YAML file.

pipeline.config assembles them into Config (with the rules across sections, the reuse keys and
load_config); the retention and prices sections live with their own code
(retention/policy.py, report/prices.py). Each field declares which stages' bytes it changes,
`changes(...)` (pipeline/reuse_keys.py: the reuse keys and the run's key derive from it); its
comment says why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ByteSize, Field

from pipeline.core.model import Bytes, Seed, StrictModel
from pipeline.reuse_keys import changes

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
    uri: str = Field(json_schema_extra=NO_BYTES)  # where the files are, not what they hold
    # a unit id hashes its files, byte ranges and versions: the selection decides which units
    # exist, not what a unit's read output holds
    include: list[str] = Field(default_factory=lambda: ["**"], json_schema_extra=OUTPUT)
    exclude: list[str] = Field(default_factory=list, json_schema_extra=OUTPUT)
    text_field: str = Field("text", json_schema_extra=READ)
    id_field: str | None = Field("id", json_schema_extra=READ)


# A named source: its files, how to read them, and its weight in the training mixture.
SOURCE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"  # safe as part of a file name (shards, blend)


class SourceConfig(InputConfig):
    """One entry of `inputs:`. `weight` (> 0, default 1) makes the source contribute weight x its
    tokens per epoch: it sets the manifest's Megatron blend line and the StreamReader's mixture,
    never the shard bytes (see formats/manifest.py)."""

    # the rows' origin and (with several sources) the ids' prefix "<name>/"
    name: str = Field(pattern=SOURCE_NAME, json_schema_extra=READ)
    # the blend line and the reader's mixture, not any intermediate's bytes
    weight: float = Field(default=1.0, gt=0.0, le=1e6, json_schema_extra=OUTPUT)


class SplitConfig(StrictModel):
    # Share of documents held out as the validation set: those whose stable-id hash falls below
    # it (tokens/split.py). 0: no validation shards.
    valid_fraction: float = Field(default=0.0, ge=0.0, lt=1.0, json_schema_extra=OUTPUT)


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


class RayConfig(StrictModel):
    address: str | None = None  # None: RAY_ADDRESS if set, else a local ray.init
    num_cpus: int | None = Field(default=None, ge=1)  # only for a local ray.init


class RunConfig(StrictModel):
    # Refuse (exit 3) a run whose listed bytes of a source fell by more than this fraction
    # against the newest committed version's (run --allow-empty overrides; run/input_guard.py).
    max_input_shrink: float = Field(default=0.5, ge=0.0, le=1.0)


class IngestConfig(StrictModel):
    # decides the units (their ids, which hash their pieces), not what a unit holds
    unit_bytes: Bytes = Field(ByteSize(64 * 2**20), json_schema_extra=OUTPUT)
    # checked after reading: whether the run goes on, not what a unit holds
    max_error_rate: float = Field(default=0.01, ge=0.0, le=1.0, json_schema_extra=OUTPUT)
    # A record larger than this (JSONL: the line; Parquet: the text value; text file: the file)
    # is quarantined as too_large, never held whole or tokenized (see ingest/records.py).
    max_doc_bytes: Bytes = Field(ByteSize(16 * 2**20), json_schema_extra=READ)


class NearDedupConfig(StrictModel):
    """Every key decides the near-dedup removals. The signatures a unit's read writes are named
    by their own key (run/neardup.signature_key), so none of these is part of the read key."""

    enabled: bool = Field(True, json_schema_extra=OUTPUT)
    ngram: int = Field(default=5, ge=1, json_schema_extra=OUTPUT)
    # 32 bands x 8 rows: see dedup/minhash.py for why
    num_perm: int = Field(default=256, ge=8, json_schema_extra=OUTPUT)
    bands: int = Field(default=32, ge=1, json_schema_extra=OUTPUT)
    rows: int = Field(default=8, ge=1, json_schema_extra=OUTPUT)
    threshold: float = Field(default=0.8, gt=0.0, le=1.0, json_schema_extra=OUTPUT)
    seed: Seed = Field(42, json_schema_extra=OUTPUT)


class DedupConfig(StrictModel):
    # dedup decisions are made after reading, from the hashes; they reach the token files
    # through `<removed>` (core/layout.py), not the token key
    exact: bool = Field(True, json_schema_extra=OUTPUT)
    # Exact and near dedup run one task per hash partition. Their count follows from the listed
    # input bytes, ceil(bytes / partition_bytes), so a partition task's memory (hash rows, about
    # 1 KiB of signature per document) stays bounded whatever the corpus; `partitions` overrides.
    # a unit's hash rows are sectioned by partition (formats/sectioned.py)
    partitions: int | None = Field(default=None, ge=1, json_schema_extra=READ)
    # only sets the count, which a run resolves into `partitions` (Config.for_listing) first
    partition_bytes: ByteSize = Field(default=ByteSize(2**30), gt=0, json_schema_extra=NO_BYTES)
    # smallest piece each dedup exchange (hash rows, signatures, bands, edges, removals) aims to
    # move per GET: writers are grouped until a group's part of a partition is this big
    # (formats/sectioned.py); how bytes move, never which
    exchange_request_bytes: Bytes = Field(ByteSize(16 * 2**20), json_schema_extra=NO_BYTES)
    # most bytes one regroup task of an exchange moves: beyond it the exchange takes more,
    # smaller requests rather than one task whose disk and time grow with the corpus
    exchange_task_bytes: Bytes = Field(ByteSize(4 * 2**30), json_schema_extra=NO_BYTES)
    near: NearDedupConfig = NearDedupConfig()

    def partition_count(self, listed_bytes: int) -> int:
        if self.partitions is not None:
            return self.partitions
        return max(1, -(-int(listed_bytes) // int(self.partition_bytes)))


class TokenizeConfig(StrictModel):
    # by content (its sha256), not by path: a copy elsewhere is the same tokenizer
    tokenizer: str = Field(json_schema_extra=changes("tokens", "output", by_content=True))
    eos: str = Field("<|endoftext|>", json_schema_extra=TOKENS)
    # how many documents one encoder call takes: each document is encoded on its own
    # (run/tokenize_tasks.py), so the ids are the same whatever the batch
    batch_docs: int = Field(default=1024, ge=1, json_schema_extra=NO_BYTES)
    # auto: fastokens when it loads the tokenizer and passes the equality probe, else tokenizers.
    # The shards are the same bytes whichever engine runs (see tokens/check.py).
    engine: Literal["auto", "fastokens", "tokenizers"] = Field("auto", json_schema_extra=NO_BYTES)
    # text: special/added tokens' text inside a document is encoded as ordinary text, so the EOS
    # id occurs only where the pipeline appends it; special: such text becomes the token's id.
    special_tokens_in_text: Literal["text", "special"] = Field("text", json_schema_extra=TOKENS)
    # a token prepended to every document, e.g. "<s>"
    bos: str | None = Field(None, json_schema_extra=TOKENS)
    # how much is re-encoded by tokenizers to check the engine: not part of any output
    verify_fraction: float = Field(default=0.01, ge=0.0, le=1.0, json_schema_extra=NO_BYTES)


class PackConfig(StrictModel):
    # shards are cut from the token files at pack time
    shard_bytes: Bytes = Field(ByteSize(256 * 2**20), json_schema_extra=OUTPUT)
    # the shuffle keys are written into the token files (tokens/pack.py)
    seed: Seed = Field(0, json_schema_extra=TOKENS)
    # smallest token piece pack's two-pass exchange aims to move per GET (see tokens/pack.py)
    exchange_request_bytes: Bytes = Field(ByteSize(16 * 2**20), json_schema_extra=NO_BYTES)
    # most token bytes one pass-1 task moves (and spills to local disk): beyond it the exchange
    # takes more, smaller requests rather than one task whose disk and time grow with the corpus.
    # The default is reached past ~13 TB of tokens at 256 MiB units and shards (10 TB of text:
    # ~41 GB per task, uncapped); lower it to trade local disk for requests (plan --corpus-bytes)
    exchange_task_bytes: Bytes = Field(ByteSize(64 * 2**30), json_schema_extra=NO_BYTES)

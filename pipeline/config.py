"""Run configuration: a YAML file, validated on load, with command-line overrides.

Relative local paths inside a config file (input.uri, output.uri, tokenize.tokenizer) are resolved
against the config file's folder, so a config works from any working directory; paths given on the
command line (--input, --output, --set) are resolved against the working directory, as a shell
user expects. Any error names the key and the file and exits with code 2 before anything is written.

Credentials are never part of the config: s3fs takes them from the usual AWS environment
(variables, profile files, instance roles). Only the endpoint, region and profile *name* live here.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ByteSize, ConfigDict, Field, ValidationError

from pipeline.retention_config import PricesConfig, RetentionConfig


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (key and file named)."""

    exit_code = 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputConfig(_Strict):
    uri: str
    include: list[str] = Field(default_factory=lambda: ["**"])
    exclude: list[str] = Field(default_factory=list)
    text_field: str = "text"
    id_field: str | None = "id"


class OutputConfig(_Strict):
    uri: str


class StorageConfig(_Strict):
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


class RayConfig(_Strict):
    address: str | None = None  # None: RAY_ADDRESS if set, else a local ray.init
    num_cpus: int | None = Field(default=None, ge=1)  # only for a local ray.init


class IngestConfig(_Strict):
    unit_bytes: ByteSize = ByteSize(64 * 2**20)
    max_error_rate: float = Field(default=0.01, ge=0.0, le=1.0)


class NearDedupConfig(_Strict):
    enabled: bool = True
    ngram: int = Field(default=5, ge=1)
    num_perm: int = Field(default=256, ge=8)  # 32 bands x 8 rows: see minhash.py for why
    bands: int = Field(default=32, ge=1)
    rows: int = Field(default=8, ge=1)
    threshold: float = Field(default=0.8, gt=0.0, le=1.0)
    seed: int = 42


class DedupConfig(_Strict):
    exact: bool = True
    # Exact and near dedup run one task per hash partition. Their count follows from the listed
    # input bytes, ceil(bytes / partition_bytes), so a partition task's memory (hash rows, about
    # 1 KiB of signature per document) stays bounded whatever the corpus; `partitions` overrides.
    partitions: int | None = Field(default=None, ge=1)
    partition_bytes: ByteSize = Field(default=ByteSize(2**30), gt=0)
    near: NearDedupConfig = NearDedupConfig()

    def partition_count(self, listed_bytes: int) -> int:
        if self.partitions is not None:
            return self.partitions
        return max(1, -(-int(listed_bytes) // int(self.partition_bytes)))


class TokenizeConfig(_Strict):
    tokenizer: str
    eos: str = "<|endoftext|>"
    batch_docs: int = Field(default=1024, ge=1)


class PackConfig(_Strict):
    shard_bytes: ByteSize = ByteSize(256 * 2**20)
    seed: int = 0
    # smallest token piece pack's two-pass exchange aims to move per GET (see pack.py)
    exchange_request_bytes: ByteSize = Field(default=ByteSize(16 * 2**20), gt=0)


class Config(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    input: InputConfig
    output: OutputConfig
    storage: StorageConfig = StorageConfig()
    ray: RayConfig = RayConfig()
    ingest: IngestConfig = IngestConfig()
    dedup: DedupConfig = DedupConfig()
    tokenize: TokenizeConfig
    pack: PackConfig = PackConfig()
    retention: RetentionConfig = RetentionConfig()  # see retention_config.py
    prices: PricesConfig = PricesConfig()

    def for_listing(self, listed_bytes: int) -> Config:
        """This config with the partition count the listing implies written in: every task, the
        read key and the manifest then see one concrete count."""
        dedup = self.dedup.model_copy(
            update={"partitions": self.dedup.partition_count(listed_bytes)}
        )
        return self.model_copy(update={"dedup": dedup})

    def output_config(self) -> dict[str, Any]:
        """Everything that decides the dataset's bytes: not where data lives, not Ray, not
        retention or prices, and the tokenizer by content (see output_hash), not by path."""
        return self.model_dump(
            mode="json",
            exclude={
                "input": {"uri"},
                "output": True,
                "storage": True,
                "ray": True,
                "retention": True,
                "prices": True,
                "tokenize": {"tokenizer"},
                # how bytes move, not which: the resolved partition count stays in
                "dedup": {"partition_bytes"},
                "pack": {"exchange_request_bytes"},
            },
        )

    def output_hash(self) -> str:
        data = self.output_config()
        data["tokenize"]["tokenizer_sha256"] = _file_digest(self.tokenize.tokenizer)
        return _digest(data)

    def read_key(self) -> str:
        """Hash of what decides a unit's read output (fields, hash partitions)."""
        return _digest(
            {
                "layout": 1,
                "text_field": self.input.text_field,
                "id_field": self.input.id_field,
                "partitions": self.dedup.partitions,
            }
        )

    def token_key(self) -> str:
        """Hash of what decides a unit's token file besides its documents."""
        return _digest(
            {
                "layout": 1,
                "tokenizer": _file_digest(self.tokenize.tokenizer),
                "eos": self.tokenize.eos,
                "seed": self.pack.seed,
            }
        )


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def _resolve_local(uri: str, base: Path) -> str:
    if is_remote(uri):
        return uri
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    path = Path(os.path.expanduser(uri))
    return str(path if path.is_absolute() else (base / path).resolve())


_PATH_KEYS = (("input", "uri"), ("output", "uri"), ("tokenize", "tokenizer"))


def _resolve_paths(raw: dict, base: Path) -> None:
    for section, key in _PATH_KEYS:
        sub = raw.get(section)
        if isinstance(sub, dict) and isinstance(sub.get(key), str):
            sub[key] = _resolve_local(sub[key], base)


def _apply_override(raw: dict, dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = raw
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: key '{dotted}': '{key}' is not a section")
        node = child
    node[keys[-1]] = value


def parse_set(assignment: str) -> tuple[str, Any]:
    """Parse one `--set key.sub=value`; the value is read as a YAML scalar (1MiB, false, 3, ...)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected key.sub=value")
    key, _, text = assignment.partition("=")
    return key.strip(), yaml.safe_load(text) if text.strip() else ""


def _format_error(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        elif e["type"] == "missing":
            lines.append(f"{source}: missing required key '{key}'")
        else:
            lines.append(f"{source}: key '{key}': {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def load_config(
    path: str | os.PathLike,
    *,
    input_uri: str | None = None,
    output_uri: str | None = None,
    overrides: list[str] = (),
    check_paths: bool = True,
) -> Config:
    """Load, override, validate. Raises ConfigError naming the key and the file."""
    path = Path(path)
    source = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level")
    _resolve_paths(raw, path.parent.resolve())

    cwd_raw: dict = {}
    if input_uri is not None:
        _apply_override(cwd_raw, "input.uri", input_uri, "--input")
    if output_uri is not None:
        _apply_override(cwd_raw, "output.uri", output_uri, "--output")
    for assignment in overrides:
        key, value = parse_set(assignment)
        _apply_override(cwd_raw, key, value, f"--set {key}")
    _resolve_paths(cwd_raw, Path.cwd())
    merged = _deep_merge(raw, cwd_raw)

    try:
        config = Config.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_format_error(e, source)) from None
    if check_paths:
        _check_paths(config, source)
    return config


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _check_paths(config: Config, source: str) -> None:
    if not is_remote(config.input.uri) and not os.path.exists(config.input.uri):
        raise ConfigError(f"{source}: key 'input.uri': path does not exist: {config.input.uri}")
    tok = config.tokenize.tokenizer
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(tok)
    except Exception as e:  # any failure to read or parse is a config error for the user
        raise ConfigError(
            f"{source}: key 'tokenize.tokenizer': cannot read tokenizer file {tok}: {e}"
        ) from None
    if tokenizer.token_to_id(config.tokenize.eos) is None:
        raise ConfigError(
            f"{source}: key 'tokenize.eos': token {config.tokenize.eos!r} is not in {tok}"
        )

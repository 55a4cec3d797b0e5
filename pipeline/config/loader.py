"""Run configuration: a YAML file, validated on load, with command-line overrides.

Relative local paths inside a config file (input.uri, output.uri, tokenize.tokenizer) are resolved
against the config file's folder, so a config works from any working directory; paths given on the
command line (--input, --output, --set) are resolved against the working directory, as a shell
user expects. Any error names the key and the file and exits with code 2 before anything is written.

Credentials are never part of the config: s3fs takes them from the usual AWS environment
(variables, profile files, instance roles). Only the endpoint, region and profile *name* live here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from pipeline.cli import exit_codes
from pipeline.config import reuse_keys
from pipeline.config.sections import (
    NO_BYTES,
    READ,
    DedupConfig,
    IngestConfig,
    InputConfig,
    OutputConfig,
    PackConfig,
    RayConfig,
    RunConfig,
    SourceConfig,
    SplitConfig,
    StorageConfig,
    TokenizeConfig,
)
from pipeline.core.layout import DATASET_NAME_PATTERN
from pipeline.core.model import StrictModel
from pipeline.core.storage import is_remote
from pipeline.extract.config import EXTRACTED_FORMATS, ExtractConfig, check_engine
from pipeline.report.prices import PricesConfig
from pipeline.retention.policy import RetentionConfig


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (key and file named)."""

    exit_code = exit_codes.CONFIG_ERROR


class Config(StrictModel):
    """A run's configuration. Each key declares which stages' bytes it changes (`changes`,
    config/reuse_keys.py): a section field for all of its section, else each of its keys."""

    name: str = Field(
        pattern=f"^{DATASET_NAME_PATTERN}$",
        description="the dataset's name: its folder under output.uri",
        examples=["my-dataset"],
        json_schema_extra=READ,
    )
    # exactly one of the two (see sources)
    input: InputConfig | None = Field(
        default=None,
        description="one source, named like the dataset (the same keys as an inputs entry"
        " without name and weight); give input or inputs",
    )
    inputs: list[SourceConfig] | None = Field(
        default=None,
        description="named sources in priority order (dedup keeps the copy of the first"
        " listed); give input or inputs",
    )
    output: OutputConfig = Field(
        description="where the dataset's versions are written", json_schema_extra=NO_BYTES
    )
    storage: StorageConfig = Field(
        default=StorageConfig(),
        description="S3 options for s3:// URIs (ignored for local paths)",
        json_schema_extra=NO_BYTES,
    )
    ray: RayConfig = Field(
        default=RayConfig(), description="which Ray runs the tasks", json_schema_extra=NO_BYTES
    )
    run: RunConfig = Field(
        default=RunConfig(),
        description="guards on what a run may publish (no bytes)",
        json_schema_extra=NO_BYTES,
    )
    ingest: IngestConfig = Field(
        default=IngestConfig(), description="listing, work units and bad records"
    )
    extract: ExtractConfig = Field(
        default=ExtractConfig(),
        description="how web archives' and .html files' pages become text, in the read pass"
        " (pipeline/extract)",
    )
    dedup: DedupConfig = Field(default=DedupConfig(), description="exact and near dedup")
    tokenize: TokenizeConfig = Field(description="the tokenizer and how documents are encoded")
    pack: PackConfig = Field(default=PackConfig(), description="Megatron shards")
    split: SplitConfig = Field(default=SplitConfig(), description="the validation split")
    curate: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the curation chain of every source without its own `curate`, run in the"
        " read pass: filters and transforms in order, each {step: parameters}"
        " (docs/curate.md; `python -m pipeline curate-preview` tries it); empty: none",
        examples=[[{"language": {"languages": ["en"]}}, {"gopher_quality": {}}, {"pii": {}}]],
        json_schema_extra=READ,
    )
    retention: RetentionConfig = Field(  # see retention/policy.py
        default=RetentionConfig(),
        description="what `retain` keeps, moves to colder storage or deletes",
        json_schema_extra=NO_BYTES,
    )
    prices: PricesConfig = Field(
        default=PricesConfig(),
        description="the price table of `report` and `plan`",
        json_schema_extra=NO_BYTES,
    )
    # whether the listing holds files whose text is extracted (for_listing); before a listing,
    # none is assumed
    _extracts: bool = PrivateAttr(default=False)

    @field_validator("curate")
    @classmethod
    def _curate_chain(cls, steps: list) -> list:
        from pipeline.curate.chain import parse

        return [{n: p} for n, p in parse(steps, "chain")]

    @model_validator(mode="after")
    def _one_input_form(self) -> Config:
        if (self.input is None) == (self.inputs is None):
            raise ValueError(
                "give either 'input' (one source) or 'inputs' (a list of named sources), not"
                f" {'both' if self.input is not None else 'neither'}"
            )
        if self.inputs is not None:
            if not self.inputs:
                raise ValueError("'inputs' must name at least one source")
            names = [s.name for s in self.inputs]
            if len(set(names)) != len(names):
                dup = sorted({n for n in names if names.count(n) > 1})
                raise ValueError(f"'inputs': source names must be unique (repeated: {dup})")
        return self

    @property
    def named_sources(self) -> bool:
        """True for `inputs:` (ids prefixed with the source name, per-source shard names)."""
        return self.inputs is not None

    @property
    def sources(self) -> list[SourceConfig]:
        """The sources in priority order (dedup keeps the copy of the first listed). A single
        `input:` is one source named like the dataset, weight 1."""
        if self.inputs is not None:
            return list(self.inputs)
        return [SourceConfig(name=_source_name(self.name), **self.input.model_dump())]

    def chain_of(self, src: InputConfig) -> list[dict[str, Any]]:
        """A source's curation chain: its own `curate`, else the config's."""
        return self.curate if src.curate is None else src.curate

    def kept_fields(self, src: InputConfig) -> list[str]:
        """The fields a source's documents carry into the index: its keep_fields, then those
        its curation steps add (the language step's language and language_score)."""
        from pipeline.curate.chain import added_fields

        return list(dict.fromkeys([*src.keep_fields, *added_fields(self.chain_of(src))]))

    def content_files(self, stage: str) -> list[str]:
        """Files beyond the declared by-content keys whose content decides `stage`'s bytes:
        the curation steps' word lists, models, benchmarks and modules (reuse_keys.py)."""
        if stage not in ("read", "output"):
            return []
        from pipeline.curate.chain import files_of

        return sorted({f for src in self.sources for f in files_of(self.chain_of(src))})

    def content_versions(self, stage: str) -> dict[str, Any]:
        """The curation steps' definition versions beyond the first (Step.DEFINITION), per
        source with a chain: a definition that changed reads the units again."""
        if stage not in ("read", "output"):
            return {}
        from pipeline.curate.chain import definitions

        found = {src.name: definitions(self.chain_of(src)) for src in self.sources}
        return {name: d for name, d in found.items() if d}

    def source_rank(self, name: str | None) -> tuple[int, SourceConfig]:
        """(rank, source) of the source called `name` (None: the first)."""
        sources = self.sources
        if name is None:
            return 0, sources[0]
        for rank, src in enumerate(sources):
            if src.name == name:
                return rank, src
        raise KeyError(f"no source named {name!r} in this config")

    def for_listing(self, listed_bytes: int, formats: Iterable[str]) -> Config:
        """This config with the partition count the listing implies written in: every task, the
        read key and the manifest then see one concrete count; `formats`: the listed files'
        formats, which decide whether the `extract` section can change a byte
        (unused_sections)."""
        dedup = self.dedup.model_copy(
            update={"partitions": self.dedup.partition_count(listed_bytes)}
        )
        sized = self.model_copy(update={"dedup": dedup})
        sized._extracts = any(f in EXTRACTED_FORMATS for f in formats)
        return sized

    def unused_sections(self) -> tuple[str, ...]:
        """The sections no listed file's bytes depend on, left out of every key and of the
        manifest's `config` (reuse_keys.stage_data): `extract` when the listing holds no web
        archive or HTML file, so that a dataset of other formats keeps the keys it had before
        the section existed, and a changed extract option re-reads only where it can matter.
        A config not sized by a listing holds none: a run's keys are always taken after its
        listing (run/read_stage.py), and a layout computed from the config alone (a test, a
        tool) then names a run of other formats as the run did."""
        return () if self._extracts else ("extract",)

    def output_config(self) -> dict[str, Any]:
        """Every key declared as changing the dataset's bytes (`output`): the manifest's
        `config`. The tokenizer counts by content (output_hash), not by path."""
        return reuse_keys.output_config(self)

    def output_hash(self) -> str:
        return reuse_keys.output_hash(self)

    def read_key(self) -> str:
        """Key of the per-unit read outputs (units/<read_key>/): see stage_keys."""
        return self.stage_keys()["read"]

    def token_key(self) -> str:
        """Key of the per-unit token files (tokens/<token_key>/): see stage_keys."""
        return self.stage_keys()["tokens"]

    def stage_keys(self) -> dict[str, str]:
        """The key of each reused intermediate, from the keys declared as changing its bytes
        (reuse_keys.py)."""
        return reuse_keys.stage_keys(self)


def _resolve_local(uri: str, base: Path) -> str:
    if is_remote(uri):
        return uri
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    path = Path(os.path.expanduser(uri))
    return str(path if path.is_absolute() else (base / path).resolve())


_PATH_KEYS = (("input", "uri"), ("output", "uri"), ("tokenize", "tokenizer"))


def _source_name(dataset_name: str) -> str:
    """The one source of an `input:` config: the dataset's name, made a valid source name."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", dataset_name)[:64]


def _resolve_paths(raw: dict, base: Path) -> None:
    for section, key in _PATH_KEYS:
        sub = raw.get(section)
        if isinstance(sub, dict) and isinstance(sub.get(key), str):
            sub[key] = _resolve_local(sub[key], base)
    sources = raw.get("inputs")
    chains = [raw.get("curate"), (raw.get("input") or {}).get("curate")]
    if isinstance(sources, list):
        for sub in sources:
            if isinstance(sub, dict) and isinstance(sub.get("uri"), str):
                sub["uri"] = _resolve_local(sub["uri"], base)
            chains.append(sub.get("curate") if isinstance(sub, dict) else None)
    for chain in chains:
        _resolve_step_files(chain, base)


def _resolve_step_files(chain: Any, base: Path) -> None:
    """A curation step's file parameters (`*_file`, `benchmarks`) from the config's folder."""
    for step in chain if isinstance(chain, list) else []:
        for params in step.values() if isinstance(step, dict) else []:
            for key, value in params.items() if isinstance(params, dict) else []:
                if isinstance(value, str) and (key.endswith("_file") or key == "benchmarks"):
                    params[key] = _resolve_local(value, base)
                elif key == "benchmarks" and isinstance(value, list):
                    params[key] = [_resolve_local(v, base) if isinstance(v, str) else v
                                   for v in value]  # fmt: skip


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
    key = key.strip()
    try:
        return key, yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:  # an unclosed quote or bracket, bytes that are not UTF-8
        raise ConfigError(f"--set {key}: not a YAML value: {_yaml_problem(e)}") from None


def format_error(err: ValidationError, source: str, section: str = "") -> str:
    """pydantic's errors as one line naming the file and each key (under `section`, for a
    section validated alone)."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in (section, *e["loc"]) if p != "")
        if not key:  # a rule over several keys (Config._one_input_form)
            lines.append(f"{source}: {e['msg'].removeprefix('Value error, ')}")
        elif e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        elif e["type"] == "missing":
            lines.append(f"{source}: missing required key '{key}'")
        else:  # a rule over a section's keys (its input: the section) says what it got
            msg, got = e["msg"].removeprefix("Value error, "), e.get("input")
            lines.append(
                f"{source}: key '{key}': {msg}"
                + ("" if isinstance(got, dict) else f" (got {got!r})")
            )
    return "; ".join(lines)  # one line, however many keys are wrong


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
    raw = _read_yaml(path, source)
    _resolve_paths(raw, path.parent.resolve())

    cwd_raw: dict = {}
    if input_uri is not None:
        _override_input(raw, cwd_raw, input_uri, source)
    if output_uri is not None:
        _apply_override(cwd_raw, "output.uri", output_uri, "--output")
    for assignment in overrides:
        key, value = parse_set(assignment)
        _apply_override(cwd_raw, key, value, f"--set {key}")
    _resolve_paths(cwd_raw, Path.cwd())
    merged = _deep_merge(raw, cwd_raw)
    check_text(merged, source)

    try:
        config = Config.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(format_error(e, source)) from None
    _check_overlap(config, source)
    try:
        check_engine(config.extract)
    except ValueError as e:
        raise ConfigError(f"{source}: key 'extract.engine': {e}") from None
    if check_paths:
        _check_paths(config, source)
        _check_chains(config, source)
    return config


def _check_chains(config: Config, source: str) -> None:
    """Each curation chain's files read and decoded, its `python` functions imported (what a
    worker would refuse, refused before anything starts: curate/chain.check)."""
    from pipeline.curate.chain import check
    from pipeline.curate.user import CurationError

    chains = [("curate", config.curate)]
    if config.inputs is not None:
        chains += [(f"inputs.{i}.curate", s.curate) for i, s in enumerate(config.inputs)]
    elif config.input is not None:
        chains.append(("input.curate", config.input.curate))
    for key, chain in chains:
        if not chain:
            continue
        try:
            check(chain, key)
        except CurationError as e:
            raise ConfigError(f"{source}: key {e}") from None


def _read_yaml(path: Path, source: str) -> dict:
    """The config file's top-level mapping; ConfigError in one line when the file cannot be read,
    is not UTF-8 or not YAML (PyYAML's message spans several lines: its problem and where)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start});"
            " save the config as UTF-8"
        ) from None
    except OSError as e:
        raise ConfigError(f"{source}: cannot read the config: {e.strerror or e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level")
    return raw


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error as one line: where (line and column, from 1) and what."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = f"{problem} ({context})" if context else problem
    what = what.replace(' in "<unicode string>",', " at")  # a ReaderError's, without a mark
    return where + " ".join(what.split())


def check_text(node: Any, source: str, key: str = "") -> None:
    """Every string of the config is text the run can record (manifests, listings and logs are
    UTF-8): a value from a non-UTF-8 file name or argument (Python keeps its bytes as lone
    surrogates) is refused naming the key, where it would fail later as a traceback."""
    if isinstance(node, dict):
        for k, v in node.items():
            check_text(v, source, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_text(v, source, f"{key}.{i}")
    elif isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"{source}: key '{key}': \"{_shown(node)}\" is not valid UTF-8 (a file or folder"
                " name of other bytes?): give a name in UTF-8"
            ) from None


def _shown(text: str) -> str:
    """A string of undecodable bytes made printable: the bytes as \\x escapes."""
    try:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate not from a byte (a YAML "\\ud800" escape)
        return text.encode("utf-8", "backslashreplace").decode()


def _override_input(raw: dict, cwd_raw: dict, input_uri: str, source: str) -> None:
    """--input replaces the uri of the config's only source: `input.uri`, or `inputs[0].uri`
    when `inputs` names one source. A config of several sources is refused (exit 2): which one
    would it replace? Point a source elsewhere with the config or `--set inputs=[...]`."""
    sources = raw.get("inputs")
    if not isinstance(sources, list):
        _apply_override(cwd_raw, "input.uri", input_uri, "--input")
        return
    if len(sources) != 1 or not isinstance(sources[0], dict):
        raise ConfigError(
            f"{source}: --input: this config has {len(sources)} named sources ('inputs');"
            " --input replaces the input of a single-source config only. Give each source's"
            " uri in the config, or replace the list with --set 'inputs=[{name: ..., uri: ...}]'"
        )
    sources[0] = {**sources[0], "uri": _resolve_local(input_uri, Path.cwd())}


def _key_of(config: Config, i: int) -> str:
    return f"inputs.{i}.uri" if config.named_sources else "input.uri"


def _check_overlap(config: Config, source: str) -> None:
    """An input inside the dataset the run writes would be read back as documents. (An output
    inside the input is fine: the listing skips it as own_output, see ingest/listing.py.)"""
    for i, src in enumerate(config.sources):
        inp, out = src.uri.rstrip("/"), f"{config.output.uri.rstrip('/')}/{config.name}"
        if not is_remote(inp) and not is_remote(out):
            inp, out = os.path.realpath(inp), os.path.realpath(out)
        if inp == out or inp.startswith(out + "/"):
            raise ConfigError(
                f"{source}: key '{_key_of(config, i)}': the input {inp} is"
                f" {'' if inp == out else 'inside '}the output dataset {out}"
                " (output.uri + name), which this run writes; give an input outside it"
            )


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _check_paths(config: Config, source: str) -> None:
    for i, src in enumerate(config.sources):
        if not is_remote(src.uri) and not os.path.exists(src.uri):
            raise ConfigError(
                f"{source}: key '{_key_of(config, i)}': path does not exist: {src.uri}"
            )
        if not is_remote(src.uri) and not os.path.isdir(src.uri):
            # the listing walks a folder (ingest/listing.py); a file is read through its folder
            folder, name = os.path.split(src.uri)
            raise ConfigError(
                f"{source}: key '{_key_of(config, i)}': {src.uri} is a file, not a folder: give"
                f" its folder ({folder}) and, to read only this file, include: [{name!r}]"
            )
    tok = config.tokenize.tokenizer
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(tok)
    except Exception as e:  # any failure to read or parse is a config error for the user
        raise ConfigError(
            f"{source}: key 'tokenize.tokenizer': cannot read tokenizer file {tok}: {e}"
        ) from None
    from pipeline.tokens.encode import special_id

    for key in ("eos", "bos"):
        token = getattr(config.tokenize, key)
        if token is None:
            continue
        try:
            special_id(tokenizer, token, tok)
        except ValueError as e:
            raise ConfigError(f"{source}: key 'tokenize.{key}': {e}") from None

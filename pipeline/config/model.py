"""The run configuration's top-level model, `Config`: the sections (config/sections.py; the
retention and prices sections live with their own code) assembled with the rules across them,
and what the stages ask of a config: its sources in priority order, each source's curation chain,
the partition count a listing implies and the reuse keys (config/reuse_keys.py).
config/loader.py makes one from a YAML file and the command line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

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
from pipeline.extract.config import EXTRACTED_FORMATS, ExtractConfig
from pipeline.report.prices import PricesConfig
from pipeline.retention.policy import RetentionConfig


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


def _source_name(dataset_name: str) -> str:
    """The one source of an `input:` config: the dataset's name, made a valid source name."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", dataset_name)[:64]

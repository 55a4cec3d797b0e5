"""The `retention` section of the config (planned by retention/plan.py, applied by apply.py).

Data classes (where each lives is declared with its path in core/layout.PATHS):

    raw                   the input objects under each source's uri (input.uri, inputs[*].uri)
    read_docs             _work/units/<read_key>/<unit>.docs.parquet
    exact_hashes          _work/units/<read_key>/<unit>.hashes.bin (.p<part>.parquet before),
                          _work/runs/<run>/exact/**
    near_dedup            _work/runs/<run>/near/**, _work/units/<read_key>/<unit>.sig-*.parquet,
                          _work/units/<read_key>/<unit>.bands-*.parquet
    token_parts           _work/tokens/<token_key>/** (token files and their .parquet markers),
                          _work/runs/<run>/pack/** (pack's exchange objects)
    work_state            the rest of _work/: run inputs, units, skipped, removed, stats,
                          committed.json; unit done markers; the lease (never deleted)
    quarantine            _work/units/<read_key>/<unit>.quarantine.parquet,
                          _work/runs/<run>/quarantine.parquet
    versions              committed version folders (with manifest.json)
    uncommitted_versions  version folders without manifest.json
    reports               _audit/** (retention audit logs, storage-class ledger), _reports/**

Default policy: keep everything, except the bulky intermediates (read_docs, exact_hashes,
near_dedup, token_parts: deleted 14 days after their folder was last written, and never while a
run is writing; a later run reads the units it needs again: the read task makes a unit's
signatures, band object and token file together) and version folders left by a commit that
never finished (deleted 7 days after their last write, and only once a newer version is
committed). Raw inputs are deleted only if `retention.rules.raw` names a delete rule explicitly.
Whatever the rules say, the newest committed version, every version kept by the rules and the
lineage files their manifests name are never deleted (retention/decide.py lists all protections).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from pipeline.core.model import MAX_COUNT, MAX_DAYS, StrictModel

StorageClass = Literal["STANDARD", "STANDARD_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"]
STORAGE_CLASSES: tuple[str, ...] = get_args(StorageClass)  # warm to cold
# Classes an object can be read from without a restore request first.
INSTANT_ACCESS = frozenset({"STANDARD", "STANDARD_IA", "GLACIER_IR"})

DATA_CLASSES = (
    "raw",
    "read_docs",
    "exact_hashes",
    "near_dedup",
    "token_parts",
    "work_state",
    "quarantine",
    "versions",
    "uncommitted_versions",
    "reports",
)


def coldness(storage_class: str) -> int:
    """Rank of a storage class from warm (0) to cold; unknown classes rank as STANDARD."""
    return STORAGE_CLASSES.index(storage_class) if storage_class in STORAGE_CLASSES else 0


class Transition(StrictModel):
    after_days: float = Field(
        ge=0, le=MAX_DAYS, description="days after the object's last write", examples=[30]
    )
    storage_class: StorageClass = Field(
        description="the colder class to move to: " + ", ".join(STORAGE_CLASSES[1:]),
        examples=["STANDARD_IA"],
    )


class ClassRule(StrictModel):
    """What happens to one data class. No field set, or keep_forever, means keep forever."""

    keep_forever: bool = Field(default=False, description="never delete nor move")
    delete_after_days: float | None = Field(
        default=None,
        ge=0,
        le=MAX_DAYS,
        description="delete this many days after the last write; null: never",
    )
    keep_newest: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COUNT,
        description="versions only: keep the newest N committed versions",
    )
    transitions: list[Transition] = Field(
        default_factory=list,
        description="moves to colder storage classes, at increasing after_days",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ClassRule:
        if self.keep_forever and (self.delete_after_days is not None or self.keep_newest):
            raise ValueError("keep_forever excludes delete_after_days and keep_newest")
        days = [t.after_days for t in self.transitions]
        ranks = [coldness(t.storage_class) for t in self.transitions]
        if days != sorted(days) or any(a >= b for a, b in zip(ranks, ranks[1:], strict=False)):
            raise ValueError("transitions must go to colder classes at increasing after_days")
        if ranks and ranks[0] == 0:
            raise ValueError("a transition to STANDARD moves nothing")
        return self

    @property
    def deletes(self) -> bool:
        return self.delete_after_days is not None or self.keep_newest is not None


class RetentionRules(StrictModel):
    raw: ClassRule = Field(
        default=ClassRule(keep_forever=True),
        description="the input objects under each source's uri (deleted only by an explicit rule)",
    )
    read_docs: ClassRule = Field(
        default=ClassRule(delete_after_days=14),
        description="the documents each unit read (_work/units/<read_key>/*.docs.parquet)",
    )
    exact_hashes: ClassRule = Field(
        default=ClassRule(delete_after_days=14),
        description="exact dedup's hash rows and exchange (_work/units/*.hashes.bin,"
        " _work/runs/<run>/exact/)",
    )
    near_dedup: ClassRule = Field(
        default=ClassRule(delete_after_days=14),
        description="signatures and near dedup's exchanges (_work/runs/<run>/near/, *.sig-*)",
    )
    token_parts: ClassRule = Field(
        default=ClassRule(delete_after_days=14),
        description="per-unit token files and pack's exchange (_work/tokens/,"
        " _work/runs/<run>/pack/)",
    )
    work_state: ClassRule = Field(
        default=ClassRule(keep_forever=True),
        description="the rest of _work/: listings, markers, stats, the lease (never deleted)",
    )
    quarantine: ClassRule = Field(
        default=ClassRule(keep_forever=True),
        description="quarantined records with their reasons (*.quarantine.parquet)",
    )
    versions: ClassRule = Field(
        default=ClassRule(keep_forever=True),
        description="committed version folders; the newest is never deleted",
    )
    uncommitted_versions: ClassRule = Field(
        default=ClassRule(delete_after_days=7),
        description="version folders without manifest.json (a commit that never finished)",
    )
    reports: ClassRule = Field(
        default=ClassRule(keep_forever=True),
        description="_audit/ (retention audit logs) and _reports/",
    )

    @model_validator(mode="after")
    def _keep_newest_only_for_versions(self) -> RetentionRules:
        for name in DATA_CLASSES:
            if name != "versions" and getattr(self, name).keep_newest is not None:
                raise ValueError(f"{name}: keep_newest applies to versions only")
        return self

    def for_class(self, data_class: str) -> ClassRule:
        return getattr(self, data_class, None) or ClassRule(keep_forever=True)


class RetentionConfig(StrictModel):
    grace_days: float = Field(
        default=1.0,
        ge=0,
        le=MAX_DAYS,
        description="a run folder or uncommitted version with an object younger than this is"
        " in progress: untouched",
    )
    apply_after_run: bool = Field(
        default=False, description="apply the retention plan at the end of every `run`"
    )
    rules: RetentionRules = Field(default=RetentionRules(), description="one rule per data class")

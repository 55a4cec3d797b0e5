"""What each task returns: a small typed result that carries its own counts, never document text.

Every result has the task's wall time, storage I/O, peak memory and whether it reused earlier
output (TaskResult), and says what it adds to its stage's report: `stage_docs` (documents),
`stage_files` (input files: only the listing counts files) and `stage_bytes` (by default the
bytes it read). The driver's stage report sums those, so no
stage patches its report afterwards. Results are pickled back to the driver: keep them small.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pyarrow as pa

from pipeline.cli import exit_codes
from pipeline.core.storage import Location
from pipeline.formats.megatron import ShardInfo


class RunError(Exception):
    """The run stopped on purpose (too many bad records, broken accounting); nothing committed."""

    exit_code = exit_codes.RUN_STOPPED


@dataclass
class StageReport:
    """One row of the run's summary table: a stage's waves added up."""

    name: str
    docs: int = 0
    files: int = 0  # input files (the listing's); documents are `docs`
    bytes: int = 0
    seconds: float = 0.0
    tasks: int = 0
    reused: int = 0
    peak_rss_mb: float = 0.0
    nodes: dict[str, int] = field(default_factory=dict)  # tasks per node IP (TaskResult.node)
    # task seconds spent in named parts of the stage's work, summed over its tasks (e.g.
    # read+hash's tokenize: benchmarks tell the read pass from the tokenizer with it)
    part_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class RunResult:
    """What a run (or a takedown) committed, or found committed, and how it went."""

    version: Location
    manifest: dict[str, Any]
    stages: list[StageReport] = field(default_factory=list)
    already_committed: bool = False
    retention_actions: int | None = None
    reports: list[str] = field(default_factory=list)
    moved: dict[str, Any] = field(default_factory=dict)  # stats.json's bytes moved (accounting)
    timing: dict[str, float] = field(default_factory=dict)  # seconds per phase (run/clock.py)
    compiled_kernels: bool = False  # dedup's loops were compiled during this run (first run)


_TIMING = ("seconds", "io", "peak_rss_mb")


@dataclass(kw_only=True)
class TaskResult:
    seconds: float = 0.0
    io: dict[str, int] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    reused: bool = False
    node: str = ""  # IP address of the Ray node the task ran on ("" outside Ray)

    @property
    def stage_docs(self) -> int:
        """Documents this task adds to its stage's report (none unless a subclass says)."""
        return 0

    @property
    def stage_files(self) -> int:
        """Input files this task adds to its stage's report (none unless a subclass says)."""
        return 0

    @property
    def stage_bytes(self) -> int:
        """Bytes this task adds to its stage's report: what it read from storage."""
        return self.io.get("bytes_read", 0)

    @property
    def part_seconds(self) -> dict[str, float]:
        """Seconds of named parts of this task's work (its stage report adds them up)."""
        return {}

    def own_fields(self) -> dict[str, Any]:
        """The task's own fields (not the timing), in declaration order."""
        base = {f.name for f in fields(TaskResult)}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in base}



# -- ingest ----------------------------------------------------------------------------------
@dataclass(kw_only=True)
class ListResult(TaskResult):
    inputs: pa.Table  # the listing and its work units: small metadata tables
    units: pa.Table
    skipped: pa.Table
    files: int
    listed_bytes: int
    unit_count: int

    @property
    def stage_files(self) -> int:
        return self.files  # the listing knows files, not documents

    @property
    def stage_bytes(self) -> int:
        return self.listed_bytes


@dataclass(kw_only=True)
class ReadResult(TaskResult):
    """Also the unit's done marker (layout.read_done): `marker()` is its JSON."""

    unit: str
    origin: str = ""  # the source (config `inputs`) the unit belongs to
    docs_in: int  # records read, quarantined ones included
    docs: int  # documents kept
    removed_takedown: int = 0  # documents on the dataset's takedown list (never tokenized)
    removed_filtered: dict[str, int] = field(default_factory=dict)  # per curation rule
    curated: dict[str, int] = field(default_factory=dict)  # transform -> documents changed
    curated_spans: dict[str, int] = field(default_factory=dict)  # "pii.email" -> spans
    text_bytes: int
    hash_size: int  # bytes of its hash-row object (sectioned by partition: exchange/sections.py)
    quarantined: dict[str, int]  # records per reason
    # web archive records by kind: those that are not documents, and `documents` (web_archive.py)
    records: dict[str, int] = field(default_factory=dict)
    quarantined_bytes: int = 0  # bytes of files whose records could not be counted
    tokens: int = 0  # in the unit's token file: every document the tokenizer did not quarantine
    engine: str | None = None  # that made the token file (None: found made)
    checked: int = 0  # documents re-encoded with tokenizers to check the engine
    mismatch: str | None = None  # the engine disagreed with tokenizers: no done marker
    tokenize_seconds: float = 0.0  # of `seconds`, tokenizing (and checking) the unit's text
    curate_seconds: float = 0.0  # of `seconds`, the curation chain (building it included)
    # of `seconds`, the web archive reader's parts (ingest/web_archive.PARTS): none for others
    reader_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def stage_docs(self) -> int:
        return self.docs_in

    @property
    def part_seconds(self) -> dict[str, float]:
        if self.reused:
            return {}
        return {
            **self.reader_seconds,
            "tokenize": self.tokenize_seconds,
            "curate": self.curate_seconds,
        }

    def marker(self) -> dict[str, Any]:
        """The done.json keys: the own fields, then seconds, io and peak_rss_mb."""
        return {**self.own_fields(), **{k: getattr(self, k) for k in _TIMING}}


@dataclass(kw_only=True)
class QuarantineResult(TaskResult):
    rows: int  # rows of the listing: a file rejected whole is one row
    documents: int  # the records those rows stand for (the `records` column)

    @property
    def stage_docs(self) -> int:
        return self.documents


# -- exact dedup -----------------------------------------------------------------------------
@dataclass(kw_only=True)
class ExactResult(TaskResult):
    part: int
    rows: int
    removed: int
    size: int  # bytes of its removals' object, sectioned by unit bucket

    @property
    def stage_docs(self) -> int:
        return self.rows


@dataclass(kw_only=True)
class AuditResult(TaskResult):
    removed_exact: int
    removed_near: int
    removed_takedown: int = 0  # the takedown list's rows of the audit (rule "takedown")
    removed_filtered: dict[str, int] = field(default_factory=dict)  # per curation rule
    # source name -> {"exact": n, "near": n, <rule>: n, "in_favour_of": {other source: n}}
    by_origin: dict[str, dict] = field(default_factory=dict)

    @property
    def stage_docs(self) -> int:
        # the documents its audit lists
        return (
            self.removed_exact
            + self.removed_near
            + self.removed_takedown
            + sum(self.removed_filtered.values())
        )


# -- near dedup (run/neardup.py) ---------------------------------------------------------------
@dataclass(kw_only=True)
class BandGroupResult(TaskResult):
    """near_band_group: pass 1 of the band exchange for a group of units."""

    group: int
    bucket: int
    docs: int  # documents of the group after exact dedup
    bands: RegroupResult

    @property
    def stage_docs(self) -> int:
        return self.docs if self.bucket == 0 else 0  # every bucket's task reads the group


@dataclass(kw_only=True)
class RoutedResult(TaskResult):
    """A per-partition near step that wrote one object sectioned by partition (`size` bytes)."""

    part: int
    size: int


@dataclass(kw_only=True)
class BucketsResult(TaskResult):
    part: int
    candidates: int


@dataclass(kw_only=True)
class MembersResult(RoutedResult):
    members: int


@dataclass(kw_only=True)
class FetchResult(RoutedResult):
    units_read: int  # signature files read: units with a candidate document
    members: int


@dataclass(kw_only=True)
class KeepResult(TaskResult):
    part: int
    verified: int  # candidate edges whose estimated Jaccard reaches the threshold
    removed: int
    size: int  # bytes of its removals' object, sectioned by unit bucket


# -- tokenize --------------------------------------------------------------------------------
@dataclass(kw_only=True)
class ProbeResult(TaskResult):
    engine: str | None = None
    reason: str | None = None
    probe_docs: int = 0
    error: str | None = None  # the configured engine cannot run


@dataclass(kw_only=True)
class TokenizeResult(TaskResult):
    unit: str
    removed: str = ""  # digest of the unit's removals: names its token files
    docs: int = 0
    tokens: int = 0
    engine: str | None = None
    checked: int = 0
    quarantined: int = 0  # documents left out as special_token_text (not in `docs`)
    mismatch: str | None = None  # the engine disagreed with tokenizers: nothing committed

    @property
    def stage_docs(self) -> int:
        return self.docs


@dataclass(kw_only=True)
class SelectResult(TaskResult):
    """select_bucket's: one TokenizeResult per unit of its bucket, in unit order (`reused`:
    every unit's kept index was there)."""

    units: list[TokenizeResult]

    @property
    def stage_docs(self) -> int:
        return sum(u.docs for u in self.units)


# -- pack ------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class RegroupResult(TaskResult):
    """Pass 1 of a dedup exchange (exchange/regroup.py); its own fields are also its done marker."""

    group: int
    bucket: int
    object: str
    offsets: list[int]  # section offsets, one section per partition of the bucket

    @property
    def stage_bytes(self) -> int:
        return 0  # the exchange moves what its stage already counted


@dataclass(kw_only=True)
class ExchangeResult(TaskResult):
    """Pass 1 of pack (exchange/regroup.py); its own fields are also its done marker."""

    group: int
    bucket: int
    object: str
    sections: list[list[int]]  # per shard of the bucket: offset, token bytes, index bytes

    @property
    def stage_bytes(self) -> int:
        return 0  # pack counts the shards it writes (PackResult), not what it moves


@dataclass(kw_only=True)
class PackResult(TaskResult):
    shard: int
    bin: str
    idx: str
    info: ShardInfo  # sizes, counts and checksums of what was written

    @property
    def documents(self) -> int:
        return self.info.documents

    @property
    def tokens(self) -> int:
        return self.info.tokens

    @property
    def stage_docs(self) -> int:
        return self.info.documents

    @property
    def stage_bytes(self) -> int:
        return self.info.bin_bytes + self.info.idx_bytes

    def entry(self) -> dict[str, Any]:
        """The manifest's shard entry."""
        return {"bin": self.bin, "idx": self.idx, **asdict(self.info)}

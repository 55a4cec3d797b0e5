"""Where a dataset's files live: the on-disk layout of one dataset.

Contract: the paths of a dataset are made here (RunLayout, PathRule); each path belongs to
one retention class; an intermediate's folder is named by the key of everything that decides
its bytes (config/reuse_keys.py), so an output is reused exactly when it would be made the same.
In full: docs/formats.md, "Where a dataset's files live".
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import cached_property

from pipeline.core.storage import Location

SPLITS = ("train", "valid")  # a shard file name starts with its split (train-..., valid-...)

WORK_DIR = "_work"
MANIFEST = "manifest.json"
AUDIT_DIR = "_audit"  # retention audit logs and the storage-class ledger (retention/apply.py)
REPORTS_DIR = "_reports"  # cost reports (report/build.py)
TAKEDOWNS_DIR = "_takedowns"  # the takedown list (formats/takedowns.py)


@dataclass(frozen=True)
class PathRule:
    """One path of a dataset, relative to OUTPUT/<name>, and the retention data class of what
    lives there (retention/policy.py). `{slot}` is one path part (`{slot:04d}` a number); a
    trailing `**` is anything below (a folder whose files share the class)."""

    template: str
    data_class: str | None  # None: a folder whose files take the class of the folder above

    def at(self, **slots: object) -> str:
        return self.template.format(**slots)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.template)


def _compile(template: str) -> re.Pattern[str]:
    out, at = [], 0
    for m in re.finditer(r"\{(\w+)(:[^}]*)?\}|\*\*", template):
        out.append(re.escape(template[at : m.start()]))
        if m.group(0) == "**":
            out.append(".+")
        elif m.group(1) == "version":
            out.append(VERSION_PATTERN)
        else:
            out.append(r"\d+" if (m.group(2) or "").endswith("d") else "[^/]+")
        at = m.end()
    out.append(re.escape(template[at:]))
    return re.compile("".join(out))


# a version id (new_version_id; is_version_name): one path part (no "/", "\\" or NUL), not
# hidden, a "T", ends with a hex digit
VERSION_PATTERN = r"(?![_.])[^/\\\x00]*T[^/\\\x00]*[0-9a-f]"
# a dataset's name (Config.name; is_dataset_name): its folder under output.uri, so one path
# part that is not hidden, `.` or `..`
DATASET_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"

_RUN = f"{WORK_DIR}/runs/{{run}}"
_UNIT = f"{WORK_DIR}/units/{{read_key}}/{{unit}}"
_TOKENS = f"{WORK_DIR}/tokens/{{token_key}}/{{unit}}"

LEASE = PathRule(f"{WORK_DIR}/lease.json", "work_state")
RUN_INPUTS = PathRule(f"{_RUN}/inputs.parquet", "work_state")
RUN_UNITS = PathRule(f"{_RUN}/units.parquet", "work_state")
RUN_SKIPPED = PathRule(f"{_RUN}/skipped.parquet", "work_state")
EXACT_REMOVED = PathRule(f"{_RUN}/exact/p{{part:04d}}.removed.bin", "exact_hashes")
# a dedup exchange's objects, under its step's folder (exact/ or near/) and so of its class
DEDUP_EXCHANGE = PathRule(f"{_RUN}/{{step}}/xchg/{{name}}", None)
EXACT_DIR = PathRule(f"{_RUN}/exact/**", "exact_hashes")
NEAR_DIR = PathRule(f"{_RUN}/near", "near_dedup")
NEAR_REQUESTS = PathRule(f"{_RUN}/near/req/q{{part:04d}}.bin", "near_dedup")
NEAR_CANDS = PathRule(f"{_RUN}/near/cand/b{{part:04d}}.bin", "near_dedup")
NEAR_REMOVED = PathRule(f"{_RUN}/near/removed/l{{part:04d}}.bin", "near_dedup")
NEAR_FILES = PathRule(f"{_RUN}/near/**", "near_dedup")
PACK_EXCHANGE = PathRule(f"{_RUN}/pack/{{plan}}", "token_parts")  # pack's exchange objects
SHARD_DOCS = PathRule(f"{_RUN}/pack/docs/{{shard}}.parquet", "token_parts")
PACK_FILES = PathRule(f"{_RUN}/pack/**", "token_parts")
RUN_REMOVED = PathRule(f"{_RUN}/removed.parquet", "work_state")
RUN_QUARANTINE = PathRule(f"{_RUN}/quarantine.parquet", "quarantine")
RUN_STATS = PathRule(f"{_RUN}/stats.json", "work_state")
RUN_COMMITTED = PathRule(f"{_RUN}/committed.json", "work_state")
RUN_FILES = PathRule(f"{_RUN}/**", "work_state")
READ_DOCS = PathRule(f"{_UNIT}.docs.parquet", "read_docs")
READ_QUARANTINE = PathRule(f"{_UNIT}.quarantine.parquet", "quarantine")
EXACT_HASHES = PathRule(f"{_UNIT}.hashes.bin", "exact_hashes")
EXACT_HASH_PARTS = PathRule(f"{_UNIT}.p{{part:d}}.parquet", "exact_hashes")  # before layout 3
READ_SIGS = PathRule(f"{_UNIT}.sig-{{signature_key}}.parquet", "near_dedup")
READ_BANDS = PathRule(f"{_UNIT}.bands-{{band_key}}.bin", "near_dedup")  # run/near_signing.py
# a done unit without them is read again (read_tasks._outputs_present); markers stay
READ_SIGS_ANY = PathRule(f"{_UNIT}.sig-{{rest}}", "near_dedup")
READ_DONE = PathRule(f"{_UNIT}.done.json", "work_state")
READ_REMOVED = PathRule(f"{_UNIT}.removed.parquet", "work_state")  # audit rows: kept
UNIT_FILES = PathRule(f"{WORK_DIR}/units/{{read_key}}/**", "work_state")
TOKENS_BIN = PathRule(f"{_TOKENS}.bin", "token_parts")
TOKENS_ALL = PathRule(f"{_TOKENS}.parquet", "token_parts")  # marks its .bin complete
TOKENS_QUARANTINE = PathRule(f"{_TOKENS}.quarantine.parquet", "token_parts")
TOKENS_INDEX = PathRule(f"{_TOKENS}-{{removed}}.parquet", "token_parts")  # the kept documents
TOKEN_FILES = PathRule(f"{WORK_DIR}/tokens/{{token_key}}/**", "token_parts")
WORK_FILES = PathRule(f"{WORK_DIR}/**", "work_state")  # anything else under _work/
AUDIT_FILES = PathRule(f"{AUDIT_DIR}/**", "reports")
TAKEDOWN_ENTRY = PathRule(f"{TAKEDOWNS_DIR}/{{entry}}.json", "reports")  # retention keeps it
TAKEDOWN_FILES = PathRule(f"{TAKEDOWNS_DIR}/**", "reports")
REPORT_FILES = PathRule(f"{REPORTS_DIR}/**", "reports")
VERSION_FILES = PathRule("{version}/**", "versions")  # committed or not: retention tells

# Every path, most specific first: the first rule a key matches gives its data class. (Folder
# rules, DEDUP_EXCHANGE, NEAR_DIR and PACK_EXCHANGE, name folders: their files match the
# `**` rule of the folder above.)
PATHS: tuple[PathRule, ...] = (
    LEASE,
    RUN_INPUTS,
    RUN_UNITS,
    RUN_SKIPPED,
    EXACT_REMOVED,
    EXACT_DIR,
    NEAR_REQUESTS,
    NEAR_CANDS,
    NEAR_REMOVED,
    NEAR_FILES,
    SHARD_DOCS,
    PACK_FILES,
    RUN_REMOVED,
    RUN_QUARANTINE,
    RUN_STATS,
    RUN_COMMITTED,
    RUN_FILES,
    READ_DOCS,
    READ_QUARANTINE,
    EXACT_HASHES,
    EXACT_HASH_PARTS,
    READ_SIGS,
    READ_BANDS,
    READ_SIGS_ANY,
    READ_DONE,
    READ_REMOVED,
    UNIT_FILES,
    TOKENS_BIN,
    TOKENS_ALL,
    TOKENS_INDEX,
    TOKENS_QUARANTINE,
    TOKEN_FILES,
    WORK_FILES,
    AUDIT_FILES,
    TAKEDOWN_ENTRY,
    TAKEDOWN_FILES,
    REPORT_FILES,
    VERSION_FILES,
)


def is_path(rule: PathRule, key: str) -> bool:
    """Whether `key` (relative to OUTPUT/<name>) is a path of `rule`."""
    return rule.pattern.fullmatch(key) is not None


def data_class(key: str) -> str:
    """The retention data class of the object at `key` (relative to OUTPUT/<name>, '/'
    separated): the class of the first rule of PATHS it matches; "other" for none."""
    for rule in PATHS:
        if rule.pattern.fullmatch(key):
            return rule.data_class
    return "other"


def utc_stamp(now: dt.datetime | None = None) -> str:
    """UTC time as it appears in version ids, reports and audit logs: sorts as it happened."""
    return (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%S.%fZ")


def new_version_id(run_id: str, now: dt.datetime | None = None) -> str:
    return f"{utc_stamp(now)}-{run_id[:8]}"


@dataclass(frozen=True)
class RunLayout:
    dataset: Location  # OUTPUT/<name>
    run_id: str
    read_key: str
    token_key: str

    @classmethod
    def for_config(cls, cfg, run_id: str, read_key: str | None = None) -> RunLayout:
        """The layout of run `run_id` of the dataset a Config (pipeline.config.model) writes
        (`read_key`: the config's unless given: a run under a takedown list)."""
        dataset = Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name
        return cls(dataset, run_id, read_key or cfg.read_key(), cfg.token_key())

    def _at(self, rule: PathRule, **slots: object) -> Location:
        keys = {"run": self.run_id, "read_key": self.read_key, "token_key": self.token_key}
        return self.dataset / rule.at(**keys, **slots)

    @property
    def work(self) -> Location:
        return self.dataset / WORK_DIR

    @property
    def lease(self) -> Location:
        return self._at(LEASE)

    @property
    def run(self) -> Location:
        return self.work / "runs" / self.run_id

    @property
    def inputs(self) -> Location:
        return self._at(RUN_INPUTS)

    @property
    def units(self) -> Location:
        return self._at(RUN_UNITS)

    @property
    def skipped(self) -> Location:
        return self._at(RUN_SKIPPED)

    def exact_removed(self, part: int) -> Location:
        return self._at(EXACT_REMOVED, part=part)

    def exchange(self, step: str, name: str) -> Location:
        """Folder of one dedup exchange's regrouped objects (exchange/regroup.py), under its step's
        folder (exact/ or near/), so that retention classes them with it."""
        return self._at(DEDUP_EXCHANGE, step=step, name=name)

    def pack_exchange(self, plan: str) -> Location:
        """Folder of pack's exchange objects under plan `plan` (run/pack_tasks.py)."""
        return self._at(PACK_EXCHANGE, plan=plan)

    @property
    def near(self) -> Location:
        return self._at(NEAR_DIR)

    # near-dedup intermediates (formats: run/neardup.py); one sectioned object per writer
    def near_requests(self, q: int) -> Location:
        return self._at(NEAR_REQUESTS, part=q)

    def near_cands(self, bucket: int) -> Location:
        return self._at(NEAR_CANDS, part=bucket)

    def near_removed(self, label_part: int) -> Location:
        return self._at(NEAR_REMOVED, part=label_part)

    def shard_docs(self, shard_name: str) -> Location:
        return self._at(SHARD_DOCS, shard=shard_name)

    @property
    def removed(self) -> Location:
        return self._at(RUN_REMOVED)

    @property
    def quarantine(self) -> Location:
        return self._at(RUN_QUARANTINE)

    @property
    def stats(self) -> Location:
        return self._at(RUN_STATS)

    @property
    def committed(self) -> Location:
        return self._at(RUN_COMMITTED)

    def read_docs(self, unit: str) -> Location:
        return self._at(READ_DOCS, unit=unit)

    def read_quarantine(self, unit: str) -> Location:
        return self._at(READ_QUARANTINE, unit=unit)

    def read_sigs(self, unit: str, signature_key: str) -> Location:
        return self._at(READ_SIGS, unit=unit, signature_key=signature_key)

    def read_bands(self, unit: str, band_key: str) -> Location:
        return self._at(READ_BANDS, unit=unit, band_key=band_key)

    def read_removed(self, unit: str) -> Location:
        return self._at(READ_REMOVED, unit=unit)

    def read_done(self, unit: str) -> Location:
        return self._at(READ_DONE, unit=unit)

    def exact_hashes(self, unit: str) -> Location:
        return self._at(EXACT_HASHES, unit=unit)

    def tokens_bin(self, unit: str) -> Location:
        return self._at(TOKENS_BIN, unit=unit)

    def tokens_all(self, unit: str) -> Location:
        """The index of every document in the unit's .bin (written last: marks it complete)."""
        return self._at(TOKENS_ALL, unit=unit)

    def tokens_quarantine(self, unit: str) -> Location:
        return self._at(TOKENS_QUARANTINE, unit=unit)

    def tokens_index(self, unit: str, removed: str) -> Location:
        """The index of the documents dedup kept (`removed`: the digest of its removals)."""
        return self._at(TOKENS_INDEX, unit=unit, removed=removed)

    @property
    def tokens(self) -> Location:
        """The token files' folder (shared by every run with this token key)."""
        return self.work / f"tokens/{self.token_key}"

    @property
    def removed_ids(self) -> Location:
        """A takedown's run folder: every id removed since the run (run/takedown.py)."""
        return self.run / "removed_ids.parquet"

    def version(self, version_id: str) -> Location:
        return self.dataset / version_id


def takedowns(dataset: Location) -> Location:
    """The dataset's takedown list folder (formats/takedowns.py)."""
    return dataset / TAKEDOWNS_DIR


def takedown_entry(dataset: Location, entry: str) -> Location:
    return dataset / TAKEDOWN_ENTRY.at(entry=entry)


def is_version_name(name: str) -> bool:
    return re.fullmatch(VERSION_PATTERN, name) is not None


def is_dataset_name(name: str) -> bool:
    return re.fullmatch(DATASET_NAME_PATTERN, name) is not None

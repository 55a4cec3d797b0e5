"""Where a dataset's files live. The on-disk layout of one dataset, documented once:

    OUTPUT/<name>/
      <version>/                      a committed dataset version (exists only with manifest.json)
        manifest.json                 written last, atomically (see manifest.py)
        shard-00000.bin / .idx        Megatron MMIDIDX shards (see megatron.py)
      _work/<run_id>/                 work state of one run (intermediates; never read by trainers)
        inputs.parquet                input manifest: the listing (see ingest.py)
        units.parquet                 work units balanced by bytes (see ingest.py)
        read/<unit>.docs.parquet      documents read from a unit: doc_id, source, row, text
        read/<unit>.quarantine.parquet  bad records of the unit: source, row, reason, detail
        read/<unit>.done.json         completion marker + the unit's counts (written last)
        exact/p<part>/<unit>.parquet  content hashes of the unit's documents, partitioned by hash
        exact/p<part>.removed.parquet exact-duplicate removals decided for one hash partition
        near/...                      near-dedup intermediates (see neardup stages)
        removed.parquet               every removal (exact and near): the audit
        quarantine.parquet            every quarantined record of the run
        tokens/<unit>.bin / .parquet  the unit's kept documents tokenized, ordered by shuffle key
        lease.json                    (cluster path) who is running this dataset

A run id is derived from the hash of the output-determining config and the input manifest, so
rerunning the same command finds the same work state. Version ids are UTC timestamps (sortable
as strings) plus the run id, so `sorted()` is "by time".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pipeline.storage import Location

WORK_DIR = "_work"
MANIFEST = "manifest.json"


def new_version_id(run_id: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{run_id[:8]}"


@dataclass(frozen=True)
class RunLayout:
    dataset: Location  # OUTPUT/<name>
    run_id: str

    @property
    def work(self) -> Location:
        return self.dataset / WORK_DIR / self.run_id

    @property
    def inputs(self) -> Location:
        return self.work / "inputs.parquet"

    @property
    def units(self) -> Location:
        return self.work / "units.parquet"

    def read_docs(self, unit: str) -> Location:
        return self.work / f"read/{unit}.docs.parquet"

    def read_quarantine(self, unit: str) -> Location:
        return self.work / f"read/{unit}.quarantine.parquet"

    def read_done(self, unit: str) -> Location:
        return self.work / f"read/{unit}.done.json"

    def exact_part(self, part: int, unit: str) -> Location:
        return self.work / f"exact/p{part:04d}/{unit}.parquet"

    def exact_part_dir(self, part: int) -> Location:
        return self.work / f"exact/p{part:04d}"

    def exact_removed(self, part: int) -> Location:
        return self.work / f"exact/p{part:04d}.removed.parquet"

    @property
    def near(self) -> Location:
        return self.work / "near"

    @property
    def removed(self) -> Location:
        return self.work / "removed.parquet"

    @property
    def quarantine(self) -> Location:
        return self.work / "quarantine.parquet"

    def tokens_bin(self, unit: str) -> Location:
        return self.work / f"tokens/{unit}.bin"

    def tokens_index(self, unit: str) -> Location:
        return self.work / f"tokens/{unit}.parquet"

    def version(self, version_id: str) -> Location:
        return self.dataset / version_id


def is_version_name(name: str) -> bool:
    return not name.startswith(("_", ".")) and "T" in name and name.endswith(tuple("0123456789abcdef"))

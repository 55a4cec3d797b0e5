"""Where a dataset's files live. The on-disk layout of one dataset, documented once:

    OUTPUT/<name>/
      <version>/                        a committed dataset version (exists only with manifest.json)
        manifest.json                   written last, atomically (see formats/manifest.py)
        shard-00000.bin / .idx          Megatron MMIDIDX shards (see formats/megatron.py)
      _work/                            work state (intermediates; never read by trainers)
        lease.json                      who is writing this dataset now (see core/lease.py)
        runs/<run_id>/                  one run: what it read and decided
          inputs.parquet                input manifest: the listing (see ingest/listing.py)
          units.parquet                 work units balanced by bytes (see ingest/listing.py)
          skipped.parquet               listed files not read, with the reason (ingest/listing.py)
          exact/p<part>.removed.bin     exact removals of one hash partition, sectioned by unit
                                        bucket (formats/sectioned.py)
          exact/removed.parquet         all exact removals, sorted by unit (near dedup skips them)
          near/...                      near-dedup intermediates of the run (see run/neardup.py)
          exact|near/xchg/<name>/<plan>/g<g>-k<k>.bin/.json  a dedup exchange's regrouped
                                        objects (formats/sectioned.py, run/exchange.py)
          removed.parquet               every removal (exact and near): the audit (dedup/exact.py)
          quarantine.parquet            every quarantined record of the run (+ origin: named
                                        sources; run/tasks.py merge_quarantine)
          stats.json                    per-stage counts, bytes and requests (cost report)
          committed.json                {"version": id} once the run's version is committed
          removed_ids.parquet           a takedown's folder (`remove`, run/takedown.py; its id
                                        hashes the parent version and the ids): every doc_id
                                        removed since the run; + its own pack/, stats.json
          pack/<plan>/g<g>-k<k>.bin/.json pack's exchange objects (see tokens/pack.py)
          pack/docs/<shard>.parquet     the documents of each shard the run wrote, in shard order:
                                        doc_id, source, row, length (tokens) (tokens/pack.py);
                                        which split and source each document went to
        units/<read_key>/               per-unit outputs, shared by runs (incremental ingest)
          <unit>.docs.parquet           documents read: doc_id, source, row, text
          <unit>.quarantine.parquet     bad records: source, row, reason, detail
          <unit>.hashes.bin             content hashes, sectioned by hash partition (dedup/exact.py)
          <unit>.sig-<key>.parquet      MinHash signatures of the unit's documents and
          <unit>.bands-<key>.bin        their LSH band hashes, by partition (run/near_signing.py)
          <unit>.done.json              completion marker + the unit's counts (written last)
        tokens/<token_key>/             per-unit token files (see tokens/pack.py)
          <unit>-<removed>.bin/.parquet the unit's kept documents in shuffle order
          <unit>-<removed>.quarantine.parquet  documents tokenize quarantined
                                        (special_token_text; ingest/records.py schema)

A run id hashes the output-determining config and the input manifest, so rerunning the same
command finds the same run folder (resume; "already committed"). A unit id hashes its pieces
(path, byte range, size, ETag or mtime), `read_key` the config that decides how a unit is read,
`token_key` the read key, the tokenizer (by content) and its options and the seed, and
`<removed>` the unit's set of removed documents: an output is reused exactly when everything that
decides its bytes is unchanged. Both keys come from one function, Config.stage_keys (reuse_keys.py),
which hashes every config key except those listed as not affecting a stage's bytes. Version ids are
UTC timestamps plus the run id, so `sorted()` is "by time".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pipeline.core.storage import Location

WORK_DIR = "_work"
MANIFEST = "manifest.json"


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
    def for_config(cls, cfg, run_id: str) -> RunLayout:
        """The layout of run `run_id` of the dataset a Config (pipeline.config) writes."""
        dataset = Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name
        return cls(dataset, run_id, cfg.read_key(), cfg.token_key())

    @property
    def work(self) -> Location:
        return self.dataset / WORK_DIR

    @property
    def lease(self) -> Location:
        return self.work / "lease.json"

    @property
    def run(self) -> Location:
        return self.work / "runs" / self.run_id

    @property
    def inputs(self) -> Location:
        return self.run / "inputs.parquet"

    @property
    def units(self) -> Location:
        return self.run / "units.parquet"

    @property
    def skipped(self) -> Location:
        return self.run / "skipped.parquet"

    def exact_removed(self, part: int) -> Location:
        return self.run / f"exact/p{part:04d}.removed.bin"

    def exchange(self, step: str, name: str) -> Location:
        """Folder of one dedup exchange's regrouped objects (run/exchange.py), under its step's
        folder (exact/ or near/), so that retention classes them with it."""
        return self.run / f"{step}/xchg/{name}"

    @property
    def exact_removed_all(self) -> Location:
        return self.run / "exact/removed.parquet"

    @property
    def near(self) -> Location:
        return self.run / "near"

    # near-dedup intermediates (formats: run/neardup.py); one sectioned object per writer
    def near_requests(self, q: int) -> Location:
        return self.near / f"req/q{q:04d}.bin"

    def near_cands(self, bucket: int) -> Location:
        return self.near / f"cand/b{bucket:04d}.bin"

    def near_removed(self, label_part: int) -> Location:
        return self.near / f"removed/l{label_part:04d}.bin"

    def shard_docs(self, shard_name: str) -> Location:
        return self.run / f"pack/docs/{shard_name}.parquet"

    @property
    def removed(self) -> Location:
        return self.run / "removed.parquet"

    @property
    def quarantine(self) -> Location:
        return self.run / "quarantine.parquet"

    @property
    def stats(self) -> Location:
        return self.run / "stats.json"

    @property
    def committed(self) -> Location:
        return self.run / "committed.json"

    def _unit(self, unit: str, suffix: str) -> Location:
        return self.work / f"units/{self.read_key}/{unit}.{suffix}"

    def read_docs(self, unit: str) -> Location:
        return self._unit(unit, "docs.parquet")

    def read_quarantine(self, unit: str) -> Location:
        return self._unit(unit, "quarantine.parquet")

    def read_sigs(self, unit: str, signature_key: str) -> Location:
        return self._unit(unit, f"sig-{signature_key}.parquet")

    def read_bands(self, unit: str, band_key: str) -> Location:
        return self._unit(unit, f"bands-{band_key}.bin")

    def read_done(self, unit: str) -> Location:
        return self._unit(unit, "done.json")

    def exact_hashes(self, unit: str) -> Location:
        return self._unit(unit, "hashes.bin")

    def tokens_bin(self, unit: str, removed: str) -> Location:
        return self.work / f"tokens/{self.token_key}/{unit}-{removed}.bin"

    def tokens_index(self, unit: str, removed: str) -> Location:
        return self.work / f"tokens/{self.token_key}/{unit}-{removed}.parquet"

    def tokens_quarantine(self, unit: str, removed: str) -> Location:
        return self.work / f"tokens/{self.token_key}/{unit}-{removed}.quarantine.parquet"

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


def is_version_name(name: str) -> bool:
    return (
        not name.startswith(("_", ".")) and "T" in name and name.endswith(tuple("0123456789abcdef"))
    )

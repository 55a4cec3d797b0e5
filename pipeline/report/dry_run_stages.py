"""Each stage of the dry run at a corpus's cut: its tasks, requests, bytes and memory per task.

Contract: a stage's formula counts the objects, requests and bytes a run makes at the cut's
sizes with the pipeline's own plans (exchange/plan.py, dedup/band_rows.py's size model, the
pack's cut), so that the plan says what a run would do; report/dry_run.py cuts the corpus and
prices the stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipeline.dedup import band_rows
from pipeline.exchange.plan import direct, exchange_plan, one_pass_writers
from pipeline.report.dry_run_assumptions import (
    CANDIDATE_DOCS_PER_DOC,
    DOC_ROW_BYTES,
    HASH_ROW_BYTES,
    KEY_BYTES,
    REMOVED_PER_DOC,
    REMOVED_ROW_BYTES,
    REQUEST_ROW_BYTES,
    S3FS_BLOCK,
    TOKEN_STORED_RATIO,
    WORKER_BASE_MB,
    MiB,
)
from pipeline.tokens.framed import FRAME_BYTES
from pipeline.tokens.pack import INDEX_ROW_BYTES


@dataclass
class StagePlan:
    name: str
    tasks: int
    requests: dict[str, int] = field(default_factory=dict)
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    peak_mb: float = 0.0  # per task
    core_hours: float = 0.0
    dollars: float = 0.0


def puts(size: float) -> int:
    """PUT requests of one object written through s3fs: one PUT, or a multipart upload."""
    return 1 if size <= S3FS_BLOCK else 2 + math.ceil(size / S3FS_BLOCK)


def gets(size: float) -> int:
    """GET requests of one object read through a buffered s3fs file."""
    return max(1, math.ceil(size / S3FS_BLOCK))


@dataclass(frozen=True)
class Cut:
    """The counts and per-unit sizes every stage's formula uses."""

    corpus_bytes: int
    docs: int
    m: int  # units
    pieces: int  # (file, byte range) pieces of all units
    p: int  # dedup partitions
    s: int  # shards
    k: int  # pack key buckets
    g: int  # pack unit groups
    one_pass: bool  # pack's shard tasks read the token files (tokens/pack.py)
    token_bytes: int
    shard_bytes: int
    sig_doc: int  # bytes of one document's signature row
    cand_doc: int  # bytes of one candidate's row in the fetch exchange
    bands: int
    request_bytes: int  # dedup.exchange_request_bytes
    task_bytes: int  # dedup.exchange_task_bytes
    small_gets: int  # dedup.exchange_small_gets
    stored_ratio: float = TOKEN_STORED_RATIO  # the token files' stored / raw bytes

    @property
    def per_unit(self) -> float:
        return self.corpus_bytes / self.m

    @property
    def docs_pq(self) -> float:  # one unit's documents file: ids and rows, no text
        return self.docs / self.m * DOC_ROW_BYTES

    @property
    def index_bytes(self) -> float:  # every document's token index row
        return self.docs * INDEX_ROW_BYTES

    @property
    def band_doc(self) -> float:
        return band_object_doc_bytes(self.docs / self.m, self.bands, self.p)

    def pass_1_band_rows(self, groups: int) -> float:
        """One document's band rows in the band exchange's pass-1 objects (G unit groups, a
        document named by unit and position)."""
        rows = self.docs * self.bands / (self.p * groups)
        return band_row_bytes(self.bands, self.p, rows, self.docs / groups)

    @property
    def hash_bytes(self) -> int:
        return self.docs * HASH_ROW_BYTES


def band_object_doc_bytes(unit_docs: float, bands: int, partitions: int) -> float:
    """One document's share of its unit's band object (run/near_signing.write_band_object):
    its band rows (named by position) in sections of one unit's rows each, its key in the keys
    section, the index (P + 2 offsets)."""
    rows = band_row_bytes(bands, partitions, unit_docs * bands / partitions, unit_docs)
    return rows + KEY_BYTES + 8 * (partitions + 2) / unit_docs


def band_row_bytes(bands: int, partitions: int, section_rows: float, ids: float) -> float:
    """One document's band rows where a section holds `section_rows` rows (of one partition)
    naming documents by `ids` possible ids, as dedup/band_rows.py stores them (its size model,
    band_rows.section_bytes)."""
    per_row = band_rows.section_bytes(section_rows, partitions, bands, ids)
    return bands * per_row / max(section_rows, 1e-9)


def read_stage(c: Cut) -> StagePlan:
    """The pieces in; the token file (every document, before dedup), its index and quarantine
    list, the documents file (no text), quarantine, one sectioned hash object, signatures and
    their band hashes, a marker out."""
    unit_docs, stored = c.docs / c.m, c.token_bytes * c.stored_ratio
    return StagePlan(
        "read+hash",
        c.m,
        {
            "get": c.pieces * gets(c.per_unit / max(1, c.pieces / c.m)),
            "put": c.m
            * (
                puts(stored / c.m)
                + puts(c.index_bytes / c.m)
                + puts(c.docs_pq)
                + puts(unit_docs * c.sig_doc)
                + puts(unit_docs * c.band_doc)
                + puts(c.hash_bytes / c.m)
                + 3
            ),
            "head": 2 * c.m,
        },
        c.corpus_bytes,
        stored
        + c.index_bytes
        + c.m * (c.docs_pq + unit_docs * (c.sig_doc + c.band_doc + HASH_ROW_BYTES)),
        WORKER_BASE_MB + (3 * c.per_unit + c.token_bytes / c.m) / MiB,
    )


@dataclass
class _Exchange:
    """One dedup exchange's pass 1 (regroup) and its readers' GETs (exchange/sections.py)."""

    tasks: int
    gets: int
    puts: int
    heads: int
    peak_mb: float
    copies: int = 2  # the rows are written twice (writer, pass 1) and read twice (pass 1, reader)
    groups: int = 1  # ranges each part's reader GETs


def _exchange(c: Cut, writers: int, parts: int, size: float, reads: int = 1) -> _Exchange:
    if direct(parts, writers, int(size), c.request_bytes, reads, c.small_gets):  # no pass 1
        return _Exchange(0, writers + reads * writers * parts, 0, 0, 0, 1, writers)
    plan = exchange_plan(
        parts, writers, int(size), c.request_bytes, c.task_bytes, reads, c.p, c.small_gets
    )
    gk = plan.groups * plan.buckets
    return _Exchange(
        gk,
        writers * plan.buckets * (2 if plan.buckets > 1 else 1) + reads * plan.groups * parts,
        gk * (puts(size / gk) + 1),
        gk,
        WORKER_BASE_MB + 3 * size / (parts * plan.groups) / MiB,
        2,
        plan.groups,
    )


def _plus(stage: StagePlan, *exchanges: _Exchange) -> StagePlan:
    for x in exchanges:
        stage.tasks += x.tasks
        for kind in ("gets", "puts", "heads"):
            key = kind[:-1]
            stage.requests[key] = stage.requests.get(key, 0) + getattr(x, kind)
        stage.peak_mb = max(stage.peak_mb, x.peak_mb)
    return stage


def _removed_buckets(c: Cut) -> int:
    return max(1, min(c.p, c.m))  # sections.unit_bounds(units, partitions)


def exact_stage(c: Cut) -> StagePlan:
    """Hash exchange, P partition tasks (one removal object each), and the removals' exchange by
    unit bucket (near dedup, the audit and select read it bucket by bucket)."""
    p, nb = c.p, _removed_buckets(c)
    removed = c.docs * REMOVED_PER_DOC * REMOVED_ROW_BYTES
    hashes = _exchange(c, c.m, p, c.hash_bytes)
    stage = StagePlan(
        "exact",
        p,
        {"get": 0, "put": p, "head": 0},
        hashes.copies * c.hash_bytes,  # the read pass wrote them once
        (hashes.copies - 1) * c.hash_bytes,
        WORKER_BASE_MB + 3 * max(c.hash_bytes / p, removed / nb) / MiB,
    )
    return _plus(stage, hashes, _exchange(c, p, nb, removed))


def near_stage(c: Cut) -> StagePlan:
    """G x K band tasks (each unit's band object read once, a range per bucket, and its keys
    section by every bucket's task; the exact removals' ranges of the unit buckets that hold its
    group's units, once per task: exact_removal_spans; the band exchange's pass-1 objects out:
    rows written once, read once); P bucket tasks
    (candidate edges stay in Ray's object store, as do the component rounds'); P member tasks
    (requests by unit bucket); F fetch tasks (runs of unit buckets, as few as make the
    candidates' exchange one pass: plan.one_pass_writers; else one per bucket) reading each
    unit's signature file once (every unit assumed to hold a candidate), each one object out;
    the candidates' exchange by label; P keep tasks; the
    removals' exchange (run/neardup.py); each of those three in one pass where plan.direct says.
    Signatures are 8-bit (minhash.STORED_BITS), band rows as dedup/band_rows.py stores them
    (band_row_bytes), a document named by unit and position (no directory)."""
    m, p, docs, nb = c.m, c.p, c.docs, _removed_buckets(c)
    band_objects, sigs = docs * c.band_doc, docs * c.sig_doc
    cut_bytes = band_rows.exchange_bytes(docs, c.bands, m, p)  # as run/dedup_stage cuts it
    plan = exchange_plan(
        p, m, cut_bytes, c.request_bytes, c.task_bytes, min_tasks=p, small_gets=c.small_gets
    )
    bands = docs * c.pass_1_band_rows(plan.groups)
    keys_again = docs * KEY_BYTES * (plan.buckets - 1)  # every bucket's task reads the keys
    gk, k = plan.groups * plan.buckets, plan.buckets
    candidates = docs * CANDIDATE_DOCS_PER_DOC
    requests, cands = candidates * REQUEST_ROW_BYTES, candidates * c.cand_doc
    removed = docs * REMOVED_PER_DOC * REMOVED_ROW_BYTES
    fetchers = fetch_tasks(c)
    exact = _exchange(c, p, nb, removed)  # the exact removals' exchange (exact_stage)
    spans = sum(exact_removal_spans(m, nb, plan.groups))
    exact_gets, exact_bytes = k * spans * exact.groups, k * removed * spans / nb
    exchanges = [
        (_exchange(c, p, nb, requests), requests),
        (_exchange(c, fetchers, p, cands), cands),
        (_exchange(c, p, nb, removed), removed),
    ]
    # written twice, read twice; in one pass (plan.direct) once each (exchange/sections.py)
    regrouped = sum(x.copies * size for x, size in exchanges)
    per_unit = 3 if k > 1 else 1  # its band object's index, range and keys
    stage = StagePlan(
        "near",
        gk + 3 * p + fetchers,
        {
            "get": m * k * per_unit + exact_gets + p * plan.groups + m * gets(sigs / m),
            "put": gk * (puts(bands / gk) + 1) + 2 * p + fetchers,
            "head": m * k + gk + m,
        },
        band_objects + keys_again + exact_bytes + bands + sigs + regrouped,
        bands + regrouped,
        WORKER_BASE_MB + 3 * max(bands / p, cands / p, sigs / m, removed / nb) / MiB,
    )
    return _plus(stage, *(x for x, _ in exchanges))


def exact_removal_spans(units: int, buckets: int, groups: int) -> list[int]:
    """For each of `groups` unit groups (ExchangePlan.unit_groups of the sorted units), how many
    of the unit buckets (sections.unit_bounds of `buckets`) hold its units: the buckets of exact
    removals each of its near_band_group tasks reads (dedup_stage.group_removals). They sum to
    at most buckets + groups - 1: linear in the corpus."""
    n = max(1, min(buckets, units))

    def bucket_of(i: int) -> int:  # the last b with b * units // n <= i
        return ((i + 1) * n - 1) // units

    cuts = [(g * units // groups, (g + 1) * units // groups) for g in range(groups)]
    return [bucket_of(hi - 1) - bucket_of(lo) + 1 if hi > lo else 0 for lo, hi in cuts]


def fetch_tasks(c: Cut) -> int:
    """Near dedup's fetch tasks, cut as the run cuts them (run/dedup_stage.fetch_runs)."""
    cands = c.docs * CANDIDATE_DOCS_PER_DOC * c.cand_doc
    buckets = _removed_buckets(c)
    return one_pass_writers(buckets, c.p, int(cands), c.request_bytes, c.task_bytes, c.small_gets)


def audit_stage(c: Cut) -> StagePlan:
    """removed.parquet written one unit bucket at a time: one range per group per bucket of
    the exact and the near removals' exchanges."""
    nb = _removed_buckets(c)
    removed = c.docs * REMOVED_PER_DOC * REMOVED_ROW_BYTES
    groups = _exchange(c, c.p, nb, removed).groups
    return StagePlan(
        "audit",
        1,
        {"get": 2 * groups * nb, "put": puts(removed)},
        removed,
        removed,
        WORKER_BASE_MB + 3 * removed / nb / MiB,
    )


def select_stage(c: Cut) -> StagePlan:
    """A task per unit bucket: the bucket's removals in (the ranges the audit reads), then per
    unit its token index in and the index of what dedup kept out."""
    m, nb, removed = c.m, _removed_buckets(c), c.docs * REMOVED_PER_DOC * REMOVED_ROW_BYTES
    groups = _exchange(c, c.p, nb, removed).groups
    return StagePlan(
        "select",
        nb,
        {
            "get": m * gets(c.index_bytes / m) + 2 * groups * nb,
            "put": m * puts(c.index_bytes / m),
            "head": m,
        },
        c.index_bytes + removed,
        c.index_bytes * (1 - REMOVED_PER_DOC),
        WORKER_BASE_MB + 3 * (c.index_bytes / m + removed / nb) / MiB,
    )


def _token_ranges(gets: int, stored: float, units: int, ratio: float) -> float:
    """Bytes `gets` range GETs of equal token pieces of `stored` bytes in all read from framed
    token files (tokens/framed.py): each piece and the compressed frame it reads past its ends
    (on average one frame in all), never more than its unit's file."""
    frame = FRAME_BYTES * ratio
    return gets * min(stored / gets + frame, stored / units)


def pack_stage(c: Cut) -> StagePlan:
    """Pass 1 (G x K exchange tasks) and pass 2 (S shard tasks, each checked as it is written:
    no read back, a HEAD per .bin and .idx); or, one pass, S shard tasks reading each unit's
    index and token range. Token files and exchange sections are stored compressed (the cut's
    stored_ratio: TOKEN_STORED_RATIO unless given), shards are not; the requests are the same
    either way (a range is one GET of the frames that hold it)."""
    g, k, s, t, m, ratio = c.g, c.k, c.s, c.token_bytes, c.m, c.stored_ratio
    stored = t * c.stored_ratio
    shards_out = s * (puts(c.shard_bytes) + 1)
    rss = WORKER_BASE_MB + 4 * c.shard_bytes / MiB
    if c.one_pass:
        index_reads = s * c.docs * INDEX_ROW_BYTES
        gets = {"get": 2 * m * s, "put": shards_out, "head": 2 * s}
        read = _token_ranges(m * s, stored, m, ratio) + index_reads
        return StagePlan("pack", s, gets, read, t, rss)
    return StagePlan(
        "pack",
        g * k + s,
        {
            "get": 2 * m * k + g * s,
            "put": g * k * (puts(stored / (g * k)) + 1) + shards_out,
            "head": g * k + 2 * s,
        },
        _token_ranges(m * k, stored, m, ratio) + stored,  # pass 1's unit ranges, pass 2's sections
        stored + t,  # the exchange objects, the shards
        rss,
    )

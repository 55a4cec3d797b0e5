"""Dry run at any corpus size: tasks, requests, bytes, memory, core-hours and dollars per stage.

Contract: the plan cuts a corpus with the pipeline's own functions (units, partitions,
exchange plans, pack plans), so its request counts and bytes are those a run would make at
that size; rates come from `bench scaling` (--rates) or the shipped defaults.
In full: docs/scaling-and-costs.md, "How plan projects a corpus".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from pydantic import ByteSize

from pipeline.config.sections import DedupConfig, IngestConfig, NearDedupConfig, PackConfig
from pipeline.dedup import band_rows
from pipeline.dedup.minhash import cand_row_bytes, signature_row_bytes
from pipeline.exchange.plan import direct, exchange_plan, one_pass_writers
from pipeline.ingest.listing import INPUTS_SCHEMA, cut_units
from pipeline.report.prices import PricesConfig
from pipeline.tokens.framed import FRAME_BYTES
from pipeline.tokens.pack import INDEX_ROW_BYTES, pack_plan

if TYPE_CHECKING:  # type only: config imports this package's section model
    from pipeline.config.loader import Config

MiB = 2**20
DOC_BYTES = 4000  # assumed mean document size when --docs is not given
FILE_BYTES = 2**30  # assumed input file size when --file-bytes is not given
S3FS_BLOCK = 50 * MiB  # s3fs reads and multipart parts go in blocks of this size
DOC_ROW_BYTES = 40  # a unit's documents file (ids, row; no text), Parquet, per document
TOKEN_BYTES_RATIO = 0.77  # uint16 token bytes / text bytes (8k byte-level BPE, 3.3 B/token)
TOKEN_BYTES = 2  # bytes per token without a config's tokenizer: uint16 (formats/megatron.py)
# stored / raw bytes of the token files and pack's exchange token sections (zstd frames,
# tokens/framed.py). A plan cannot know a corpus's ratio: this is the shipped sample's
# (configs/sample.yaml: 0.531, i.e. 1.88x), the least compressible corpus at hand (corpus64 in
# 16 MiB units: 0.361; corpus1g, make_corpus, in 64 MiB units: 0.389), rounded up: the plan errs
# on more bytes, not fewer
TOKEN_STORED_RATIO = 0.56
HASH_ROW_BYTES = 80  # exact hash row per document (hash, ids), Parquet
KEY_BYTES = 8  # a document's key in its band object's key section (dedup/band_rows.py)
REQUEST_ROW_BYTES = 20  # a candidate's signature request: key, label, unit index
# assumed per document (web-like corpora): documents with a candidate pair after banding
# (whose signatures near_fetch moves; make_corpus, dup-heavy by design, has 0.45), removals
# (exact + near) and the bytes of one removal row
CANDIDATE_DOCS_PER_DOC = 0.3
REMOVED_PER_DOC = 0.1
REMOVED_ROW_BYTES = 150
WORKER_BASE_MB = 250  # a Ray worker with pyarrow, numpy and the tokenizer loaded
# MB/s of input per core per stage: `bench scaling --mb 512`, W=1 (one pinned core, one engine
# thread), on its 549 MB make_corpus corpus with fastokens; the read task tokenizes, signs and
# hashes (17.3 MB/s per core in all; rerun it and pass --rates)
DEFAULT_RATES = {
    "list": 35505.4,
    "read+hash": 26.7,
    "quarantine": 7835.0,
    "exact": 851.4,
    "near": 173.1,
    "audit": 3592.9,
    "select": 985.4,
    "pack": 105.2,
}


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


def rates_from_bench(data: dict) -> dict[str, float]:
    """MB/s per core per stage from `bench scaling`'s JSON (its first, baseline worker count)."""
    w = str(data["workers"][0])
    secs = data["stages_s"][w]
    return {k: data["input_mb"] / (s * int(w)) for k, s in secs.items() if s > 0}


# The dry run lists every file and cuts every unit as a run would (~0.6 GB and ~12 s a million
# rows): a plan of more is refused rather than run out of memory (1 PiB at 1 GiB files is 2^20).
MAX_PLAN_ROWS = 2_000_000


class PlanTooLarge(ValueError):
    """Sizes the dry run cannot model: too many files or units to list, more documents than
    bytes. Phrased for the user (the option to change is named)."""


def check_sizes(corpus_bytes: int, file_bytes: int, unit_bytes: int, docs: int | None) -> None:
    """PlanTooLarge unless the dry run at these sizes fits (MAX_PLAN_ROWS) and makes sense."""
    for what, option, size in (
        ("input files", "--file-bytes", file_bytes),
        ("work units", "--unit-bytes (ingest.unit_bytes)", unit_bytes),
    ):
        rows = math.ceil(corpus_bytes / size)
        if rows > MAX_PLAN_ROWS:
            raise PlanTooLarge(
                f"{rows:,} {what} of {size:,} B: the dry run models at most {MAX_PLAN_ROWS:,};"
                f" give a larger {option}"
            )
    if docs is not None and docs > corpus_bytes:
        raise PlanTooLarge(f"--docs {docs:,}: more documents than bytes ({corpus_bytes:,})")


def synthetic_listing(corpus_bytes: int, file_bytes: int) -> pa.Table:
    n = max(1, math.ceil(corpus_bytes / file_bytes))
    sizes = [file_bytes] * (n - 1) + [corpus_bytes - file_bytes * (n - 1)]
    return pa.table(
        {
            "path": [f"part-{i:08d}.jsonl" for i in range(n)],
            "size": sizes,
            "etag": [f"e{i}" for i in range(n)],
            "mtime": [0.0] * n,
            "format": ["jsonl"] * n,
            "compression": ["none"] * n,
            "head_tail_xxh3": [None] * n,  # an S3 listing reads no content
        },
        schema=INPUTS_SCHEMA,
    )


@dataclass(frozen=True)
class _Cut:
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


def dry_run(
    corpus_bytes: int,
    *,
    docs: int | None = None,
    unit_bytes: int = int(IngestConfig().unit_bytes),
    shard_bytes: int = int(PackConfig().shard_bytes),
    file_bytes: int = FILE_BYTES,
    dedup: DedupConfig | None = None,
    exchange_request_bytes: int = int(PackConfig().exchange_request_bytes),
    exchange_task_bytes: int = int(PackConfig().exchange_task_bytes),
    dedup_request_bytes: int | None = None,
    num_perm: int = NearDedupConfig().num_perm,
    bands: int = NearDedupConfig().bands,
    rates: dict[str, float] | None = None,
    prices: PricesConfig | None = None,
    token_bytes_per_id: int = TOKEN_BYTES,
    token_ratio: float = TOKEN_BYTES_RATIO,
    stored_ratio: float = TOKEN_STORED_RATIO,
) -> tuple[dict, list[StagePlan]]:
    """The plan of one run over `corpus_bytes` of text (pure: sizes in, stage table out). Each
    default is the config models' default for the same key (see the module docstring);
    `token_bytes_per_id` is the shards' token dtype's size (4 for int32 ids)."""
    check_sizes(corpus_bytes, file_bytes, unit_bytes, docs)
    dedup, rates = dedup or DedupConfig(), {**DEFAULT_RATES, **(rates or {})}
    prices = prices or PricesConfig()
    docs = docs or max(1, corpus_bytes // DOC_BYTES)
    listing = synthetic_listing(corpus_bytes, file_bytes)
    units_table = cut_units(listing, unit_bytes)
    m = len(set(units_table["unit_id"].to_pylist()))
    token_bytes = int(corpus_bytes * token_ratio * token_bytes_per_id / 2)
    plan = pack_plan(
        token_bytes, m, shard_bytes, exchange_request_bytes, exchange_task_bytes, docs=docs
    )
    c = _Cut(
        corpus_bytes,
        docs,
        m,
        units_table.num_rows,
        dedup.partition_count(corpus_bytes),
        plan.shards,
        plan.buckets,
        plan.groups,
        plan.one_pass,
        token_bytes,
        shard_bytes,
        signature_row_bytes(num_perm),
        cand_row_bytes(num_perm),
        bands,
        int(dedup_request_bytes or dedup.exchange_request_bytes),
        int(dedup.exchange_task_bytes),
        dedup.exchange_small_gets,
        stored_ratio,
    )
    cut = {
        **_cut_counts(c, listing.num_rows),
        # the settings the cut used, printed so that a plan says which it is
        "unit_bytes": unit_bytes,
        "shard_bytes": shard_bytes,
        "file_bytes": file_bytes,
        "partition_bytes": None if dedup.partitions else int(dedup.partition_bytes),
        "token_bytes_per_id": token_bytes_per_id,
    }
    list_stage = StagePlan("list", 1, {"list": math.ceil(listing.num_rows / 1000)}, 0, 0)
    st = [list_stage] + [stage(c) for stage in (_read, _exact, _near, _audit, _select, _pack)]
    for stage in st:
        _cost(stage, corpus_bytes, rates, prices)
    return cut, st


def _read(c: _Cut) -> StagePlan:
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


def _exchange(c: _Cut, writers: int, parts: int, size: float, reads: int = 1) -> _Exchange:
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


def _removed_buckets(c: _Cut) -> int:
    return max(1, min(c.p, c.m))  # sections.unit_bounds(units, partitions)


def _exact(c: _Cut) -> StagePlan:
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


def _near(c: _Cut) -> StagePlan:
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
    fetchers = _fetch_tasks(c)
    exact = _exchange(c, p, nb, removed)  # the exact removals' exchange (_exact)
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


def _fetch_tasks(c: _Cut) -> int:
    """Near dedup's fetch tasks, cut as the run cuts them (run/dedup_stage.fetch_runs)."""
    cands = c.docs * CANDIDATE_DOCS_PER_DOC * c.cand_doc
    buckets = _removed_buckets(c)
    return one_pass_writers(buckets, c.p, int(cands), c.request_bytes, c.task_bytes, c.small_gets)


def _audit(c: _Cut) -> StagePlan:
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


def _select(c: _Cut) -> StagePlan:
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


def _pack(c: _Cut) -> StagePlan:
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


def _cut_counts(c: _Cut, files: int) -> dict:
    """The plan's first line: what the corpus is cut into."""
    return {
        "corpus_bytes": c.corpus_bytes,
        "docs": c.docs,
        "files": files,
        "units": c.m,
        "partitions": c.p,
        "shards": c.s,
        "pack_buckets": c.k,
        "pack_groups": c.g,
        "pack_one_pass": c.one_pass,
        "token_bytes": c.token_bytes,
        "near_fetch_tasks": _fetch_tasks(c),
    }


def _pack_cut(cut: dict) -> str:
    if cut["pack_one_pass"]:
        return "pack in one pass: each shard task reads the units' token files"
    g, k = cut["pack_groups"], cut["pack_buckets"]
    disk = si(cut["token_bytes"] / (g * k))
    return f"pack exchange {g} unit groups x {k} key buckets, {disk}B of local disk per pass-1 task"


def _cost(stage: StagePlan, corpus_bytes: int, rates: dict, prices: PricesConfig) -> None:
    stage.core_hours = corpus_bytes / 1e6 / rates.get(stage.name, 1e6) / 3600
    r = stage.requests
    stage.dollars = (
        (r.get("put", 0) + r.get("list", 0)) * prices.standard.put_per_1000
        + (r.get("get", 0) + r.get("head", 0)) * prices.standard.get_per_1000
    ) / 1000


def plan_for_config(cfg: Config | None, corpus_bytes: int, **kw) -> tuple[dict, list[StagePlan]]:
    """The dry run with the config's settings (None: the models' defaults); a keyword given and
    not None (a command-line option) wins over the config."""
    kw = {k: v for k, v in kw.items() if v is not None}  # an option not given is not an override
    if cfg is not None:
        kw.setdefault("unit_bytes", int(cfg.ingest.unit_bytes))
        kw.setdefault("shard_bytes", int(cfg.pack.shard_bytes))
        kw.setdefault("dedup", cfg.dedup)
        kw.setdefault("exchange_request_bytes", int(cfg.pack.exchange_request_bytes))
        kw.setdefault("exchange_task_bytes", int(cfg.pack.exchange_task_bytes))
        kw.setdefault("dedup_request_bytes", int(cfg.dedup.exchange_request_bytes))
        kw.setdefault("num_perm", cfg.dedup.near.num_perm)
        kw.setdefault("bands", cfg.dedup.near.bands)
        kw.setdefault("prices", cfg.prices)
        kw.setdefault("token_bytes_per_id", tokenizer_bytes_per_id(cfg.tokenize.tokenizer))
    return dry_run(corpus_bytes, **kw)


def tokenizer_bytes_per_id(path: str) -> int:
    """The size of the token dtype a run with the tokenizer at `path` writes (from its largest
    id, tokens/encode.py); TOKEN_BYTES when the file cannot be read here (a plan may be made
    away from the data: `plan --config` does not require the config's paths)."""
    from tokenizers import Tokenizer

    from pipeline.formats.megatron import token_dtype
    from pipeline.tokens.encode import max_token_id

    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception:  # noqa: BLE001 - missing or unreadable: the plan says what it assumed
        return TOKEN_BYTES
    return token_dtype(max_token_id(tokenizer) + 1).itemsize


def si(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def _binary(n: int) -> str:
    return ByteSize(n).human_readable()


def dry_run_lines(cut: dict, stages: list[StagePlan]) -> list[str]:
    per_partition = cut.get("partition_bytes")
    lines = [
        f"settings: units of {_binary(cut['unit_bytes'])} (ingest.unit_bytes), shards of"
        f" {_binary(cut['shard_bytes'])} (pack.shard_bytes), dedup partitions "
        + (
            f"of {_binary(per_partition)} listed (dedup.partition_bytes)"
            if per_partition
            else "fixed (dedup.partitions)"
        )
        + f"; assumed input files of {_binary(cut['file_bytes'])} (--file-bytes)"
        f" and {cut['corpus_bytes'] // max(1, cut['docs']):,} B per document (--docs)",
        f"corpus {si(cut['corpus_bytes'])}B in {cut['files']:,} files, {cut['docs']:,} docs:"
        f" {cut['units']:,} units, {cut['partitions']:,} dedup partitions, {cut['shards']:,}"
        f" shards ({si(cut['token_bytes'])}B of tokens at"
        f" {cut.get('token_bytes_per_id', TOKEN_BYTES)} B each; {_pack_cut(cut)})",
        f"{'stage':<10}{'tasks':>9}{'GET':>9}{'PUT':>9}{'HEAD':>8}{'LIST':>6}{'mean GET':>10}"
        f"{'read':>8}{'written':>8}{'MB/task':>9}{'core-h':>9}{'$ req':>9}{'moved':>7}",
    ]
    for s in stages:
        r = s.requests
        mean_get = s.bytes_read / r["get"] if r.get("get") else 0
        lines.append(
            f"{s.name:<10}{s.tasks:>9,}{si(r.get('get', 0)):>9}{si(r.get('put', 0)):>9}"
            f"{si(r.get('head', 0)):>8}{si(r.get('list', 0)):>6}{si(mean_get) + 'B':>10}"
            f"{si(s.bytes_read) + 'B':>8}{si(s.bytes_written) + 'B':>8}{s.peak_mb:>9,.0f}"
            f"{s.core_hours:>9,.0f}{s.dollars:>9,.2f}"
            f"{(s.bytes_read + s.bytes_written) / cut['corpus_bytes']:>6.2f}x"
        )
    total_req = sum(sum(s.requests.values()) for s in stages)
    lines.append(
        f"{'total':<10}{sum(s.tasks for s in stages):>9,}  requests {si(total_req)},"
        f" core-hours {sum(s.core_hours for s in stages):,.0f},"
        f" request $ {sum(s.dollars for s in stages):,.2f}"
    )
    read, written = sum(s.bytes_read for s in stages), sum(s.bytes_written for s in stages)
    lines.append(
        f"bytes moved {bytes_moved_per_input_byte(cut, stages):.2f} x input"
        f" ({si(read)}B read + {si(written)}B written for {si(cut['corpus_bytes'])}B in)"
    )
    return lines


def bytes_moved_per_input_byte(cut: dict, stages: list[StagePlan]) -> float:
    """(bytes read + bytes written, every stage) / input bytes: the run's storage traffic."""
    moved = sum(s.bytes_read + s.bytes_written for s in stages)
    return moved / cut["corpus_bytes"]


def dry_run_json(cut: dict, stages: list[StagePlan]) -> str:
    return json.dumps(
        {
            "cut": cut,
            "bytes_moved_per_input_byte": round(bytes_moved_per_input_byte(cut, stages), 3),
            "stages": [s.__dict__ for s in stages],
        }
    )

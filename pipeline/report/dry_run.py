"""Dry run at any corpus size: tasks, requests, bytes, memory, core-hours and dollars per stage.

Contract: the plan cuts a corpus with the pipeline's own functions (units, partitions,
exchange plans, pack plans), so its request counts and bytes are those a run would make at
that size; rates come from `bench scaling` (--rates) or the shipped defaults. Each stage's
formulas: report/dry_run_stages.py; what a plan assumes (document size, compression, rates):
report/dry_run_assumptions.py; the printout: report/dry_run_printout.py.
In full: docs/scaling-and-costs.md, "How plan projects a corpus".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pyarrow as pa

from pipeline.config.sections import DedupConfig, IngestConfig, NearDedupConfig, PackConfig
from pipeline.dedup.minhash import cand_row_bytes, signature_row_bytes
from pipeline.ingest.listing import INPUTS_SCHEMA, cut_units
from pipeline.report.dry_run_assumptions import (
    DEFAULT_RATES,
    DOC_BYTES,
    FILE_BYTES,
    TOKEN_BYTES,
    TOKEN_BYTES_RATIO,
    TOKEN_STORED_RATIO,
)
from pipeline.report.dry_run_stages import (
    Cut,
    StagePlan,
    audit_stage,
    exact_stage,
    fetch_tasks,
    near_stage,
    pack_stage,
    read_stage,
    select_stage,
)
from pipeline.report.prices import PricesConfig
from pipeline.tokens.pack import pack_plan

if TYPE_CHECKING:  # type only: config imports this package's section model
    from pipeline.config.model import Config


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
    c = Cut(
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
    st = [list_stage] + [
        stage(c)
        for stage in (read_stage, exact_stage, near_stage, audit_stage, select_stage, pack_stage)
    ]
    for stage in st:
        _cost(stage, corpus_bytes, rates, prices)
    return cut, st


def _cut_counts(c: Cut, files: int) -> dict:
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
        "near_fetch_tasks": fetch_tasks(c),
    }


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

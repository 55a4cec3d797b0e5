"""The cost model, pure: retained bytes (from a listing), read bytes and requests (from counters),
a price table in; dollars per month out. No I/O (report/build.py gathers the inputs).

Arithmetic, with GB = prices.bytes_per_gb (AWS bills 2^30-byte GB-months):
- storage    = sum over objects of bytes / GB x gb_month(storage class)
- requests   = count / 1000 x price per kind: LIST, PUT, COPY at the STANDARD put_per_1000 (new
               objects and listings are STANDARD requests); GET and HEAD at the get_per_1000 of
               the storage classes the stream reads, weighted by their bytes; DELETE is free;
               requests of other kinds are counted, not priced
- retrieval  = bytes read / GB x retrieval_per_gb of the classes read, weighted the same way
- one-off, when the plan is applied: one COPY per transition at the target class's put price,
  and the minimum-duration charge of every object that leaves a class (deleted or moved) before
  min_days in it: bytes / GB x gb_month x (min_days - days in class) / days_per_month.
"Before" is the listing as it is; "after" is the same listing with the plan applied.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.report.prices import ClassPrice, PricesConfig
from pipeline.retention.decide import DAY, Decision

REQUEST_KINDS = ("list", "get", "head", "put", "copy", "delete", "other")
_PUT_PRICED = ("list", "put", "copy")
_GET_PRICED = ("get", "head")


@dataclass(frozen=True)
class ReadStream:
    """Monthly reading by one consumer (a pipeline stage, training) of one data class."""

    name: str
    data_class: str
    bytes_read: float
    requests: dict[str, float] = field(default_factory=dict)  # kind -> count per month


def requests_from_io(io: dict[str, float]) -> dict[str, float]:
    """IO counters ({"get_requests": n, ...}) -> {"get": n, ...}."""
    out = {k: float(io.get(f"{k}_requests", 0)) for k in REQUEST_KINDS}
    return {k: v for k, v in out.items() if v}


def retained_rows(decisions: Iterable[Decision], after: bool) -> list[dict]:
    """Bytes and objects per (data class, storage class); `after`: with the plan applied."""
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for d in decisions:
        if after and d.action == "delete":
            continue
        storage_class = (
            d.target_class if after and d.action == "transition" else d.obj.storage_class
        )
        row = totals[(d.data_class, storage_class)]
        row[0] += 1
        row[1] += d.obj.size
    return [
        {"data_class": c, "storage_class": s, "objects": n, "bytes": b}
        for (c, s), (n, b) in sorted(totals.items())
    ]


def _gb(n: float, prices: PricesConfig) -> float:
    return n / prices.bytes_per_gb


def price_rows(rows: list[dict], prices: PricesConfig) -> list[dict]:
    return [
        {**r, "usd_month": _gb(r["bytes"], prices) * prices.for_class(r["storage_class"]).gb_month}
        for r in rows
    ]


def class_mix(rows: list[dict]) -> dict[str, dict[str, float]]:
    """data class -> {storage class: share of its bytes}."""
    by_class: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        by_class[r["data_class"]][r["storage_class"]] = r["bytes"]
    mixes = {}
    for data_class, parts in by_class.items():
        total = sum(parts.values())
        mixes[data_class] = (
            {s: b / total for s, b in parts.items()}
            if total
            else {s: 1 / len(parts) for s in parts}
        )
    return mixes


def _weighted(mix: dict[str, float], prices: PricesConfig, attr: str) -> float:
    mix = mix or {"STANDARD": 1.0}  # a class with no bytes left is read at STANDARD prices
    return sum(share * getattr(prices.for_class(s), attr) for s, share in mix.items())


def price_stream(stream: ReadStream, mix: dict[str, float], prices: PricesConfig) -> dict:
    get_price = _weighted(mix, prices, "get_per_1000")
    usd = {}
    for kind, n in stream.requests.items():
        if kind in _PUT_PRICED:
            usd[kind] = n / 1000 * prices.standard.put_per_1000
        elif kind in _GET_PRICED:
            usd[kind] = n / 1000 * get_price
    retrieval = _gb(stream.bytes_read, prices) * _weighted(mix, prices, "retrieval_per_gb")
    return {
        "stream": stream.name,
        "data_class": stream.data_class,
        "bytes_per_month": stream.bytes_read,
        "requests": dict(stream.requests),
        "request_usd": usd,
        "retrieval_usd": retrieval,
        "total_usd": sum(usd.values()) + retrieval,
    }


def monthly(rows: list[dict], streams: list[ReadStream], prices: PricesConfig) -> dict:
    priced = price_rows(rows, prices)
    mixes = class_mix(rows)
    reads = [price_stream(s, mixes.get(s.data_class, {}), prices) for s in streams]
    storage = sum(r["usd_month"] for r in priced)
    requests = sum(sum(r["request_usd"].values()) for r in reads)
    retrieval = sum(r["retrieval_usd"] for r in reads)
    retained = sum(r["bytes"] for r in rows)
    read = sum(s.bytes_read for s in streams)
    return {
        "retained": priced,
        "reads": reads,
        "storage_usd": storage,
        "request_usd": requests,
        "retrieval_usd": retrieval,
        "total_usd": storage + requests + retrieval,
        "retained_bytes": retained,
        "read_bytes_per_month": read,
        "retained_per_read": retained / read if read else None,
    }


def apply_once(decisions: Iterable[Decision], now: float, prices: PricesConfig) -> dict:
    """What applying the plan costs once: COPY requests and minimum-duration charges."""
    copies: dict[str, int] = defaultdict(int)
    early = 0.0
    deleted = delete_bytes = 0
    for d in decisions:
        if d.action == "keep":
            continue
        if d.action == "delete":
            deleted += 1
            delete_bytes += d.obj.size
        else:
            copies[d.target_class] += 1
        early += _early_charge(d, now, prices.for_class(d.obj.storage_class), prices)
    copy_usd = sum(n / 1000 * prices.for_class(c).put_per_1000 for c, n in copies.items())
    return {
        "deletes": deleted,
        "delete_bytes": delete_bytes,
        "copies": sum(copies.values()),
        "copy_usd": copy_usd,
        "early_delete_usd": early,
        "total_usd": copy_usd + early,
    }


def _early_charge(d: Decision, now: float, price: ClassPrice, prices: PricesConfig) -> float:
    days_in_class = (now - d.obj.in_class_since) / DAY
    remaining = max(0.0, price.min_days - days_in_class)
    return _gb(d.obj.size, prices) * price.gb_month * remaining / prices.days_per_month


def by_class(before: list[dict], after: list[dict], streams: list[ReadStream]) -> list[dict]:
    """Per data class: bytes retained before and after the plan, bytes read per month."""
    table: dict[str, dict[str, float]] = defaultdict(
        lambda: {"retained_before": 0, "retained_after": 0, "read_per_month": 0}
    )
    for r in before:
        table[r["data_class"]]["retained_before"] += r["bytes"]
    for r in after:
        table[r["data_class"]]["retained_after"] += r["bytes"]
    for s in streams:
        table[s.data_class]["read_per_month"] += s.bytes_read
    return [{"data_class": c, **v} for c, v in sorted(table.items())]


def request_table(streams: list[ReadStream], once: dict) -> dict[str, dict[str, float]]:
    """kind -> {consumer: count}: pipeline stages, training (per month), retention (once)."""
    table: dict[str, dict[str, float]] = {k: {} for k in REQUEST_KINDS}
    for s in streams:
        consumer = "training" if s.name.startswith("training") else "pipeline"
        for kind, n in s.requests.items():
            table[kind][consumer] = table[kind].get(consumer, 0) + n
    table["copy"]["retention (once)"] = once["copies"]
    table["delete"]["retention (once)"] = once["deletes"]
    return {k: v for k, v in table.items() if any(v.values())}


def layout_napkin(
    documents: int,
    dataset_bytes: int,
    shards: int,
    shard_gets_per_epoch: float,
    prices: PricesConfig,
    latency_s: float = 0.05,
) -> dict:
    """The same epoch of training reads from one object per document vs from the shards."""
    get = prices.standard.get_per_1000 / 1000
    put = prices.standard.put_per_1000 / 1000

    def layout(objects: int, gets: float) -> dict:
        return {
            "objects": objects,
            "bytes_per_object": dataset_bytes / objects if objects else 0,
            "get_requests_per_epoch": gets,
            "request_usd_per_epoch": gets * get,
            "put_requests_to_write": objects,
            "put_usd_to_write": objects * put,
            "first_byte_wait_s_per_epoch": gets * latency_s,
        }

    small = layout(documents, float(documents))
    sharded = layout(2 * shards, shard_gets_per_epoch)  # .bin + .idx per shard
    return {
        "latency_s": latency_s,
        "small_files": small,
        "shards": sharded,
        "request_ratio": small["get_requests_per_epoch"] / shard_gets_per_epoch
        if shard_gets_per_epoch
        else None,
    }

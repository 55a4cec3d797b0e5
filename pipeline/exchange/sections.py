"""Sectioned objects: how an exchange moves rows through storage (a dedup section's rows:
exchange/row_codec.py; near's band rows: dedup/band_rows.py; pack's: tokens/pack.py).

A writer writes ONE object per exchange, a section per part then the section offsets; pass 1
(exchange/regroup.py) regroups writers into group objects by bucket of parts; a part's reader
GETs one range per group (or, while pieces are large enough, one per writer: `writer_ranges`).

Contract: an object is whole or absent (nothing else is written); the driver holds O(writers)
numbers per exchange; every request count is linear in the bytes moved; a part's rows arrive
in the writers' order, then each writer's row order, whichever path read them.
Format, the cut and the request arithmetic: docs/formats.md, "Sectioned objects".
"""

from __future__ import annotations

import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipeline.core.storage import Location
from pipeline.exchange.plan import ExchangePlan
from pipeline.exchange.row_codec import decode_rows, encode_rows


def encode(
    table: pa.Table, schema: pa.Schema | None = None, compression: str | None = None
) -> bytes:
    """One section: the rows as an Arrow IPC stream (buffers compressed by `compression`); no
    rows, no bytes. With a `schema`, always a stream of that schema, rows or not (pack's index
    rows: a reader needs no other)."""
    if schema is None:
        if table.num_rows == 0:
            return b""
        schema = table.schema
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def decode(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """The tables' rows in order; those without rows (or none at all) add nothing."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="default")


def split_rows(rows: pa.Table, parts: np.ndarray) -> dict[int, pa.Table]:
    """The rows of each partition that has any, given each row's partition index (stable: each
    partition keeps the rows' order)."""
    order = np.argsort(parts, kind="stable")
    bounds = np.flatnonzero(np.diff(parts[order])) + 1
    return {
        int(parts[idx[0]]): rows.take(pa.array(idx)) for idx in np.split(order, bounds) if len(idx)
    }


def write_sectioned(loc: Location, rows: pa.Table, parts: np.ndarray, n: int) -> int:
    """One writer's object: `rows` cut by their partition index `parts` into sections 0..n-1,
    then the index; returns the object's size (what the writer's result carries)."""
    pieces = split_rows(rows, parts) if rows.num_rows else {}
    return write_sections(loc, {p: encode_rows(t) for p, t in pieces.items()}, n)


def write_sections(loc: Location, encoded: dict[int, bytes], n: int) -> int:
    """One writer's object from its sections' bytes (part -> bytes; a part not there: empty),
    then the index; returns the object's size."""
    offsets = [0]
    with loc.atomic_writer() as out:
        for p in range(n):
            data = encoded.get(p, b"")
            out.write(data)
            offsets.append(offsets[-1] + len(data))
        out.write(np.asarray(offsets, dtype="<i8").tobytes())
    return offsets[-1] + index_bytes(n)


def index_bytes(n: int) -> int:
    return 8 * (n + 1)


def index_of(data: bytes, n: int) -> np.ndarray:
    """The section offsets from an object's last index_bytes(n) bytes (or the whole object)."""
    return np.frombuffer(data[len(data) - index_bytes(n) :], dtype="<i8")


@dataclass(frozen=True)
class SectionedObject:
    """One writer's object and its size, index included (what a regroup task reads)."""

    loc: Location
    size: int


def read_bucket(obj: SectionedObject, span: range, n: int, whole: bool) -> tuple[bytes, list]:
    """The bytes of the sections `span` of one writer's object of `n` sections, and its section
    offsets: one GET of the whole object when `whole` (one bucket), else its index then the
    range."""
    if whole:
        data = obj.loc.read_bytes(0, obj.size)  # a range: s3fs would HEAD first for a whole read
        offsets = index_of(data, n)
        return data[: int(offsets[-1])], offsets
    offsets = index_of(obj.loc.read_bytes(obj.size - index_bytes(n), obj.size), n)
    a, b = int(offsets[span.start]), int(offsets[span.stop])
    return (obj.loc.read_bytes(a, b) if b > a else b""), offsets


Range = tuple[Location, int, int]  # (object, start, end): one GET


def part_ranges(folder: Location, plan: ExchangePlan, regrouped: list) -> dict[int, list[Range]]:
    """part -> the non-empty range of each group's object, in group order, from the pass-1
    results (run.results.RegroupResult: bucket, object, offsets)."""
    ranges: dict[int, list[Range]] = {p: [] for p in range(plan.parts)}
    for r in sorted(regrouped, key=lambda r: (r.group, r.bucket)):
        span = plan.bucket_parts(r.bucket)
        for j, part in enumerate(span):
            a, b = r.offsets[j], r.offsets[j + 1]
            if b > a:
                ranges[part].append((folder / r.object, a, b))
    return ranges


def writer_ranges(writers: list[SectionedObject], n: int) -> dict[int, list[Range]]:
    """part -> the non-empty section of each writer's own object, in writer order: a one-pass
    exchange (plan.direct), whose readers GET the writers' objects; one GET of each index here.
    The rows and their order are those pass 1 would have regrouped."""
    ranges: dict[int, list[Range]] = {p: [] for p in range(n)}
    writers = [w for w in writers if w.size > index_bytes(n)]  # else an index and no rows
    indexes = fetched([(w.loc, w.size - index_bytes(n), w.size) for w in writers])
    for w, index in zip(writers, indexes, strict=True):
        offsets = index_of(index, n)
        for p in range(n):
            a, b = int(offsets[p]), int(offsets[p + 1])
            if b > a:
                ranges[p].append((w.loc, a, b))
    return ranges


def read_part(
    ranges: list[Range], schema: pa.Schema, codec: Callable[[bytes], pa.Table] | None = None
) -> pa.Table:
    """A part's rows: one GET per range (FETCHES in flight), in order, each range a dedup row
    section of `schema` (exchange/row_codec.py), or one `codec` decodes (dedup/band_rows.py)."""
    codec = codec or (lambda data: decode_rows(data, schema))
    return concat([codec(data) for data in fetched(ranges)], schema)


# GETs in flight for one reader's ranges: a one-pass exchange's reader GETs a range of every
# writer, hundreds at 50 ms each one after the other; the bytes are those it holds anyway.
FETCHES = 16


def fetched(ranges: list[Range]) -> list[bytes]:
    """The bytes of each range, in order, up to FETCHES GETs at a time."""
    if len(ranges) <= 1:
        return [loc.read_bytes(a, b) for loc, a, b in ranges]
    with ThreadPoolExecutor(min(FETCHES, len(ranges))) as pool:
        return list(pool.map(lambda r: r[0].read_bytes(r[1], r[2]), ranges))


def unit_bounds(unit_ids: list[str], buckets: int) -> list[str]:
    """First unit id of each of min(buckets, units) buckets of consecutive sorted unit ids: how
    removals are sectioned, so that a merge holds one bucket of units at a time."""
    units = sorted(unit_ids)
    n = max(1, min(buckets, len(units)))
    return [units[b * len(units) // n] for b in range(n)] if units else [""]


def unit_bucket(bounds: list[str], unit_ids: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Bucket index of each unit id (bounds from unit_bounds)."""
    ids = np.array(unit_ids.to_pylist(), dtype=object).astype(str)
    at = np.searchsorted(np.array(bounds, dtype=str), ids, side="right") - 1
    return np.maximum(at, 0).astype(np.int64)

"""Pass 1 of an exchange (format and request counts: exchange/sections.py), dedup's and pack's.

A pass-1 task reads one bucket (a run of consecutive parts) of each writer of one group and
writes it back as one object laid out part by part (`grouped`). What it reads is a piece per
writer: that writer's section of each part of the bucket, each section F fields of bytes
(dedup's rows: one field, a row section, exchange/row_codec.py; pack: the tokens, then their
index rows). The pieces wait in a local temporary file, so memory holds one part of the group
at a time, not the group's rows; then each part's sections are merged across writers field by
field (the `Codec`'s merges) and written. A marker written after the object, shaped by the
codec, makes a rerun reuse it (resume).

A step whose writers would only route rows they read (near dedup's band routing) calls
`grouped` itself with pieces made in memory, merged by its own codec (`merging`): its pass 1
is that step. Pieces made in memory wait in the spill file uncompressed (`span_piece`, raw
band rows): only what `grouped` or `sectioned` writes is compressed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np
import pyarrow as pa

from pipeline.core.storage import Location
from pipeline.exchange import sections
from pipeline.exchange.plan import ExchangePlan
from pipeline.exchange.row_codec import decode_rows, encode_rows
from pipeline.run.markers import load_marker, write_marker
from pipeline.run.results import RegroupResult, TaskResult
from pipeline.run.timer import TaskTimer

# One writer's section of one part: its fields' bytes, or None when it has no rows there.
Section = Sequence[bytes | memoryview] | None
# One writer's sections of the bucket's parts, in part order (none at all: no rows in it).
Piece = Iterable[Section]


@dataclass(frozen=True)
class Codec:
    """What a pass-1 object holds: per field, how a part's sections merge across writers (their
    non-empty field bytes in writer order in, the bytes to write out); how the marker records
    the sections (from each part's field sizes: the marker's fields besides group, bucket and
    object); and the task's result, whose own fields are the marker's."""

    merges: tuple[Callable[[Iterator[bytes]], Iterable[bytes]], ...]
    marker: Callable[[list[list[int]]], dict]
    result: type[TaskResult]


def _offsets(sizes: list[list[int]]) -> dict:
    return {"offsets": list(accumulate((s for (s,) in sizes), initial=0))}


def row_sections(schema: pa.Schema, raw: bool = False) -> Codec:
    """Dedup rows of `schema`, one row section per partition (exchange/row_codec.py): a
    part's sections of several writers are decoded, joined and encoded as one. `raw`: the
    pieces are uncompressed row frames (`span_piece`), so no piece is compressed for the spill
    file and read back; the bytes written are the same."""

    def merged(chunks: Iterator[bytes]) -> Iterator[bytes]:
        chunks = list(chunks)
        if len(chunks) == 1 and not raw:  # already one section
            yield chunks[0]
        elif chunks:
            tables = [decode_rows(c, schema, compressed=not raw) for c in chunks]
            yield encode_rows(pa.concat_tables(tables))

    return Codec((merged,), _offsets, RegroupResult)


def merging(merge: Callable[[Iterator[bytes]], Iterable[bytes]]) -> Codec:
    """One field whose sections its caller merges itself (near dedup's band rows: pieces made
    in memory, spilled as raw rows, encoded once per part by `merge`)."""
    return Codec((merge,), _offsets, RegroupResult)


def _merged(out, parts: int, codec: Codec, pieces: Iterable[Piece]) -> list[list[int]]:
    """The pieces' sections, part by part, each part's merged across writers by `codec`,
    written to `out`; per part, the bytes of each field written. The pieces wait in a local
    temporary file: memory holds one part's sections at a time."""
    fields = len(codec.merges)
    # per writer with rows in the bucket, per part: its fields' (offset, size) in the spill file
    placed: list[list[list[tuple[int, int]] | None]] = []
    with tempfile.TemporaryFile() as spill:
        for piece in pieces:
            where: list[list[tuple[int, int]] | None] = []
            for section in piece:
                if section is None:
                    where.append(None)
                    continue
                where.append([])
                for data in section:
                    where[-1].append((spill.tell(), len(data)))
                    spill.write(data)
            if any(w is not None for w in where):
                placed.append(where)
        spill.flush()
        sizes: list[list[int]] = []
        for j in range(parts):
            sizes.append([])
            for f in range(fields):
                chunks = (
                    os.pread(spill.fileno(), w[j][f][1], w[j][f][0])
                    for w in placed
                    if w[j] is not None and w[j][f][1]
                )
                sizes[-1].append(0)
                for data in codec.merges[f](chunks):
                    out.write(data)
                    sizes[-1][-1] += len(data)
    return sizes


def sectioned(loc: Location, n: int, codec: Codec, pieces: Iterable[Piece]) -> int:
    """One writer's sectioned object (exchange/sections.py: sections 0..n-1, then the index)
    from pieces of rows it made itself (`span_piece` over range(n)), merged part by part as
    pass 1 merges them, so that a writer of many inputs spills them instead of holding them;
    its size. A one-field codec: a dedup row section per part."""
    with loc.atomic_writer() as out:
        sizes = _merged(out, n, codec, pieces)
        offsets = list(accumulate((sum(s) for s in sizes), initial=0))
        out.write(np.asarray(offsets, dtype="<i8").tobytes())
    return offsets[-1] + sections.index_bytes(n)


def regroup(
    folder: Location,
    plan: ExchangePlan,
    group: int,
    bucket: int,
    writers: list[sections.SectionedObject],
    schema: pa.Schema,
) -> RegroupResult:
    """The group's rows (of `schema`) of the bucket's partitions as one sectioned object in
    `folder`."""
    span, n, whole = plan.bucket_parts(bucket), plan.parts, plan.buckets == 1
    pieces = (
        _bucket_piece(*sections.read_bucket(w, span, n, whole), span)
        for w in writers
        if w.size > sections.index_bytes(n)
    )  # a writer whose object is an index and no rows: nothing to read
    return grouped(folder, plan, group, bucket, row_sections(schema), pieces)


def _bucket_piece(data: bytes, offsets: Sequence[int], span: range) -> list[Section]:
    """A writer's sections of `span` from read_bucket's bytes and its object's offsets."""
    view, base = memoryview(data), int(offsets[span.start])
    return [
        (view[a - base : b - base],) if b > a else None
        for a, b in ((int(offsets[p]), int(offsets[p + 1])) for p in span)
    ]


def span_piece(rows: pa.Table, parts: np.ndarray, span: range) -> list[Section]:
    """A writer's piece for `grouped` or `sectioned` made in memory: the rows of each
    partition of `span` (their partition index `parts`), one uncompressed row frame each
    (exchange/row_codec.py), for `row_sections(schema, raw=True)`."""
    inside = (parts >= span.start) & (parts < span.stop)
    if not inside.any():
        return []
    pieces = sections.split_rows(rows.filter(pa.array(inside)), parts[inside])
    return [(encode_rows(pieces[p], level=None),) if p in pieces else None for p in span]


def grouped(
    folder: Location,
    plan: ExchangePlan,
    group: int,
    bucket: int,
    codec: Codec,
    pieces: Iterable[Piece],
    reuse: bool = True,
) -> TaskResult:
    """Pass 1's object of (group, bucket) from its writers' `pieces`, in writer order, merged
    by `codec`. Its marker, written last, makes a rerun reuse it (unless not `reuse`: the
    caller needs the pieces consumed)."""
    timer = TaskTimer()
    name = f"g{group:05d}-k{bucket:05d}"
    done = folder / f"{name}.json"
    earlier = load_marker(done, codec.result) if reuse else None  # its own fields
    if earlier is not None:
        return timer.result(codec.result, **earlier.own_fields(), reused=True)
    with (folder / f"{name}.bin").atomic_writer() as out:
        sizes = _merged(out, len(plan.bucket_parts(bucket)), codec, pieces)
    marker = {"group": group, "bucket": bucket, "object": f"{name}.bin", **codec.marker(sizes)}
    write_marker(done, marker)  # written last: the object is whole
    return timer.result(codec.result, **marker)

"""Pass 1 of a dedup exchange as a Ray task body (format and request counts: formats/sectioned.py).

`regroup` reads one bucket (a run of consecutive partitions) of each writer of one group, its
index and one range GET per writer (one GET of the whole object when there is one bucket), and
writes it back as one object laid out partition by partition (`grouped`). The
pieces wait in a local temporary file, so memory holds one partition of the group at a time,
not the group's rows. A marker written after the object makes a rerun reuse it (resume).
A step whose writers would only route rows they read (near dedup's band routing) calls
`grouped` itself with pieces made in memory (`span_piece`): its pass 1 is that step.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from pipeline.core.storage import Location
from pipeline.formats import sectioned
from pipeline.run.results import RegroupResult
from pipeline.run.timer import TaskTimer
from pipeline.tokens.pack import PackPlan


def regroup(
    folder: Location, plan: PackPlan, group: int, bucket: int, writers: list[sectioned.Writer]
) -> RegroupResult:
    """The group's rows of the bucket's partitions as one sectioned object in `folder`."""
    span, n, whole = plan.bucket_shards(bucket), plan.shards, plan.buckets == 1
    pieces = (
        bucket_of(w, span, n, whole) for w in writers if w.size > sectioned.index_bytes(n)
    )  # a writer whose object is an index and no rows: nothing to read
    return grouped(folder, plan, group, bucket, pieces)


def grouped(
    folder: Location,
    plan: PackPlan,
    group: int,
    bucket: int,
    pieces: Iterable[tuple[bytes, Sequence[int]]],
    reuse: bool = True,
) -> RegroupResult:
    """Pass 1's object of (group, bucket) from its writers' `pieces`, in writer order: the bytes
    of a writer's sections of the bucket's partitions and that writer's section offsets (n + 1,
    its object's; formats/sectioned.py). Its marker, written last, makes a rerun reuse it
    (unless not `reuse`: the caller needs the pieces consumed)."""
    timer = TaskTimer()
    name = f"g{group:05d}-k{bucket:05d}"
    done = folder / f"{name}.json"
    if reuse and done.exists():  # its marker holds the earlier result's own fields
        return timer.result(RegroupResult, **json.loads(done.read_bytes()), reused=True)
    span = plan.bucket_shards(bucket)
    placed: list[list[int]] = []  # per writer read: its sections' offsets in the spill file
    with tempfile.TemporaryFile() as spill:
        for piece, offsets in pieces:
            if not piece:
                continue  # no rows of this bucket
            at, a = spill.tell(), int(offsets[span.start])
            spill.write(piece)
            placed.append([at + int(o) - a for o in offsets[span.start : span.stop + 1]])
        spill.flush()
        offsets = [0]
        with (folder / f"{name}.bin").atomic_writer() as out:
            for j in range(len(span)):
                data = _merged_section(spill.fileno(), [(p[j], p[j + 1]) for p in placed])
                out.write(data)
                offsets.append(offsets[-1] + len(data))
    marker = {"group": group, "bucket": bucket, "object": f"{name}.bin", "offsets": offsets}
    done.write_bytes(json.dumps(marker).encode())  # written last: the object is whole
    return timer.result(RegroupResult, **marker)


def span_piece(rows: pa.Table, parts: np.ndarray, span: range) -> tuple[bytes, list[int]]:
    """A writer's piece for `grouped` made in memory: the rows of each partition of `span`
    (their partition index `parts`) as sections, and offsets as its object's would be up to the
    span's end (0 before the span: `grouped` reads them from span.start on)."""
    inside = (parts >= span.start) & (parts < span.stop)
    pieces = (
        sectioned.split_rows(rows.filter(pa.array(inside)), parts[inside]) if inside.any() else {}
    )
    data, offsets = [], [0] * (span.start + 1)
    for p in span:
        data.append(sectioned.encode(pieces[p]) if p in pieces else b"")
        offsets.append(offsets[-1] + len(data[-1]))
    return b"".join(data), offsets


def bucket_of(w: sectioned.Writer, span: range, n: int, whole: bool) -> tuple[bytes, list]:
    """The bytes of the bucket's sections of one writer's object and its section offsets: one
    GET of the whole object when there is one bucket, else its index then the range."""
    if whole:
        data = w.loc.read_bytes(0, w.size)  # a range: s3fs would HEAD first for a whole read
        offsets = sectioned.index_of(data, n)
        return data[: int(offsets[-1])], offsets
    offsets = sectioned.index_of(w.loc.read_bytes(w.size - sectioned.index_bytes(n), w.size), n)
    a, b = int(offsets[span.start]), int(offsets[span.stop])
    return (w.loc.read_bytes(a, b) if b > a else b""), offsets


def _merged_section(fd: int, pieces: list[tuple[int, int]]) -> bytes:
    """One partition's section: the writers' sections, in order, as one IPC stream."""
    pieces = [(a, b) for a, b in pieces if b > a]
    if len(pieces) == 1:  # already one stream
        a, b = pieces[0]
        return os.pread(fd, b - a, a)
    tables = [sectioned.decode(os.pread(fd, b - a, a)) for a, b in pieces]
    if not tables:
        return b""
    return sectioned.encode(pa.concat_tables(tables, promote_options="default"))

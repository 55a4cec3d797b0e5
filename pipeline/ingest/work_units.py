"""Work units: the input manifest cut into byte-balanced units (pure: sizes and names only).

Contract: `cut_units(inputs, unit_bytes)` gives `UNITS_SCHEMA` rows, one per piece, in path
order. A file over unit_bytes that can be read by ranges is split into equal pieces, each a unit
alone; small files are packed, and a unit ends at a content-defined cut point, so a unit's id
and pieces do not depend on the number of workers, and an unchanged object keeps its unit.
The work runs over Arrow columns and numpy (one Python step per piece, no object per file).
In full: docs/formats.md, "The listing and its work units".
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

UNITS_SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("path", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("size", pa.int64()),
        ("format", pa.string()),
        ("compression", pa.string()),
        ("etag", pa.string()),
        ("mtime", pa.float64()),
    ]
)
_PIECE_BATCH = 1 << 16  # pieces whose paths are held as Python strings at once


def is_splittable(fmt: str, compression: str) -> bool:
    """Byte ranges can be read independently: uncompressed JSONL (newlines) and Parquet, and
    gzip WARC (a piece reads the gzip members that start in it: ingest/gzip_members.py)."""
    return (compression == "none" and fmt in ("jsonl", "parquet")) or (
        compression == "gzip" and fmt == "warc"
    )


def cut_units(inputs: pa.Table, unit_bytes: int) -> pa.Table:
    """Work units of about `unit_bytes` each from an input manifest (pure: sizes only)."""
    if unit_bytes <= 0:
        raise ValueError(f"unit_bytes must be positive, got {unit_bytes}")
    files = inputs.take(pc.sort_indices(inputs["path"]))  # a stable sort
    file_of, start, end = _pieces(files, unit_bytes)
    size = files["size"].to_numpy(zero_copy_only=False)[file_of]
    paths = files["path"].combine_chunks().take(pa.array(file_of))
    unit_of = _pack(paths, start, end, size, unit_bytes)
    order = np.argsort(unit_of, kind="stable")  # units in the order they close
    file_of, start, end, size, unit_of = (a[order] for a in (file_of, start, end, size, unit_of))
    paths = paths.take(pa.array(order))
    versions = _versions(files).take(pa.array(file_of))
    ids = _unit_ids(paths, start, end, size, versions, unit_of)
    piece_files = files.take(pa.array(file_of))
    return pa.table(
        [
            ids.take(pa.array(unit_of)),  # closing ranks: 0, 1, ... in order
            paths,
            pa.array(start),
            pa.array(end),
            pa.array(size),
            piece_files["format"],
            piece_files["compression"],
            piece_files["etag"],
            piece_files["mtime"],
        ],
        schema=UNITS_SCHEMA,
    )


def _pieces(files: pa.Table, unit_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(file index, start, end) of every piece: one piece per file but for the splittable
    files over unit_bytes, cut into equal pieces, each in (unit_bytes/2, unit_bytes]."""
    sizes = files["size"].to_numpy(zero_copy_only=False).astype(np.int64)
    splittable = pc.or_(
        pc.and_(
            pc.equal(files["compression"], "none"),
            pc.is_in(files["format"], pa.array(["jsonl", "parquet"])),
        ),
        pc.and_(pc.equal(files["compression"], "gzip"), pc.equal(files["format"], "warc")),
    )
    split = np.flatnonzero((sizes > unit_bytes) & splittable.to_numpy(zero_copy_only=False))
    counts = np.ones(len(sizes), np.int64)
    bounds: dict[int, list[int]] = {}
    for i in split.tolist():  # few: each is a file of more than a unit
        size = int(sizes[i])
        n = math.ceil(size / unit_bytes)
        counts[i] = n
        bounds[i] = [size * k // n for k in range(n + 1)]
    file_of = np.repeat(np.arange(len(sizes), dtype=np.int64), counts)
    start, end = np.zeros(len(file_of), np.int64), sizes[file_of].copy()
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    for i, b in bounds.items():
        at = int(first[i])
        start[at : at + len(b) - 1] = b[:-1]
        end[at : at + len(b) - 1] = b[1:]
    return file_of, start, end


def _pack(
    paths: pa.Array, start: np.ndarray, end: np.ndarray, size: np.ndarray, unit_bytes: int
) -> np.ndarray:
    """Each piece's unit, numbered in the order the units close, packing pieces in path order.
    Each piece of a file larger than unit_bytes is a unit alone (split pieces are within
    (unit_bytes/2, unit_bytes]); the unit of small files open before it closes first, so every
    unit is a run of the path order (near dedup orders documents by unit and position:
    run/neardup.node_ids). Small files are packed: a unit closes at a content-defined cut point
    (_cut_after) once it holds unit_bytes/2, and before a file that would take it past
    1.5·unit_bytes. Every unit of small files but the last and those closed by a large file is
    thus within [unit_bytes/2, 1.5·unit_bytes], whatever the mix of file sizes."""
    unit_of = np.empty(len(start), np.int64)
    current: list[int] = []  # pieces of the open unit of small files
    closed, current_bytes = 0, 0
    for first in range(0, len(start), _PIECE_BATCH):
        last = min(first + _PIECE_BATCH, len(start))
        batch_paths = None
        nbytes = (end[first:last] - start[first:last]).tolist()
        sizes, starts = size[first:last].tolist(), start[first:last].tolist()
        for k in range(last - first):
            if sizes[k] > unit_bytes:
                if current:  # units stay runs of the path order (near dedup's node ids)
                    unit_of[current], closed, current, current_bytes = closed, closed + 1, [], 0
                unit_of[first + k], closed = closed, closed + 1
                continue
            if current and current_bytes + nbytes[k] > 1.5 * unit_bytes:
                unit_of[current], closed, current, current_bytes = closed, closed + 1, [], 0
            current.append(first + k)
            current_bytes += nbytes[k]
            if current_bytes * 2 >= unit_bytes:
                if batch_paths is None:
                    batch_paths = paths.slice(first, last - first).to_pylist()
                if _cut_after(batch_paths[k], starts[k], nbytes[k], unit_bytes):
                    unit_of[current], closed, current, current_bytes = closed, closed + 1, [], 0
    if current:
        unit_of[current] = closed
    return unit_of


def _cut_after(path: str, start: int, nbytes: int, unit_bytes: int) -> bool:
    """A cut point that depends on the piece alone: its path hash against its share of a unit.

    The chance of a cut after a piece is 2·size/unit_bytes, so, past the half-unit minimum, units
    end after unit_bytes/2 more bytes on average. Because the decision is local, a file added to
    or removed from the listing moves only the unit boundaries next to it (content-defined
    chunking over the file list), and the other units keep their ids: incremental runs reuse them.
    """
    threshold = min(1.0, 2 * nbytes / unit_bytes) * 2.0**64
    return xxhash.xxh3_64_intdigest(f"{path}\x00{start}".encode()) < threshold


def _versions(files: pa.Table) -> pa.Array:
    """What says each object changed: its ETag, or its mtime and head_tail_xxh3 where the
    store has no ETag."""
    etag = files["etag"].combine_chunks()
    if pc.all(pc.fill_null(pc.not_equal(etag, ""), False)).as_py() is not False:
        return etag  # an object store's listing: every object has one
    fingerprints = (
        files["head_tail_xxh3"].to_pylist()
        if "head_tail_xxh3" in files.column_names
        else [None] * files.num_rows
    )
    versions = []
    for tag, mtime, fingerprint in zip(
        etag.to_pylist(), files["mtime"].to_pylist(), fingerprints, strict=True
    ):
        if tag:
            versions.append(tag)
        elif mtime is None:
            versions.append(None)
        else:
            versions.append(repr(mtime) + ("" if fingerprint is None else f":{fingerprint}"))
    return pa.array(versions, pa.string())


def _unit_ids(
    paths: pa.Array,
    start: np.ndarray,
    end: np.ndarray,
    size: np.ndarray,
    versions: pa.Array,
    unit_of: np.ndarray,
) -> pa.Array:
    """Each unit's id: xxh3-64 of its pieces' lines `path\\0start\\0end\\0size\\0version\\n`."""
    if len(unit_of) == 0:
        return pa.array([], pa.string())
    numbers = [pa.array(column).cast(pa.string()) for column in (start, end, size)]
    keys = pc.binary_join_element_wise(paths, *numbers, pc.fill_null(versions, ""), "\x00")
    lines = pc.binary_join_element_wise(keys, pa.scalar("\n"), "").cast(pa.large_string())
    offsets = np.frombuffer(lines.buffers()[1], np.int64)[
        lines.offset : lines.offset + len(lines) + 1
    ]
    data = memoryview(lines.buffers()[2]) if len(lines) else memoryview(b"")
    cuts = np.concatenate([[0], np.flatnonzero(np.diff(unit_of)) + 1, [len(unit_of)]])  # sorted
    bounds = offsets[cuts].tolist()
    return pa.array(
        [xxhash.xxh3_64_hexdigest(data[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)],
        pa.string(),
    )

"""Dedup row sections (pure): the rows of one part in one writer's object, without an Arrow
stream's framing (a schema message and a record batch's metadata: ~0.6 to 1.6 KB a section,
where at 10 TB a unit's hash object holds ~7 rows a section).

    section: one zstd frame (level 1, content size in its header) of
        header   rows uint32, columns uint16, the schema's fingerprint uint64 (xxh3-64 of its
                 names and types), then per column: buffers uint8, each buffer's size int64
                 (-1: none, e.g. no validity bitmap where a column has no nulls)
        buffers  each column's Arrow buffers as they are (validity, offsets, data), in order
    no rows: no bytes (an empty section).
    A frame may stay uncompressed (`level` None) only where it never reaches storage: a piece
    waiting in pass 1's local spill file (exchange/regroup.row_sections, raw).

The reader names the schema (sections.read_part); a section whose fingerprint is not that
schema's is refused with both named, never read as other columns. Contract: decode_rows(
encode_rows(t), t.schema) equals t; a section's bytes depend only on its rows and schema.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
import zstandard

FORMAT = "cols1"  # in the exchange folders' and the read pass's keys: never read as another
LEVEL = 1  # ids and sources repeat, hashes stay as big at any level: level 1 the fastest


def fingerprint(schema: pa.Schema) -> int:
    text = ";".join(f"{f.name}:{f.type}" for f in schema)
    return xxhash.xxh3_64_intdigest(text.encode())


def encode_rows(table: pa.Table, level: int | None = LEVEL) -> bytes:
    """One section of `table`'s rows (module docstring); no rows, no bytes."""
    n = table.num_rows
    if n == 0:
        return b""
    head = [np.array([n], "<u4").tobytes(), np.array([table.num_columns], "<u2").tobytes()]
    head.append(np.array([fingerprint(table.schema)], "<u8").tobytes())
    body = []
    for column in table.columns:
        array = column.combine_chunks()
        if array.offset:  # a slice: its buffers start before it
            array = pc.take(array, pa.array(np.arange(n)))
        buffers = array.buffers()
        head.append(bytes([len(buffers)]))
        sizes = [-1 if b is None else b.size for b in buffers]
        head.append(np.array(sizes, "<i8").tobytes())
        body += [b.to_pybytes() for b in buffers if b is not None]
    frame = b"".join(head + body)
    return frame if level is None else zstandard.ZstdCompressor(level=level).compress(frame)


def decode_rows(data: bytes | memoryview, schema: pa.Schema, compressed: bool = True) -> pa.Table:
    """The rows of one section, as columns of `schema` (the one it was written with);
    `compressed` False: a frame encode_rows left uncompressed."""
    if not len(data):
        return schema.empty_table()
    raw = memoryview(zstandard.ZstdDecompressor().decompress(data) if compressed else data)
    n = int(np.frombuffer(raw[:4], "<u4")[0])
    columns = int(np.frombuffer(raw[4:6], "<u2")[0])
    written = int(np.frombuffer(raw[6:14], "<u8")[0])
    if columns != len(schema) or written != fingerprint(schema):
        raise ValueError(
            f"a dedup row section of {columns} columns (schema {written:016x}) read as"
            f" {schema.names} ({fingerprint(schema):016x}): written by other code"
        )
    at, layout = 14, []
    for _ in range(columns):
        count = raw[at]
        layout.append(np.frombuffer(raw[at + 1 : at + 1 + 8 * count], "<i8").tolist())
        at += 1 + 8 * count
    arrays = []
    for field, sizes in zip(schema, layout, strict=True):
        buffers = []
        for size in sizes:
            if size < 0:
                buffers.append(None)
            else:
                buffers.append(pa.py_buffer(raw[at : at + size]))
                at += size
        arrays.append(pa.Array.from_buffers(field.type, n, buffers))
    return pa.Table.from_arrays(arrays, schema=schema)

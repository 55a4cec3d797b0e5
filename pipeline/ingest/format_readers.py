"""The per-format readers (JSONL, Parquet, text) and their decompression.

Each reader turns one piece of a file (a row of units.parquet) into documents and quarantine rows
(ingest/records.py) through a `Batches`, yielding a batch whenever it is full; `read_piece`
(ingest/readers.py) picks the reader by the piece's format. The rules for ``row`` and every
quarantine reason are documented with the schemas in ingest/records.py.

A Parquet text column may be ``string``, ``large_string``, ``string_view``, dictionary-encoded
strings, or ``binary`` / ``large_binary`` holding UTF-8 (a value that is not UTF-8 is an
``invalid_utf8`` row). A JSONL line holding a JSON array is read as records, one per element:
element i has ``row`` = the line's offset + i (unique: each element takes at least two bytes).

How giant records and changed objects are handled: pipeline/ingest/read_guards.py.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.core.storage import Location
from pipeline.ingest.read_guards import (
    SCAN_CHUNK,
    Window,
    next_line_start,
    open_checked,
    rest_of_line,
    without_oversize,
)
from pipeline.ingest.records import (
    FILE_LEVEL,
    INVALID_UTF8,
    MALFORMED_JSON,
    MISSING_TEXT_COLUMN,
    NON_STRING_TEXT,
    TOO_LARGE,
    TRUNCATED_FILE,
    Batches,
    Rejected,
    document_fields,
    kept_fields,
)

STREAM_BUFFER = 1 << 20  # bytes pulled per read from the object (s3fs adds its own readahead)
# An uncompressed piece reads through a small buffer so that it pulls little past its range.
_PIECE_BUFFER = 1 << 16


# -- decompression ---------------------------------------------------------------------------
class _ZstdReader(io.RawIOBase):
    """Streaming zstd decoding (all frames) that raises EOFError when the input ends inside a
    frame — zstandard's stream_reader returns a short read there instead."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._frame = self._dctx.decompressobj()
        self._in_frame = False
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(1 << 16)
            if not chunk:
                if self._in_frame:
                    raise EOFError("zstd stream ended before the end of its last frame")
                return 0
            self._pending = memoryview(self._decompress(chunk))
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _decompress(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            out.append(self._frame.decompress(chunk))
            self._in_frame = not self._frame.eof
            chunk = b""
            if self._frame.eof:  # a frame ended: the rest of the chunk starts the next one
                chunk = self._frame.unused_data
                self._frame = self._dctx.decompressobj()
        return b"".join(out)


def _decompressed(raw: Any, compression: str) -> io.BufferedIOBase:
    """A buffered binary stream of the decompressed bytes; raises EOFError on a truncated one."""
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "zstd":
        return io.BufferedReader(_ZstdReader(raw), STREAM_BUFFER)
    return io.BufferedReader(raw, STREAM_BUFFER)


# a .json file holding one pretty-printed document or array fails line by line: say why
JSON_LINES_HINT = (
    " (.json/.jsonl/.ndjson files are read as JSON Lines: one JSON object per line; convert a"
    " multi-line JSON document or array, e.g. with jq -c '.[]')"
)


# -- formats ---------------------------------------------------------------------------------
Fields = tuple[str, str | None]  # (text_field, id_field)
Reader = Callable[[Location, dict, Fields, Batches], Iterator[tuple[pa.Table, pa.Table]]]


_STRICT_FAILED = object()
_INEXACT = (float, list, dict)  # what may hold an integer orjson rounded


def _loads(line: bytes, names: tuple[str | None, ...]) -> Any:
    """The line's JSON value from orjson (3x the standard library on documents, measured), or
    _STRICT_FAILED where json.loads must decide. orjson accepts a subset of what json.loads
    does (valid UTF-8, RFC 8259: no NaN/Infinity, floats within range, nesting under 1024) and
    returns the same values, but for one thing: an integer past 64 bits comes back as a float.
    So a record whose fields in use (`names`: text, id, kept) hold a float, or a list or object
    that may hide one (a rejection's detail prints it), is parsed again by json.loads, which
    keeps the integer exact (tests/unit/test_json_lines.py compares the two on such lines).
    The records and the quarantine reasons are json.loads' as before."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return _STRICT_FAILED
    for record in value if isinstance(value, list) else (value,):
        if isinstance(record, float):
            return _STRICT_FAILED
        if isinstance(record, dict):
            for name in names:
                if name and isinstance(record.get(name), _INEXACT):
                    return _STRICT_FAILED
    return value


_ASCII_SPACES = frozenset(b" \t\n\r\x0b\x0c")  # what bytes.strip() strips


def _add_json_line(out: Batches, line: bytes, offset: int, fields: Fields) -> None:
    if (not line or line[0] in _ASCII_SPACES) and not line.strip():  # strip only copies then
        return
    if offset == 0 and line.startswith(codecs.BOM_UTF8):
        line = line[len(codecs.BOM_UTF8) :]
    record = _loads(line, (*fields, *out.keep))
    strict = record is _STRICT_FAILED
    if strict:  # the standard library says what is wrong, as it always did
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as e:
            out.problem(offset, INVALID_UTF8, str(e))
            return
        except ValueError as e:
            out.problem(offset, MALFORMED_JSON, f"{e}{JSON_LINES_HINT}")
            return
    # a \u escape can name a lone surrogate, which no UTF-8 text holds: only then look for one;
    # orjson refuses a line with one (tests/unit/test_json_lines.py), so only json.loads' can
    escaped = strict and b"\\u" in line
    if isinstance(record, list):  # a JSON array of records on one line
        for i, element in enumerate(record):
            _add_record(out, element, offset + i, fields, escaped)
        return
    _add_record(out, record, offset, fields, escaped)


_NO_ID = object()  # an id field UTF-8 cannot hold: its quarantine row names no id


def _lone_surrogate(values: tuple) -> str | None:
    """The first string among `values` that UTF-8 cannot encode (a lone surrogate from a JSON
    backslash-u escape), described; None when every one can."""
    for value in values:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                return f"a \\u escape names a lone surrogate ({e.reason} at character {e.start})"
    return None


def _add_record(
    out: Batches, record: Any, offset: int, fields: Fields, escaped: bool = False
) -> None:
    if not isinstance(record, dict):
        out.problem(offset, MALFORMED_JSON, f"a JSON {type(record).__name__}, not an object")
        return
    text_field, id_field = fields
    field_id = record.get(id_field) if id_field else None
    try:
        raw_id, text = document_fields(record.get(text_field), field_id)
        kept = kept_fields([record.get(name) for name in out.keep], out.keep)
    except Rejected as r:
        out.problem(offset, r.reason, r.detail, raw_id=field_id)
        return
    bad = _lone_surrogate((text, raw_id, *kept)) if escaped else None
    if bad is not None:
        storable = _lone_surrogate((raw_id,)) is None
        out.problem(offset, INVALID_UTF8, bad, raw_id=raw_id if storable else _NO_ID)
        return
    out.doc(raw_id, offset, text, kept)


def _too_large_detail(size: int, out: Batches) -> str:
    return f"{size} bytes > ingest.max_doc_bytes = {out.max_doc_bytes}"


def _too_large(out: Batches, row: int, size: int) -> None:
    out.problem(row, TOO_LARGE, _too_large_detail(size, out))


def _read_jsonl(
    loc: Location, piece: dict, fields: Fields, out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    start, end = piece["start"], piece["end"]
    compressed = piece["compression"] != "none"
    cap = out.max_doc_bytes
    with open_checked(loc, piece) as raw:
        if compressed:  # never split: the whole stream, to its end
            stream, offset, limit = _decompressed(raw, piece["compression"]), 0, None
        else:
            # A line belongs to the piece holding its first byte: start one byte early and drop
            # everything up to the first newline (just that byte when a line starts at `start`).
            offset = max(start - 1, 0)
            raw.seek(offset)
            window = Window(raw, offset, end)
            stream, limit = io.BufferedReader(window, _PIECE_BUFFER), end
            if start > 0:
                offset = next_line_start(stream, offset, limit)
                if offset is None:
                    return
            window.stop = None  # a line starting in the piece is read to its end
        while limit is None or offset < limit:
            try:
                line = stream.readline(cap + 1)
                if len(line) > cap and not line.endswith(b"\n"):
                    # longer than the cap: measured and skipped, never held whole
                    head, line = len(line), None
                    rest, newline = rest_of_line(stream)
                    _too_large(out, offset, head + rest - newline)
                    offset += head + rest
                    continue
            except EOFError as e:
                out.problem(offset, TRUNCATED_FILE, str(e))
                break
            if not line:
                break
            _add_json_line(out, line, offset, fields)
            offset += len(line)
            if out.full:
                yield out.take()


def _read_text(
    loc: Location, piece: dict, fields: Fields, out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    cap = out.max_doc_bytes
    if piece["compression"] == "none" and piece["size"] > cap:  # from the listing: not opened
        _too_large(out, 0, piece["size"])
        return
    with open_checked(loc, piece) as raw:
        stream = _decompressed(raw, piece["compression"])
        try:
            data = stream.read(cap + 1)
            if len(data) > cap:  # compressed: measured in chunks, never held whole
                size = len(data)
                del data
                while chunk := stream.read(SCAN_CHUNK):
                    size += len(chunk)
                _too_large(out, 0, size)
                return
        except EOFError as e:
            out.problem(0, TRUNCATED_FILE, str(e))
            return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        out.problem(0, INVALID_UTF8, str(e))
        return
    try:
        _, text = document_fields(text, None)
    except Rejected as r:
        out.problem(0, r.reason, r.detail)
        return
    out.doc(None, 0, text)
    yield from ()  # a generator like the other readers; its one document is flushed by the caller


def _is_string_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
    )


def _texts(column: pa.Array) -> list[Any]:
    """Python values of a text column: dictionary decoded; binary values stay bytes (decoded
    per row by the caller, so one invalid value is one invalid_utf8 row)."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column.to_pylist()


def _utf8(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Rejected(INVALID_UTF8, str(e)) from None


def _row_group_first_byte(meta: pq.RowGroupMetaData) -> int:
    starts = []
    for i in range(meta.num_columns):
        col = meta.column(i)
        dictionary = col.dictionary_page_offset if col.has_dictionary_page else None
        starts.append(dictionary if dictionary else col.data_page_offset)
    return min(starts)


def _read_parquet(
    loc: Location, piece: dict, fields: Fields, out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    text_field, id_field = fields
    owns_file_level = piece["start"] == 0
    with open_checked(loc, piece) as raw:
        parquet = pq.ParquetFile(raw)
        schema = parquet.schema_arrow
        rows = parquet.metadata.num_rows  # a file rejected whole counts as all its rows
        if text_field not in schema.names:
            if owns_file_level:
                out.problem(
                    FILE_LEVEL,
                    MISSING_TEXT_COLUMN,
                    f"no column {text_field!r}; columns: {schema.names}",
                    records=rows,
                )
            return
        if not _is_string_type(schema.field(text_field).type):
            if owns_file_level:
                out.problem(
                    FILE_LEVEL,
                    NON_STRING_TEXT,
                    f"column {text_field!r} has type {schema.field(text_field).type}",
                    records=rows,
                )
            return
        has_id = bool(id_field) and id_field in schema.names and id_field != text_field
        columns = [text_field, id_field] if has_id else [text_field]
        columns += [n for n in out.keep if n in schema.names and n not in columns]
        first_row = 0
        for group in range(parquet.num_row_groups):
            meta = parquet.metadata.row_group(group)
            if piece["start"] <= _row_group_first_byte(meta) < piece["end"]:
                batches = parquet.iter_batches(
                    batch_size=out.batch_docs, row_groups=[group], columns=columns
                )
                yield from _parquet_rows(batches, has_id, first_row, out)
            first_row += meta.num_rows


def _parquet_rows(
    batches: Iterator[pa.RecordBatch], has_id: bool, row: int, out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """The documents and problems of one row group's batches (text column first, then the id);
    `row` is the group's first row in the file."""
    for batch in batches:
        column = batch.column(0)
        if pa.types.is_dictionary(column.type):  # sizes of the values, not the codes
            column = column.dictionary_decode()
        column, oversize = without_oversize(column, out.max_doc_bytes)
        texts = _texts(column)
        ids = batch.column(1).to_pylist() if has_id else [None] * len(texts)
        names = batch.schema.names
        kept = [
            batch.column(name).to_pylist() if name in names else [None] * len(texts)
            for name in out.keep
        ]
        for i, (text, raw_id) in enumerate(zip(texts, ids, strict=True)):
            try:
                if i in oversize:
                    raise Rejected(TOO_LARGE, _too_large_detail(oversize[i], out))
                if isinstance(text, bytes):
                    text = _utf8(text)
                doc_id, text = document_fields(text, raw_id)
                values = kept_fields([column[i] for column in kept], out.keep)
            except Rejected as r:
                out.problem(row, r.reason, r.detail, raw_id=raw_id)
            else:
                out.doc(doc_id, row, text, values)
            row += 1
            if out.full:
                yield out.take()


READERS: dict[str, Reader] = {"jsonl": _read_jsonl, "text": _read_text, "parquet": _read_parquet}

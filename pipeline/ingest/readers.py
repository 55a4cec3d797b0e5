"""Format readers: one piece of a work unit in, bounded batches of documents and quarantine out.

`read_piece` reads one row of units.parquet (see pipeline/ingest/listing.py) through `Location`
(streaming: lines one at a time, Parquet one row group at a time) and yields
``(docs, quarantine)`` pairs of at most `batch_docs` rows each.

docs: ``doc_id`` string, ``source`` string (path relative to the input root), ``row`` int64,
``text`` string. ``row`` locates the record: JSONL, the byte offset of the line's first byte in
the decompressed stream (the same however the file is split into pieces); Parquet, the row index
in the file; text, 0. ``doc_id`` is ``str(record[id_field])`` when that is a string or integer,
else ``text.derived_id(source, row)`` when the field is absent or null.

quarantine: ``source``, ``row`` (-1 for a file-level problem), ``reason``, ``detail``.
Reasons (exact strings):

=====================  =======================================================================
malformed_json         a JSONL line is not valid JSON, or not a JSON object
invalid_utf8           a JSONL line or a text file is not valid UTF-8
empty_text             the text is empty or whitespace only
missing_text           the text field is absent or null
non_string_text        the text is not a string (a Parquet text column of another type: row -1)
invalid_id             the id is present but not a non-empty string or an integer
truncated_file         a gzip/zstd stream ends early; row = offset where the lost data begins
                       (text: 0); the records before it are kept
empty_file             the file has zero bytes (row -1)
missing_text_column    a Parquet file has no text column (row -1)
unreadable             the object is missing, forbidden or undecodable (row -1; detail = the
                       error); a transient failure (reset, timeout) fails the unit instead
too_large              the record is larger than ``ingest.max_doc_bytes`` (detail = its size in
                       bytes): JSONL, the line; Parquet, the text value; text, the whole file
                       (decompressed). It is never handed to the tokenizer
changed_during_run     the object's size or ETag (locally: size or mtime) is not the one listed
                       when the piece is read (row = the piece's first byte; detail = both). Its
                       records read from that piece are dropped; a rerun lists the new object
=====================  =======================================================================

Whitespace-only JSONL lines are not records and are skipped. File-level findings of a Parquet
file cut into several pieces are reported once, by the piece starting at byte 0.

A file rejected whole counts as the records it held, so a bad file can never pass as one bad
record: ``records`` is how many input records a quarantine row stands for (1 for a record; for a
file-level row, the Parquet file's rows from its metadata, or the non-blank lines of a JSONL
piece whose raw bytes are UTF-8 text, e.g. plain JSONL named ``.gz``). Where the records cannot
be counted (a forbidden or undecodable object) the row counts 1 record and ``bytes`` holds the
piece's size (0 otherwise): the run then fails when either the quarantined records or these
bytes exceed ``ingest.max_error_rate`` of the records read or of the bytes listed.

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
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.core.storage import Location
from pipeline.core.text import derived_id
from pipeline.ingest.read_guards import (
    SCAN_CHUNK,
    ObjectChanged,
    Window,
    next_line_start,
    open_checked,
    rest_of_line,
    without_oversize,
)

DOCS_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("row", pa.int64()),
        ("text", pa.string()),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("row", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("records", pa.int64()),
        ("bytes", pa.int64()),
    ]
)

MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
EMPTY_TEXT = "empty_text"
MISSING_TEXT = "missing_text"
NON_STRING_TEXT = "non_string_text"
INVALID_ID = "invalid_id"
TRUNCATED_FILE = "truncated_file"
EMPTY_FILE = "empty_file"
MISSING_TEXT_COLUMN = "missing_text_column"
UNREADABLE = "unreadable"
TOO_LARGE = "too_large"
CHANGED_DURING_RUN = "changed_during_run"
FILE_LEVEL = -1

_STREAM_BUFFER = 1 << 20  # bytes pulled per read from the object (s3fs adds its own readahead)
# An uncompressed piece reads through a small buffer so that it pulls little past its range.
_PIECE_BUFFER = 1 << 16
DEFAULT_MAX_DOC_BYTES = 16 * 2**20
_DETAIL_CHARS = 300


class Rejected(Exception):
    """A record that cannot become a document: `reason` is one of the strings above."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason, self.detail = reason, detail


def document_fields(text: Any, raw_id: Any) -> tuple[str | None, str]:
    """(id or None when the record has none, text) of one record's field values; absent fields
    are passed as None. Raises Rejected. Pure; shared by every format so that rules agree."""
    if text is None:
        raise Rejected(MISSING_TEXT, "text field is absent or null")
    if not isinstance(text, str):
        raise Rejected(NON_STRING_TEXT, f"text is {type(text).__name__}")
    if not text.strip():
        raise Rejected(EMPTY_TEXT, f"{len(text)} whitespace characters")
    if raw_id is None:
        return None, text
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        raise Rejected(INVALID_ID, f"id is {type(raw_id).__name__}: {str(raw_id)[:80]}")
    return str(raw_id), text


class _Batches:
    """Accumulates documents and quarantine rows of one source; `take` empties it."""

    def __init__(
        self, source: str, batch_docs: int, max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES
    ) -> None:
        self.source, self.batch_docs = source, batch_docs
        self.max_doc_bytes = max_doc_bytes  # the readers' cap on one record
        self._ids: list[str] = []
        self._rows: list[int] = []
        self._texts: list[str] = []
        self._bad: list[tuple[int, str, str, int, int]] = []
        self.seen = 0  # documents and problems so far: a failing file's records are not recounted

    def doc(self, raw_id: str | None, row: int, text: str) -> None:
        self.seen += 1
        self._ids.append(raw_id if raw_id is not None else derived_id(self.source, row))
        self._rows.append(row)
        self._texts.append(text)

    def problem(
        self, row: int, reason: str, detail: str, records: int = 1, nbytes: int = 0
    ) -> None:
        self.seen += 1
        self._bad.append((row, reason, detail[:_DETAIL_CHARS], max(records, 1), nbytes))

    @property
    def full(self) -> bool:
        return max(len(self._ids), len(self._bad)) >= self.batch_docs

    def __bool__(self) -> bool:
        return bool(self._ids or self._bad)

    def take(self) -> tuple[pa.Table, pa.Table]:
        docs = pa.table(
            [self._ids, [self.source] * len(self._ids), self._rows, self._texts], schema=DOCS_SCHEMA
        )
        rows, reasons, details, records, nbytes = (
            zip(*self._bad, strict=True) if self._bad else ((), (), (), (), ())
        )
        bad = pa.table(
            [
                [self.source] * len(rows),
                list(rows),
                list(reasons),
                list(details),
                list(records),
                list(nbytes),
            ],
            schema=QUARANTINE_SCHEMA,
        )
        self._ids, self._rows, self._texts, self._bad = [], [], [], []
        return docs, bad


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
        return io.BufferedReader(_ZstdReader(raw), _STREAM_BUFFER)
    return io.BufferedReader(raw, _STREAM_BUFFER)


# -- formats ---------------------------------------------------------------------------------
Fields = tuple[str, str | None]  # (text_field, id_field)
_Reader = Callable[[Location, dict, Fields, _Batches], Iterator[tuple[pa.Table, pa.Table]]]


def _add_json_line(out: _Batches, line: bytes, offset: int, fields: Fields) -> None:
    if not line.strip():
        return
    if offset == 0 and line.startswith(codecs.BOM_UTF8):
        line = line[len(codecs.BOM_UTF8) :]
    try:
        decoded = line.decode("utf-8")
    except UnicodeDecodeError as e:
        out.problem(offset, INVALID_UTF8, str(e))
        return
    try:
        record = json.loads(decoded)
    except ValueError as e:
        out.problem(offset, MALFORMED_JSON, str(e))
        return
    if isinstance(record, list):  # a JSON array of records on one line
        for i, element in enumerate(record):
            _add_record(out, element, offset + i, fields)
        return
    _add_record(out, record, offset, fields)


def _add_record(out: _Batches, record: Any, offset: int, fields: Fields) -> None:
    if not isinstance(record, dict):
        out.problem(offset, MALFORMED_JSON, f"a JSON {type(record).__name__}, not an object")
        return
    text_field, id_field = fields
    try:
        raw_id, text = document_fields(
            record.get(text_field), record.get(id_field) if id_field else None
        )
    except Rejected as r:
        out.problem(offset, r.reason, r.detail)
        return
    out.doc(raw_id, offset, text)


def _too_large_detail(size: int, out: _Batches) -> str:
    return f"{size} bytes > ingest.max_doc_bytes = {out.max_doc_bytes}"


def _too_large(out: _Batches, row: int, size: int) -> None:
    out.problem(row, TOO_LARGE, _too_large_detail(size, out))


def _read_jsonl(
    loc: Location, piece: dict, fields: Fields, out: _Batches
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
    loc: Location, piece: dict, fields: Fields, out: _Batches
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
    loc: Location, piece: dict, fields: Fields, out: _Batches
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
    batches: Iterator[pa.RecordBatch], has_id: bool, row: int, out: _Batches
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
        for i, (text, raw_id) in enumerate(zip(texts, ids, strict=True)):
            try:
                if i in oversize:
                    raise Rejected(TOO_LARGE, _too_large_detail(oversize[i], out))
                if isinstance(text, bytes):
                    text = _utf8(text)
                doc_id, text = document_fields(text, raw_id)
            except Rejected as r:
                out.problem(row, r.reason, r.detail)
            else:
                out.doc(doc_id, row, text)
            row += 1
            if out.full:
                yield out.take()


# What retrying cannot fix: the object is missing, forbidden or undecodable. Anything else (a
# connection reset or timeout left after the storage layer's retries) fails the unit instead, so
# that an outage never turns into silently quarantined input; a rerun resumes the unit.
PERMANENT_ERRORS = (
    PermissionError,
    FileNotFoundError,
    IsADirectoryError,
    ValueError,
    EOFError,
    gzip.BadGzipFile,
    zlib.error,
    zstandard.ZstdError,
    pa.ArrowException,
)

def _count_records(loc: Location, piece: Any) -> int | None:
    """Records of a piece that could not be read as its format says, or None where they cannot
    be counted: a Parquet file's rows from its metadata; a JSONL piece's non-blank lines when its
    raw bytes are UTF-8 text (e.g. plain JSONL named .gz). See the module docstring."""
    try:
        if piece["format"] == "parquet":
            with loc.open_read() as raw:
                return pq.ParquetFile(raw).metadata.num_rows if piece["start"] == 0 else None
        if piece["format"] == "jsonl":
            return _count_lines(loc, piece["start"], piece["end"]) or None
    except PERMANENT_ERRORS:  # UnicodeDecodeError included (a ValueError): not text
        return None
    return None


def _count_lines(loc: Location, start: int, end: int) -> int:
    """Non-blank lines of bytes [start, end), streamed; UnicodeDecodeError if not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    count, blank = 0, True
    with loc.open_read() as raw:
        raw.seek(start)
        left = end - start
        while left > 0:
            chunk = raw.read(min(_STREAM_BUFFER, left))
            if not chunk:
                break
            left -= len(chunk)
            text = decoder.decode(chunk, final=left <= 0)
            lines = text.split("\n")
            for i, part in enumerate(lines):
                blank = blank and not part.strip()
                if i < len(lines) - 1:  # a newline ends this line
                    count += not blank
                    blank = True
    return count + (not blank)


_READERS: dict[str, _Reader] = {"jsonl": _read_jsonl, "text": _read_text, "parquet": _read_parquet}


def changed_quarantine(changed: ObjectChanged, piece_bytes: int) -> pa.Table:
    """The one quarantine row that stands for a piece whose object changed: its records cannot
    be counted (the object is no longer the one listed), so it counts 1 record and its bytes."""
    detail = changed.detail[:_DETAIL_CHARS]
    return pa.table(
        [[changed.source], [changed.row], [CHANGED_DURING_RUN], [detail], [1], [piece_bytes]],
        schema=QUARANTINE_SCHEMA,
    )


def read_piece(
    root: Location,
    piece: Any,
    text_field: str,
    id_field: str | None,
    batch_docs: int = 4096,
    max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES,
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """Documents and quarantine rows of one piece (a row of units.parquet), in bounded batches.

    Raises ObjectChanged when the object is not the one listed: the caller drops what this piece
    yielded and records ``changed_quarantine(exc)`` instead."""
    source = piece["path"]
    out = _Batches(source, batch_docs, max_doc_bytes)
    if piece["size"] == 0:
        out.problem(FILE_LEVEL, EMPTY_FILE, "the file has zero bytes")
        yield out.take()
        return
    reader = _READERS[piece["format"]]
    try:
        yield from reader(root / source, piece, (text_field, id_field), out)
    except PERMANENT_ERRORS as e:  # the object itself is bad or forbidden: reported, not raised
        whole = piece["start"] == 0 and piece["end"] == piece["size"]
        where = "" if whole else f" (bytes {piece['start']}-{piece['end']})"
        records = None if out.seen else _count_records(root / source, piece)
        out.problem(
            FILE_LEVEL,
            UNREADABLE,
            f"{type(e).__name__}: {e}{where}",
            records=records or 1,
            nbytes=0 if records else piece["end"] - piece["start"],
        )
    if out:
        yield out.take()

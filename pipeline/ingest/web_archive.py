"""Web archives (.warc, .warc.gz, .warc.wet.gz) and HTML files: records in, extracted text out.

WARC is parsed by fastwarc (resiliparse's WARC library: 3.8x warcio's records per second on
the same per-record gzip file, measured); HTTP bodies are decoded by ingest/http_payload.py and
their text extracted by the configured engine (pipeline/extract) inside the read task, so
curation, dedup and tokenizing see the extracted text.

Which records become documents: `response` records holding an HTTP message with a 2xx status and
an HTML Content-Type (text/html, application/xhtml+xml), and `conversion` records (Common
Crawl's WET text, taken as it is). Every other record is counted in `Batches.records` by what
it was (RECORD_KINDS below), never dropped silently; the run adds them up per source in the
manifest's `records`. A document's id is its WARC-Record-ID; it offers the fields `url`
(WARC-Target-URI) and `date` (WARC-Date) to `keep_fields`.

`row` of a WARC record: in a .warc.gz, the offset of the gzip member holding it plus the
record's offset in that member's decompressed bytes (Common Crawl's layout, a member per
record: the member's offset, one range GET away); in an uncompressed (or zstd) WARC, the
record's offset in the decompressed file. A piece of a .warc.gz reads the members that start in
it (gzip_members.py), so every record belongs to one piece whatever the unit size; a
whole-stream file is one member, read by its first piece. Fast path (_own_members): one
fastwarc GzipReader over the piece while every record is a member of its own; the member path
takes the rest (the file's end, several records a member, damage), with the same rows,
documents and quarantine rows (tests/unit/test_warc_fast_path.py).
Each record's seconds are added up in Batches.seconds by part (PARTS): bench extract splits
the read pass by them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from time import perf_counter
from typing import Any

import pyarrow as pa
from fastwarc.stream_io import GzipReader
from fastwarc.warc import ArchiveIterator

from pipeline.core.storage import Location
from pipeline.ingest.format_readers import _decompressed
from pipeline.ingest.gzip_members import (
    PROBE_BYTES,
    WARC_MAGIC,
    Member,
    find_member,
    member_head,
)
from pipeline.ingest.http_payload import TooLarge, Undecodable, decoded_body, html_text, is_html
from pipeline.ingest.read_guards import SCAN_CHUNK, open_checked
from pipeline.ingest.records import (
    CORRUPT_RECORD,
    TOO_LARGE,
    TRUNCATED_FILE,
    UNDECODABLE_PAYLOAD,
    Batches,
)

# What a record that is not a document was (Batches.records keys), and one note on documents:
# the record types by name (warcinfo, request, metadata, revisit, resource, continuation,
# unknown), then
NOT_HTTP = "response_not_http"  # a response record that holds no HTTP message
NOT_HTML = "not_html"  # an HTTP response whose Content-Type is not HTML
NO_TEXT = "no_text"  # the extraction left no text
STATUS = "status_{}xx"  # an HTTP status outside 2xx, by class: status_3xx, status_4xx, ...
DOCUMENTS = "documents"  # records that entered the documents (documents in), for the check
QUARANTINED = "quarantined"  # records that were quarantined (each also in docs_in)
CRAWLER_TRUNCATED = "warc_truncated"  # of those: the crawler cut the payload (WARC-Truncated)
WARC_FIELDS = ("url", "date")  # what a WARC document offers keep_fields
# The reader's parts, timed per record into Batches.seconds (bench extract splits the read pass
# by them): fastwarc's parsing with reading the record and its payload (gzip members included),
# the HTTP body's codings and charset, the HTML extraction
PARSE, DECODE, EXTRACT = "warc_parse", "http_decode", "extract"
PARTS = (PARSE, DECODE, EXTRACT)


def _warc_headers(record: Any) -> dict[str, str]:
    """The record's WARC headers as a dict: one call into fastwarc (each of its lookups costs
    ~15-30 us, more than the rest of a small record's parse)."""
    return dict(record.headers.items())


def _fields(headers: dict[str, str]) -> dict[str, str | None]:
    return {"url": headers.get("WARC-Target-URI"), "date": headers.get("WARC-Date")}


def _quarantine(out: Batches, row: int, reason: str, detail: str, **more: Any) -> None:
    """A quarantine row (records.py), also counted among the records by kind."""
    out.records[QUARANTINED] += 1
    out.problem(row, reason, detail, **more)


def _kept(out: Batches, fields: dict[str, str | None]) -> tuple[str | None, ...]:
    return tuple(fields.get(name) for name in out.keep)


def _document(out: Batches, raw_id: str | None, row: int, text: str, fields: dict) -> None:
    if not text or text.isspace():
        out.records[NO_TEXT] += 1
        return
    out.records[DOCUMENTS] += 1
    out.doc(raw_id, row, text, _kept(out, fields))


class _Cut(Exception):
    """A record's payload ends before its Content-Length: the stream ended inside it."""

    def __init__(self, detail: str, raw_id: str | None) -> None:
        super().__init__(detail)
        self.detail, self.raw_id = detail, raw_id


def _payload(out: Batches, record: Any, what: str) -> bytes:
    """The record's payload (`what`: how its detail names the bytes); _Cut when cut short."""
    began = perf_counter()
    body = record.reader.read(record.content_length)
    out.seconds[PARSE] += perf_counter() - began
    if len(body) < record.content_length:
        raise _Cut(f"the file ends inside this record: {len(body)} of {record.content_length}"
                   f" {what}", record.record_id)  # fmt: skip
    return body


def _whole(out: Batches, record: Any) -> bool:
    """Whether the stream holds all of a record whose payload is not kept: the payload
    consumed in fastwarc's buffers (never held) up to its Content-Length. fastwarc yields a
    record cut inside its header block too, with no Content-Length field (length 0)."""
    began = perf_counter()
    length = record.content_length
    whole = record.reader.consume() >= length and (length > 0 or "Content-Length" in record.headers)
    out.seconds[PARSE] += perf_counter() - began
    return whole


def _counted(out: Batches, record: Any, kind: str) -> None:
    """A record that is no document, counted under `kind` when the stream holds all of it;
    _Cut when it does not (one cut record, one quarantine row, never also a kind)."""
    if not _whole(out, record):
        if record.content_length == 0:  # its id and type may be cut too
            raise _Cut("the file ends inside this record's header", None)
        raise _Cut(f"the file ends inside this {kind} record's payload", record.record_id)
    out.records[kind] += 1


def _too_large(out: Batches, record: Any, row: int) -> bool:
    """Whether the record's payload is over ingest.max_doc_bytes: then it is never read (fastwarc
    skips it in buffers) and is one too_large row; _Cut when the stream ends inside it."""
    cap = out.max_doc_bytes
    if record.content_length <= cap:
        return False
    if not _whole(out, record):
        raise _Cut(f"the file ends inside this record (over ingest.max_doc_bytes = {cap})",
                   record.record_id)  # fmt: skip
    _quarantine(out, row, TOO_LARGE, f"{record.content_length} bytes > ingest.max_doc_bytes"
                f" = {cap}", raw_id=record.record_id)  # fmt: skip
    return True


def _response(out: Batches, record: Any, row: int) -> None:
    """One response record: a document, a problem or a counted kind; _Cut when its payload
    was cut by the end of the stream (the file is truncated)."""
    if not record.is_http:
        _counted(out, record, NOT_HTTP)
        return
    status = record.http_headers.status_code or 0
    if not 200 <= status < 300:
        _counted(out, record, STATUS.format(status // 100))
        return
    if not is_html(record.http_content_type):
        _counted(out, record, NOT_HTML)
        return
    rid = record.record_id
    cap = out.max_doc_bytes
    if _too_large(out, record, row):
        return
    body = _payload(out, record, "payload bytes")
    read = perf_counter()
    headers = record.http_headers
    try:
        body = decoded_body(
            body, headers.get("Transfer-Encoding"), headers.get("Content-Encoding"), cap
        )
    except TooLarge as e:
        _quarantine(out, row, TOO_LARGE, f"decoded body over {e.size - 1} bytes >"
                    f" ingest.max_doc_bytes = {cap}", raw_id=rid)  # fmt: skip
        return
    except Undecodable as e:
        _quarantine(out, row, UNDECODABLE_PAYLOAD, str(e), raw_id=rid)
        return
    finally:
        out.seconds[DECODE] += perf_counter() - read
    warc = _warc_headers(record)
    if warc.get("WARC-Truncated"):
        out.records[CRAWLER_TRUNCATED] += 1
    began = perf_counter()
    html = html_text(body, record.http_charset)
    decoded = perf_counter()
    text = out.extract(html)
    out.seconds[DECODE] += decoded - began
    out.seconds[EXTRACT] += perf_counter() - decoded
    _document(out, rid, row, text, _fields(warc))


def _conversion(out: Batches, record: Any, row: int) -> None:
    """A WET conversion record: its payload is the document's text (UTF-8), not extracted;
    _Cut as _response."""
    if _too_large(out, record, row):
        return
    body = _payload(out, record, "bytes")
    read = perf_counter()
    text = html_text(body, "utf-8")
    out.seconds[DECODE] += perf_counter() - read
    _document(out, record.record_id, row, text, _fields(_warc_headers(record)))


class _Parser:
    """fastwarc iterators with one set of options: the first made, the others restarted from
    it (a member per record makes one per record: restarting costs less than half)."""

    def __init__(self) -> None:
        self._first: ArchiveIterator | None = None

    def __call__(self, stream: Any) -> ArchiveIterator:
        if self._first is None:
            self._first = ArchiveIterator(
                stream, parse_http=True, auto_decode="none", stream_detect=False
            )
            return self._first
        return self._first.restart(stream)


class InvalidRecord(Exception):
    """fastwarc found bytes that are not a WARC record; `row`: just past the last record read
    (`base` when none was): a row no record has."""

    def __init__(self, row: int, detail: str) -> None:
        super().__init__(detail)
        self.row, self.detail = row, detail


def _record(out: Batches, record: Any, row: int) -> None:
    """One record, whatever its kind; _Cut when the stream ended inside it (header or payload)."""
    kind = str(record.record_type)
    if kind == "response":
        _response(out, record, row)
    elif kind == "conversion":
        _conversion(out, record, row)
    else:
        _counted(out, record, kind)


def _records(
    stream: Any, base: int, out: Batches, parser: _Parser | None = None, skip: int = 0
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """The records of a (decompressed) WARC stream; `row` = base + the record's offset in it;
    the first `skip` records passed over (read already). Returns whether a record was cut by
    the stream's end; raises InvalidRecord."""
    records, row, seconds = iter((parser or _Parser())(stream)), None, out.seconds
    while True:
        began = perf_counter()
        try:
            record = next(records)
        except StopIteration:
            seconds[PARSE] += perf_counter() - began
            return False
        except OSError as e:
            if type(e) is not OSError:  # the stream's own error (I/O), not fastwarc's verdict
                raise
            where = base if row is None else row + 1
            after = "no record" if row is None else f"the record at row {row}"
            raise InvalidRecord(where, f"{e} (after {after})") from None
        seconds[PARSE] += perf_counter() - began
        row = base + record.stream_pos
        if skip:
            skip -= 1
            continue
        try:
            _record(out, record, row)
        except _Cut as cut:
            _quarantine(out, row, TRUNCATED_FILE, cut.detail, raw_id=cut.raw_id)
            return True
        if out.full:
            yield out.take()


def _own_members(raw: Any, at: int, end: int, out: Batches) -> Iterator[tuple[pa.Table, pa.Table]]:
    """The fast path of a .warc.gz piece from the member at `at`: fastwarc's GzipReader over
    the file, records while each is a gzip member of its own (Common Crawl's layout) whose
    offset is before `end` (fastwarc gives a record's member offset as its stream_pos).
    Returns None at the piece's end, else where the member path (_gzip_members) goes on:
    (the offset of a member, how many of its records were read here). Anything this path
    cannot vouch for is left to the member path from the last member read: the end of the
    file (a cut member ends silently here), a member holding more records (a whole-stream
    gzip), a record fastwarc or the stream reject, a payload cut short, so that every row,
    document and quarantine row is the member path's (tests/unit/test_web_archive.py)."""
    raw.seek(at)
    stream = GzipReader(raw)
    records, seconds = iter(_Parser()(stream)), out.seconds
    last, taken = at, 0  # the member of the last record read, and whether one was read
    while True:
        began = perf_counter()
        try:
            record = next(records)
        except (StopIteration, OSError):
            return last, taken
        finally:
            seconds[PARSE] += perf_counter() - began
        member = stream.frame_start_position()
        alone = record.stream_pos == member and (member != last if taken else member == at)
        if not alone:
            return last, taken
        if member >= end:
            return None
        try:
            _record(out, record, member)
        except (_Cut, OSError):  # before anything of the record was counted
            return member, 0
        last, taken = member, 1
        if out.full:
            yield out.take()


def _not_a_warc(head: bytes, what: str) -> ValueError:
    return ValueError(f"not a WARC file: {what} starts with {head[:16]!r}, not {WARC_MAGIC!r}")


def _gzip_members(
    raw: Any, piece: dict, out: Batches, fast: bool = True
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """The records of the gzip members that start in the piece (module doc); a corrupt member
    is one corrupt_record row and reading goes on at the next member. Each member is
    decompressed here (Member) and parsed by its own fastwarc iterator, after the fast path
    (_own_members, unless not `fast`) has read what it can vouch for."""
    start, end, size = piece["start"], piece["end"], piece["size"]
    if start == 0:
        head = raw.read(PROBE_BYTES)
        if not member_head(head).startswith(WARC_MAGIC):
            raise _not_a_warc(member_head(head) or head, "its first gzip member")
        at: int | None = 0
    else:
        at = find_member(raw, start, end)
    skip = 0
    if at is not None and fast:
        handover = yield from _own_members(raw, at, end, out)
        if handover is None:
            return
        at, skip = handover
    pending, parser = b"", _Parser()
    if at is not None:
        raw.seek(at)
    while at is not None and at < end:
        member, passed, skip = Member(raw, at, pending), skip, 0
        try:
            cut = yield from _records(member, at, out, parser, passed)
        except (zlib.error, InvalidRecord) as e:
            row = e.row if isinstance(e, InvalidRecord) else at
            _quarantine(
                out, row, CORRUPT_RECORD, f"gzip member at byte {at}: {type(e).__name__}: {e}"
            )
            at, pending = find_member(raw, at + 1, end), b""
            if at is not None:
                raw.seek(at)
            continue
        if member.truncated:
            if not cut:  # cut inside a record's header: fastwarc yields nothing of it
                _quarantine(out, at + member.out if member.out else at, TRUNCATED_FILE,
                            f"the file ends inside the gzip member at byte {at}")  # fmt: skip
            return
        at, pending = member.end, member.rest
        if at >= size:
            return


def read_warc(
    loc: Location, piece: dict, fields: Any, out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """A piece of a .warc, .warc.gz or .warc.zst (module doc). A file that does not start with
    a WARC record raises ValueError: read_piece makes it one file-level unreadable row."""
    with open_checked(loc, piece) as raw:
        if piece["compression"] == "gzip":
            yield from _gzip_members(raw, piece, out)
            return
        stream = _decompressed(raw, piece["compression"])
        head = stream.peek(len(WARC_MAGIC))[: len(WARC_MAGIC)]
        if head != WARC_MAGIC:
            raise _not_a_warc(head, "the file")
        try:
            yield from _records(stream, 0, out)
        except InvalidRecord as e:  # no member to go on at: the rest of the file is lost
            _quarantine(out, e.row, CORRUPT_RECORD, f"{e.detail}; the rest of the file is not read",
                        nbytes=max(piece["size"] - e.row, 0))  # fmt: skip
        except EOFError as e:  # a zstd stream cut short
            _quarantine(out, piece["size"], TRUNCATED_FILE, str(e))


def read_html(
    loc: Location, piece: dict, fields: Any, out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """A .html/.htm file (possibly compressed): one document, id derived from its path, its
    text extracted like a WARC response's (charset: BOM, <meta>, detection)."""
    cap = out.max_doc_bytes
    with open_checked(loc, piece) as raw:
        stream = _decompressed(raw, piece["compression"])
        try:
            data = stream.read(cap + 1)
            if len(data) > cap:  # measured in chunks, never held whole
                size = len(data)
                del data
                while chunk := stream.read(SCAN_CHUNK):
                    size += len(chunk)
                _quarantine(out, 0, TOO_LARGE, f"{size} bytes > ingest.max_doc_bytes = {cap}")
                return
        except EOFError as e:
            _quarantine(out, 0, TRUNCATED_FILE, str(e))
            return
    began = perf_counter()
    html = html_text(data)
    decoded = perf_counter()
    text = out.extract(html)
    out.seconds[DECODE] += decoded - began
    out.seconds[EXTRACT] += perf_counter() - decoded
    _document(out, None, 0, text, {})
    yield from ()


def first_document(loc: Location, piece: dict) -> dict[str, Any]:
    """{'fields': {WARC-Record-ID, url, date, page text}} of the first document of a web
    archive or HTML file (what `run --dry-run` shows; extracted with extract's defaults), or
    {'problem': why}; reads no further than that document."""
    from pipeline.extract.config import ExtractConfig
    from pipeline.extract.html import extractor

    out = Batches(piece["path"], 1, extract=extractor(ExtractConfig()), keep=WARC_FIELDS)
    reader = read_warc if piece["format"] == "warc" else read_html
    for docs, bad in reader(loc, piece, None, out):
        if docs.num_rows:
            doc = docs.to_pylist()[0]
            return {"fields": {"WARC-Record-ID": doc["doc_id"], "url": doc["keep.url"],
                               "date": doc["keep.date"], "page text": doc["text"]}}  # fmt: skip
        if bad.num_rows:
            return {"problem": f"{bad['reason'][0]}: {bad['detail'][0]}"}
    docs, _ = out.take()
    if docs.num_rows:  # an HTML file's one document, flushed by the caller elsewhere
        return {"fields": {"page text": docs["text"][0].as_py()}}
    return {"problem": "no documents"}

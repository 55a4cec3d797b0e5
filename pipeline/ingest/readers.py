"""Reading a work unit's piece: one piece in, bounded batches of documents and quarantine out.

`read_piece` reads one row of units.parquet (see pipeline/ingest/listing.py) through `Location`
(streaming: lines one at a time, Parquet one row group at a time) and yields
``(docs, quarantine)`` pairs of at most `batch_docs` rows each.

The readers themselves are in ingest/format_readers.py; what they yield (the schemas and the
quarantine reasons) in ingest/records.py. Here: the dispatch, and a file that cannot be read as
its format says becomes one ``unreadable`` row counting the records it held (records.py).
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.core.storage import Location
from pipeline.extract.config import EXTRACTED_FORMATS
from pipeline.ingest.format_readers import READERS, STREAM_BUFFER
from pipeline.ingest.records import (
    DEFAULT_MAX_DOC_BYTES,
    EMPTY_FILE,
    FILE_LEVEL,
    UNREADABLE,
    Batches,
)
from pipeline.ingest.web_archive import read_html, read_warc

_READERS = {**READERS, "warc": read_warc, "html": read_html}
_EXTRACTED = EXTRACTED_FORMATS  # formats whose text is extracted from HTML (pipeline/extract)

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
    raw bytes are UTF-8 text (e.g. plain JSONL named .gz). See ingest/records.py."""
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
            chunk = raw.read(min(STREAM_BUFFER, left))
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


def read_piece(
    root: Location,
    piece: Any,
    text_field: str,
    id_field: str | None,
    batch_docs: int = 4096,
    max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES,
    keep_fields: tuple[str, ...] = (),
    extract: Callable[[str], str] | None = None,
    records: Counter | None = None,
    seconds: Counter | None = None,
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """Documents and quarantine rows of one piece (a row of units.parquet), in bounded batches.

    `extract`: HTML to text for web archives and .html files (default: resiliparse's main
    content, pipeline/extract); `records`: where a web archive's records that are not documents
    are counted by kind (ingest/web_archive.py); `seconds`: where the web archive reader adds
    the seconds of its parts (web_archive.PARTS: parsing, HTTP decoding, extraction).

    Raises ObjectChanged when the object is not the one listed: the caller drops what this piece
    yielded and records ``changed_quarantine(exc)`` instead."""
    source = piece["path"]
    if extract is None and piece["format"] in _EXTRACTED:
        from pipeline.extract.config import ExtractConfig
        from pipeline.extract.html import extractor

        extract = extractor(ExtractConfig())
    out = Batches(source, batch_docs, max_doc_bytes, keep_fields, extract)
    try:
        yield from _read(root, piece, (text_field, id_field), out)
    finally:
        if records is not None:
            records.update(out.records)
        if seconds is not None:
            seconds.update(out.seconds)


def _read(
    root: Location, piece: Any, fields: tuple[str, str | None], out: Batches
) -> Iterator[tuple[pa.Table, pa.Table]]:
    source = piece["path"]
    if piece["size"] == 0:
        out.problem(FILE_LEVEL, EMPTY_FILE, "the file has zero bytes")
        yield out.take()
        return
    reader = _READERS[piece["format"]]
    try:
        yield from reader(root / source, piece, fields, out)
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

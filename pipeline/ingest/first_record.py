"""The first record of an input file, read without reading the rest: for `run --dry-run`.

JSONL: the first non-blank line (`first_line`: uncompressed files in ranges of a few KiB,
compressed ones decompressed as the readers do; at most ingest.max_doc_bytes); Parquet: the
first row of the first row group; text: the file is one document, so `{"text": ...}` with the
first bytes. Never raises for bad content: the reason comes back instead, so a dry run
can print it next to the file (a real run quarantines the same record with the same reason).
The run's field probe (ingest/field_probe.py) reads the same first line.
"""

from __future__ import annotations

import json
import lzma
import zlib
from typing import Any

import pyarrow.parquet as pq
import zstandard

from pipeline.core.storage import Location
from pipeline.ingest.format_readers import _decompressed

PREVIEW_CHARS = 60  # of a text value shown in the preview
# what reading a file that is not what its name says raises (a `.gz` that is not gzip raises
# BadGzipFile, an OSError)
UNREADABLE = (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError, zstandard.ZstdError)
PROBE_BYTES = 1 << 13  # the first range read of an uncompressed JSONL file


def first_record(loc: Location, fmt: str, compression: str, max_bytes: int) -> dict[str, Any]:
    """{'fields': {name: preview}} of the file's first record, or {'problem': why}."""
    try:
        if fmt in ("warc", "html"):  # the first document, extracted as a run would
            from pipeline.ingest.web_archive import first_document

            size = loc.fs.info(loc.path)["size"]
            piece = {
                "path": loc.path.rsplit("/", 1)[-1],
                "start": 0,
                "end": size,
                "size": size,
                "format": fmt,
                "compression": compression,
                "etag": None,
                "mtime": None,
            }
            return first_document(loc, piece)
        if fmt == "jsonl":
            line = first_line(loc, compression, max_bytes)
            return {"problem": "no records"} if line is None else _json_fields(line)
        with loc.open_read() as raw:
            if fmt == "parquet":
                parquet = pq.ParquetFile(raw)
                if parquet.metadata.num_rows == 0:
                    return {"problem": "no rows"}
                batch = next(parquet.iter_batches(batch_size=1))
                return {"fields": _preview(batch.to_pylist()[0])}
            head = _decompressed(raw, compression).read(PREVIEW_CHARS * 4)  # text
            return {"fields": {"text": _short(head.decode("utf-8", errors="replace"))}}
    except UNREADABLE as e:  # unreadable or truncated: say so, go on
        return {"problem": f"{type(e).__name__}: {e}"}


def first_line(loc: Location, compression: str, max_bytes: int) -> bytes | None:
    """The first non-blank line without reading the file past it; None: no such line within
    max_bytes (an empty file, or a first line longer than that)."""
    if compression != "none":
        with loc.open_read(block_size=1 << 16) as raw:
            stream = _decompressed(raw, compression)
            while line := stream.readline(max_bytes):
                if line.strip():
                    return line if line.endswith(b"\n") or len(line) < max_bytes else None
        return None
    data, start, size = b"", 0, PROBE_BYTES
    while start < max_bytes:
        chunk = loc.read_bytes(start, start + size)
        data += chunk
        lines = data.split(b"\n")
        for line in lines[:-1]:
            if line.strip():
                return line
        if len(chunk) < size:  # the end of the file
            return lines[-1] if lines[-1].strip() else None
        data, start, size = lines[-1], start + size, size * 2
    return None


def first_object(line: bytes) -> dict[str, Any] | str:
    """The line's record (of a line holding an array, its first element), or why there is none."""
    try:
        record = json.loads(line.decode("utf-8-sig"))
    except (ValueError, RecursionError) as e:
        return f"malformed_json: {e} (read as JSON Lines: one object per line)"
    if isinstance(record, list) and record:  # a line holding an array: one record per element
        record = record[0]
    if not isinstance(record, dict):
        return f"malformed_json: a JSON {type(record).__name__}, not an object"
    return record


def _json_fields(line: bytes) -> dict[str, Any]:
    record = first_object(line)
    return {"problem": record} if isinstance(record, str) else {"fields": _preview(record)}


def _preview(record: dict[str, Any]) -> dict[str, str]:
    return {
        str(k): _short(v if isinstance(v, str) else json.dumps(v, default=str))
        for k, v in record.items()
    }


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"

"""The first record of an input file, read without reading the rest: for `run --dry-run`.

JSONL: the first non-blank line (decompressed as the readers do, at most ingest.max_doc_bytes);
Parquet: the first row of the first row group; text: the file is one document, so `{"text": ...}`
with the first bytes. Never raises for bad content: the reason comes back instead, so a dry run
can print it next to the file (a real run quarantines the same record with the same reason).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq

from pipeline.core.storage import Location
from pipeline.ingest.format_readers import _decompressed

PREVIEW_CHARS = 60  # of a text value shown in the preview


def first_record(loc: Location, fmt: str, compression: str, max_bytes: int) -> dict[str, Any]:
    """{'fields': {name: preview}} of the file's first record, or {'problem': why}."""
    try:
        with loc.open_read() as raw:
            if fmt == "parquet":
                parquet = pq.ParquetFile(raw)
                if parquet.metadata.num_rows == 0:
                    return {"problem": "no rows"}
                batch = next(parquet.iter_batches(batch_size=1))
                return {"fields": _preview(batch.to_pylist()[0])}
            stream = _decompressed(raw, compression)
            if fmt == "text":
                head = stream.read(PREVIEW_CHARS * 4).decode("utf-8", errors="replace")
                return {"fields": {"text": _short(head)}}
            while line := stream.readline(max_bytes + 1):
                if line.strip():
                    return _json_fields(line)
            return {"problem": "no records"}
    except (OSError, EOFError, ValueError) as e:  # unreadable or truncated: say so, go on
        return {"problem": f"{type(e).__name__}: {e}"}


def _json_fields(line: bytes) -> dict[str, Any]:
    try:
        record = json.loads(line.removeprefix(b"\xef\xbb\xbf"))
    except ValueError as e:
        return {"problem": f"malformed_json: {e} (read as JSON Lines: one object per line)"}
    if isinstance(record, list) and record:  # a line holding an array: one record per element
        record = record[0]
    if not isinstance(record, dict):
        return {"problem": f"malformed_json: a JSON {type(record).__name__}, not an object"}
    return {"fields": _preview(record)}


def _preview(record: dict[str, Any]) -> dict[str, str]:
    return {
        str(k): _short(v if isinstance(v, str) else json.dumps(v, default=str))
        for k, v in record.items()
    }


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"

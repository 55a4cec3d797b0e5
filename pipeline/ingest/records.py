"""What a reader yields: the documents and quarantine tables, their schemas and the reasons.

`read_piece` (ingest/readers.py) yields `(docs, quarantine)` pairs of these two tables; the
format readers (ingest/format_readers.py) fill them through `Batches`, and every format judges a
record's fields with the same `document_fields`.

Contract: every input record is a document or a quarantine row with one of the reasons below
(exact strings), and a file rejected whole counts as the records it held, so a bad file never
passes as one bad record; `row` locates a record the same way however its file is cut into
pieces. The schemas, `row`'s meaning per format, the reasons and how records are counted:
docs/formats.md, "Documents and quarantine rows".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from pipeline.core.text import derived_id
from pipeline.ingest.read_guards import ObjectChanged

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
        ("doc_id", pa.string()),  # the id it would have had (quarantine_id); null for a file
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
SPECIAL_TOKEN_TEXT = "special_token_text"
NON_SCALAR_FIELD = "non_scalar_field"
CORRUPT_RECORD = "corrupt_record"  # a web archive's gzip member that does not decompress
UNDECODABLE_PAYLOAD = "undecodable_payload"  # an HTTP body whose encoding cannot be undone
KEEP_PREFIX = "keep."  # docs columns of the kept fields
FILE_LEVEL = -1
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
    if not text or text.isspace():  # not text.strip(): that copies a text ending in a newline
        raise Rejected(EMPTY_TEXT, f"{len(text)} whitespace characters")
    if raw_id is None:
        return None, text
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        raise Rejected(INVALID_ID, f"id is {type(raw_id).__name__}: {str(raw_id)[:80]}")
    return str(raw_id), text


def quarantine_id(raw_id: Any, source: str, row: int) -> str | None:
    """The id a rejected record would have had as a document, so that `find` can name it: its
    own id when usable, the derived one when it has none, None when its id is unusable."""
    if raw_id is None:
        return derived_id(source, row)
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        return None
    return str(raw_id)


def docs_schema(keep: tuple[str, ...] = ()) -> pa.Schema:
    """DOCS_SCHEMA, plus one string column per kept field."""
    return pa.schema([*DOCS_SCHEMA, *((KEEP_PREFIX + name, pa.string()) for name in keep)])


def kept_fields(values: list[Any], names: tuple[str, ...]) -> tuple[str | None, ...]:
    """The kept fields' values of one record as index values; Rejected (non_scalar_field) for a
    value that is neither a string nor a number. Pure."""
    out = []
    for name, value in zip(names, values, strict=True):
        if value is None or isinstance(value, str):
            out.append(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(json.dumps(value))
        else:
            raise Rejected(NON_SCALAR_FIELD, f"keep_fields {name!r} is {type(value).__name__}")
    return tuple(out)


class Batches:
    """Accumulates documents and quarantine rows of one source; `take` empties it."""

    def __init__(
        self,
        source: str,
        batch_docs: int,
        max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES,
        keep: tuple[str, ...] = (),
        extract: Callable[[str], str] | None = None,
    ) -> None:
        self.source, self.batch_docs, self.keep = source, batch_docs, keep
        self.extract = extract  # HTML to text (pipeline/extract): web archives and .html
        self.records: Counter = Counter()  # web archive records by kind (ingest/web_archive.py)
        self.seconds: Counter = Counter()  # seconds in the reader's parts (web_archive.PARTS)
        self._kept: list[list[str | None]] = [[] for _ in keep]
        self.max_doc_bytes = max_doc_bytes  # the readers' cap on one record
        self._ids: list[str] = []
        self._rows: list[int] = []
        self._texts: list[str] = []
        self._bad: list[tuple[int, str, str, int, int, str | None]] = []
        self.seen = 0  # documents and problems so far: a failing file's records are not recounted

    def doc(
        self, raw_id: str | None, row: int, text: str, kept: tuple[str | None, ...] = ()
    ) -> None:
        """`kept`: the kept fields' values (kept_fields); () for a format without fields."""
        for i, column in enumerate(self._kept):
            column.append(kept[i] if kept else None)
        self.seen += 1
        self._ids.append(raw_id if raw_id is not None else derived_id(self.source, row))
        self._rows.append(row)
        self._texts.append(text)

    def problem(
        self,
        row: int,
        reason: str,
        detail: str,
        records: int = 1,
        nbytes: int = 0,
        raw_id: Any = None,
    ) -> None:
        """`raw_id`: the record's id field where it could be read (None: none, or unread)."""
        self.seen += 1
        doc_id = quarantine_id(raw_id, self.source, row) if row != FILE_LEVEL else None
        self._bad.append((row, reason, detail[:_DETAIL_CHARS], max(records, 1), nbytes, doc_id))

    @property
    def full(self) -> bool:
        return max(len(self._ids), len(self._bad)) >= self.batch_docs

    def __bool__(self) -> bool:
        return bool(self._ids or self._bad)

    def take(self) -> tuple[pa.Table, pa.Table]:
        docs = pa.table(
            [self._ids, [self.source] * len(self._ids), self._rows, self._texts, *self._kept],
            schema=docs_schema(self.keep),
        )
        rows, reasons, details, records, nbytes, ids = (
            zip(*self._bad, strict=True) if self._bad else ((), (), (), (), (), ())
        )
        bad = pa.table(
            [
                [self.source] * len(rows),
                list(rows),
                list(reasons),
                list(details),
                list(records),
                list(nbytes),
                list(ids),
            ],
            schema=QUARANTINE_SCHEMA,
        )
        self._ids, self._rows, self._texts, self._bad = [], [], [], []
        self._kept = [[] for _ in self.keep]
        return docs, bad


def changed_quarantine(changed: ObjectChanged, piece_bytes: int) -> pa.Table:
    """The one quarantine row that stands for a piece whose object changed: its records cannot
    be counted (the object is no longer the one listed), so it counts 1 record and its bytes."""
    detail = changed.detail[:_DETAIL_CHARS]
    return pa.table(
        [[changed.source], [changed.row], [CHANGED_DURING_RUN], [detail], [1], [piece_bytes],
         [None]],
        schema=QUARANTINE_SCHEMA,
    )

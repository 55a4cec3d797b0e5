"""What keeps one bad input object from hurting a read: bounded scans over JSONL byte ranges,
oversize text values, and the check that an object is still the one listed.

pipeline/ingest/records.py documents the quarantine reasons (``too_large``, ``changed_during_run``).

Bounded reads. A JSONL line is read at most ``max_doc_bytes + 1`` bytes at a time: a longer one
is measured and skipped in 1 MiB chunks, never held whole. A piece that starts inside a line
looks for the next line start only within its own byte range, so only the piece where a line
starts reads past its end. An uncompressed text file larger than the cap is quarantined from its
listed size without being opened; a compressed one is decompressed in chunks to measure it.
A Parquet text value is decoded with its row group (whose size the file's writer chose) and then
dropped: it is never copied into Python or tokenized.

Changed objects. Each piece is read only if the object still has the size and ETag (locally
size and mtime) of the listing: on S3 the metadata s3fs opens the object with (a HEAD, or the
client's cached listing) is compared with the listing, and every range GET carries ``If-Match``
on that ETag, so a change after the comparison fails the GET with 412 (s3fs FileExpired);
locally the file is stat'ed before and after the piece. Either way the piece becomes
one ``changed_during_run`` row (ObjectChanged; stages.read_unit drops the piece's other rows).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.storage import Location

SCAN_CHUNK = 1 << 20  # bytes held at a time while measuring or skipping an oversized record


# -- bounded line scans ----------------------------------------------------------------------
class Window(io.RawIOBase):
    """Reads `raw` from `pos` on, never past `stop` while it is set: the search for a piece's
    first line start then reads nothing outside the piece, not even a buffer's worth."""

    def __init__(self, raw: Any, pos: int, stop: int | None) -> None:
        self._raw, self.pos, self.stop = raw, pos, stop

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = len(buffer) if self.stop is None else min(len(buffer), self.stop - self.pos)
        data = self._raw.read(n) if n > 0 else b""
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def next_line_start(stream: io.BufferedIOBase, offset: int, limit: int) -> int | None:
    """Offset just after the first newline at or after `offset` and before `limit`; None when
    none is there (no line starts in the piece). Reads nothing at or past `limit`."""
    while offset < limit:
        chunk = stream.readline(min(SCAN_CHUNK, limit - offset))
        if not chunk:
            return None
        offset += len(chunk)
        if chunk.endswith(b"\n"):
            return offset
    return None


def rest_of_line(stream: io.BufferedIOBase) -> tuple[int, bool]:
    """(bytes up to and including the next newline or the end, whether a newline ended them),
    read and dropped in chunks."""
    n = 0
    while True:
        chunk = stream.readline(SCAN_CHUNK)
        n += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return n, bool(chunk)


# -- oversize values in a column -------------------------------------------------------------
def without_oversize(column: pa.Array, cap: int) -> tuple[pa.Array, dict[int, int]]:
    """The text column with values over `cap` bytes nulled (so never copied into Python), and
    {index: size} of those values."""
    try:
        lengths = pc.fill_null(pc.binary_length(column), 0)
    except pa.ArrowNotImplementedError:  # an encoding binary_length does not take: per value
        values = column.to_pylist()
        lengths = pa.array([len(v.encode()) if isinstance(v, str) else 0 for v in values])
    big = pc.greater(lengths, cap)
    if not pc.any(big).as_py():
        return column, {}
    sizes = lengths.to_pylist()
    oversize = {i: sizes[i] for i in pc.indices_nonzero(big).to_pylist()}
    return pc.if_else(big, pa.scalar(None, column.type), column), oversize


# -- the object as listed --------------------------------------------------------------------
class ObjectChanged(Exception):
    """The object is not the one listed: the piece `row` (its first byte) must be dropped whole."""

    def __init__(self, source: str, row: int, detail: str) -> None:
        super().__init__(f"{source}: {detail}")
        self.source, self.row, self.detail = source, row, detail


def _version(info: dict[str, Any]) -> tuple[int, str | None, float | None]:
    etag = info.get("ETag") or info.get("etag")
    mtime = info.get("mtime")
    return (
        int(info["size"]),
        str(etag).strip('"') if etag else None,
        float(mtime) if isinstance(mtime, (int, float)) else None,
    )


def check_version(piece: dict, info: dict[str, Any]) -> None:
    """Raise ObjectChanged unless the object has the listed size and ETag (or mtime)."""
    size, etag, mtime = _version(info)
    listed_etag, listed_mtime = piece.get("etag"), piece.get("mtime")
    if (
        size != piece["size"]
        or (listed_etag and etag != listed_etag)
        or (not listed_etag and listed_mtime is not None and mtime != listed_mtime)
    ):
        was, now = (listed_etag, etag) if listed_etag else (listed_mtime, mtime)
        kind = "ETag" if listed_etag else "mtime"
        raise ObjectChanged(
            piece["path"],
            piece["start"],
            f"listed {piece['size']} bytes, {kind} {was}; now {size} bytes, {kind} {now}"
            f" (bytes {piece['start']}-{piece['end']} dropped)",
        )


def _file_expired() -> tuple[type[BaseException], ...]:
    """s3fs's FileExpired where s3fs is loaded, else nothing: only an s3fs file raises it, and a
    local run need not import s3fs (~0.4 s in the driver and in each worker)."""
    utils = sys.modules.get("s3fs.utils")
    return (utils.FileExpired,) if utils is not None else ()


@contextlib.contextmanager
def open_checked(loc: Location, piece: dict) -> Iterator[io.BufferedIOBase]:
    """Open a piece's object only if it is the one listed (see "Changed objects" above)."""
    with loc.open_read() as raw:
        # s3fs: the metadata it opened the object with, whose ETag its GETs send as If-Match
        check_version(piece, raw.details or loc.fs.info(loc.path))
        try:
            yield raw
        except _file_expired() as e:  # a GET's If-Match failed: the object changed while read
            raise ObjectChanged(piece["path"], piece["start"], f"changed while read: {e}") from e
    if loc.is_local:  # no If-Match on a file: it must still be the same after the read
        check_version(piece, loc.fs.info(loc.path))

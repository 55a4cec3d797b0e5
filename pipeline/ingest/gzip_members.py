"""The gzip members of a web archive, one at a time, each with the byte offset it starts at.

Common Crawl writes each WARC record as its own gzip member, so a reader may start at any member
and a range GET from a member's offset fetches one record. `Member` decompresses one member as
a stream (never held whole); `find_member` finds the first member that starts at or after an
offset, for a piece that begins inside a file. A whole-stream .warc.gz is one member: all of
its records belong to the member at offset 0 (docs/formats.md, "The listing and its work
units").
"""

from __future__ import annotations

import io
import zlib
from typing import Any

GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1 ID2 CM=deflate: how every gzip member starts
WARC_MAGIC = b"WARC/"  # how every WARC record starts
_CHUNK = 1 << 16  # compressed bytes pulled per read
PROBE_BYTES = 1 << 12  # compressed bytes decompressed to tell a member start from chance bytes


class Member(io.RawIOBase):
    """The decompressed bytes of the gzip member starting at `start` of `raw` (positioned
    there, or holding `pending` compressed bytes read past the previous member). At the
    member's end `end` is its last byte + 1 and `rest` the compressed bytes read past it; a
    stream that ends inside the member sets `truncated` and reads as ended. A corrupt member
    raises zlib.error."""

    def __init__(self, raw: Any, start: int, pending: bytes = b"") -> None:
        self._raw, self.start = raw, start
        self._inflate = zlib.decompressobj(wbits=31)
        self._pos, self._buf = start, pending  # _pos: the raw offset of _buf's first byte
        self.out = 0  # decompressed bytes so far
        self.truncated, self.end, self.rest = False, None, b""

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.out

    def readinto(self, buffer: Any) -> int:
        while self.end is None:
            if not self._buf:
                self._buf = self._raw.read(_CHUNK)
                if not self._buf:
                    self.truncated = True
                    return 0
            data = self._buf
            out = self._inflate.decompress(data, len(buffer))
            eof = self._inflate.eof
            left = self._inflate.unused_data if eof else self._inflate.unconsumed_tail
            self._pos += len(data) - len(left)
            self._buf = left
            if eof:
                self.end, self.rest = self._pos, bytes(left)
            if out:
                buffer[: len(out)] = out
                self.out += len(out)
                return len(out)
        return 0


def member_head(data: bytes) -> bytes:
    """The first decompressed bytes of the gzip member at the start of `data` (b"" when they
    are not a gzip member)."""
    try:
        return zlib.decompressobj(wbits=31).decompress(data, len(WARC_MAGIC))
    except zlib.error:
        return b""


def find_member(raw: Any, offset: int, limit: int) -> int | None:
    """The offset of the first gzip member holding a WARC record that starts in [offset, limit)
    of the seekable `raw`, or None. A candidate is bytes that start a gzip member whose
    decompressed bytes begin with "WARC/" (compressed data can hold the magic bytes by chance,
    but not also decompress to a record header)."""
    pos = offset
    while pos < limit:
        raw.seek(pos)
        chunk = raw.read(min(_CHUNK, limit - pos) + len(GZIP_MAGIC) - 1)
        if len(chunk) < len(GZIP_MAGIC):
            return None
        at = chunk.find(GZIP_MAGIC)
        while at != -1 and pos + at < limit:
            raw.seek(pos + at)
            if member_head(raw.read(PROBE_BYTES)).startswith(WARC_MAGIC):
                return pos + at
            at = chunk.find(GZIP_MAGIC, at + 1)
        pos += len(chunk) - len(GZIP_MAGIC) + 1
    return None

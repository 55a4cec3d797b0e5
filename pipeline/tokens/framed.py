"""Framed token bytes: the token intermediates (token files, pack's exchange sections) stored
as zstd frames, so that tokens cross storage as fewer bytes and a range of raw tokens still
costs one GET of about its own size.

Contract: `read_range` returns exactly the raw bytes asked for, from one GET that reads at most
two frames more; a token file's frame table is in its index, written last, so a table exists
only for a whole .bin; an index without a table is a raw .bin (format 0). Every frame carries a
content checksum: a corrupt frame is CorruptTokens, never wrong tokens.
Format and the frame size's measurements: docs/formats.md, "Token files and token sections".
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import zstandard

from pipeline.core.storage import Location

FORMAT = 1
FRAME_BYTES = 256 * 1024  # 128 Ki uint16 tokens
LEVEL = 1
META_KEY = b"pipeline.frames"


class CorruptTokens(ValueError):
    """Stored token bytes that do not decompress to what their table or index says."""


def _compressor() -> zstandard.ZstdCompressor:
    return zstandard.ZstdCompressor(level=LEVEL, write_checksum=True, write_content_size=True)


@dataclass(frozen=True)
class FrameTable:
    """Where each frame of a token file starts (and the file ends), and what it holds."""

    frame_bytes: int
    raw_bytes: int
    offsets: tuple[int, ...]  # len = frames + 1; offsets[0] == 0, offsets[-1] == file size

    @property
    def frames(self) -> int:
        return len(self.offsets) - 1

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The frames [f0, f1) holding raw bytes [start, end) (0 <= start < end <= raw)."""
        if not 0 <= start < end <= self.raw_bytes:
            # an index that does not describe this file
            raise CorruptTokens(f"raw range [{start}, {end}) outside 0..{self.raw_bytes}")
        return start // self.frame_bytes, math.ceil(end / self.frame_bytes)

    def metadata(self) -> dict[bytes, bytes]:
        body = {
            "format": FORMAT,
            "frame_bytes": self.frame_bytes,
            "raw_bytes": self.raw_bytes,
            "offsets": list(self.offsets),
        }
        return {META_KEY: json.dumps(body, separators=(",", ":")).encode()}

    @classmethod
    def from_metadata(cls, meta: dict[bytes, bytes] | None) -> FrameTable | None:
        """The table from an index's schema metadata; None for a format 0 (raw) file."""
        if not meta or META_KEY not in meta:
            return None
        body = json.loads(meta[META_KEY])
        if body.get("format") != FORMAT:
            raise CorruptTokens(f"token frame table of format {body.get('format')}, not {FORMAT}")
        table = cls(int(body["frame_bytes"]), int(body["raw_bytes"]), tuple(body["offsets"]))
        if table.frames != math.ceil(table.raw_bytes / table.frame_bytes):
            raise CorruptTokens(f"{table.frames} frames for {table.raw_bytes} raw bytes")
        return table


class FramedWriter:
    """Writes raw token bytes to `out` (a binary file) as a framed token file; `close()` returns
    its frame table (to go in the index's metadata: with_table)."""

    def __init__(self, out, frame_bytes: int = FRAME_BYTES) -> None:
        self._out, self._frame_bytes = out, frame_bytes
        self._compressor = _compressor()
        self._pending = bytearray()
        self._offsets, self._raw = [0], 0

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        self._raw += len(view)
        at = 0
        if self._pending:
            at = min(len(view), self._frame_bytes - len(self._pending))
            self._pending += view[:at]
            if len(self._pending) < self._frame_bytes:
                return
            self._frame(self._pending)
            self._pending = bytearray()
        while len(view) - at >= self._frame_bytes:  # whole frames straight from the caller's buffer
            self._frame(view[at : at + self._frame_bytes])
            at += self._frame_bytes
        self._pending += view[at:]

    def _frame(self, raw) -> None:
        data = self._compressor.compress(raw)
        self._out.write(data)
        self._offsets.append(self._offsets[-1] + len(data))

    def close(self) -> FrameTable:
        if self._pending:
            self._frame(self._pending)
            self._pending = bytearray()
        return FrameTable(self._frame_bytes, self._raw, tuple(self._offsets))


def with_table(index, table: FrameTable):
    """The token index (a pyarrow Table) carrying its .bin's frame table."""
    meta = dict(index.schema.metadata or {})
    meta.update(table.metadata())
    return index.replace_schema_metadata(meta)


def table_of(index) -> FrameTable | None:
    """The frame table of the .bin an index (a pyarrow Table) describes; None: a raw .bin."""
    return FrameTable.from_metadata(index.schema.metadata)


def decompress_frames(data: bytes, table: FrameTable, f0: int, f1: int) -> bytes:
    """The raw bytes of frames [f0, f1), given their stored bytes (`data`, from offsets[f0])."""
    base, view, out = table.offsets[f0], memoryview(data), []
    if len(view) != table.offsets[f1] - base:
        raise CorruptTokens(f"{len(view)} bytes for frames {f0}..{f1 - 1}")
    decompressor = zstandard.ZstdDecompressor()
    for f in range(f0, f1):
        want = min(table.frame_bytes, table.raw_bytes - f * table.frame_bytes)
        try:
            raw = decompressor.decompress(
                view[table.offsets[f] - base : table.offsets[f + 1] - base],
                allow_extra_data=False,
            )
        except zstandard.ZstdError as e:
            raise CorruptTokens(f"token frame {f}: {e}") from None
        if len(raw) != want:
            raise CorruptTokens(f"token frame {f}: {len(raw)} raw bytes, not {want}")
        out.append(raw)
    return out[0] if len(out) == 1 else b"".join(out)


def read_range(
    loc: Location, table: FrameTable | None, start: int, end: int
) -> bytes | memoryview:
    """Raw bytes [start, end) of the token file at `loc` with one GET: of the frames covering
    them (table), or of the range itself (None: a format 0 file). A range inside the frames is
    a view of their bytes, not a copy."""
    if table is None:
        return loc.read_bytes(start, end)
    if end <= start:
        return b""
    f0, f1 = table.span(start, end)
    try:
        raw = decompress_frames(loc.read_bytes(table.offsets[f0], table.offsets[f1]), table, f0, f1)
    except CorruptTokens as e:
        raise CorruptTokens(f"{loc.uri}: {e}") from None
    skip = start - f0 * table.frame_bytes
    if skip == 0 and end - start == len(raw):
        return raw
    return memoryview(raw)[skip : skip + end - start]


def compress_section(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """An exchange token section: the chunks' bytes as one zstd frame, streamed; nothing when
    there are no bytes."""
    stream = None
    for chunk in chunks:
        if not len(chunk):
            continue
        if stream is None:
            stream = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True).compressobj()
        data = stream.compress(chunk)
        if data:
            yield data
    if stream is not None:
        yield stream.flush()


def decompress_section(data, raw_bytes: int) -> bytes:
    """The raw bytes of an exchange token section that its index rows say holds `raw_bytes`."""
    if not len(data):
        if raw_bytes:
            raise CorruptTokens(f"an empty token section for {raw_bytes} raw bytes")
        return b""
    try:
        raw = zstandard.ZstdDecompressor().decompress(
            data, max_output_size=raw_bytes, allow_extra_data=False
        )
    except zstandard.ZstdError as e:
        raise CorruptTokens(f"token section: {e}") from None
    if len(raw) != raw_bytes:
        raise CorruptTokens(f"token section of {len(raw)} raw bytes, not {raw_bytes}")
    return raw

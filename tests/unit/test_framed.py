"""Framed token files and exchange sections (tokens/framed.py)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

from pipeline.core.storage import Location
from pipeline.tokens import framed
from pipeline.tokens.pack import TOKEN_INDEX_SCHEMA

FRAME = 64  # raw bytes per frame: small, so that ranges cross many frame edges


def _tokens(n: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 300, n, dtype=np.uint16).tobytes()


def _written(tmp_path, raw: bytes, pieces: list[int] | None = None, frame: int = FRAME):
    """The framed file of `raw` (written in pieces of these sizes), its location and table."""
    loc = Location.from_uri(str(tmp_path / "u.bin"))
    with loc.atomic_writer() as out:
        writer = framed.FramedWriter(out, frame)
        at = 0
        for size in pieces or [len(raw)]:
            writer.write(raw[at : at + size])
            at += size
        writer.write(raw[at:])
        table = writer.close()
    return loc, table


@pytest.mark.parametrize("pieces", [None, [1, 63, 64, 65, 3], [7] * 40, [200, 0, 1]])
def test_round_trip_whatever_the_writes(tmp_path, pieces):
    raw = _tokens(500)  # 1000 bytes: 15 whole frames and a short one
    loc, table = _written(tmp_path, raw, pieces)
    assert table.raw_bytes == len(raw) and table.frames == 16
    assert table.offsets[0] == 0 and table.offsets[-1] == len(loc.read_bytes())
    assert framed.read_range(loc, table, 0, len(raw)) == raw


def test_range_reads_at_and_around_frame_edges_get_only_their_frames(tmp_path):
    raw = _tokens(500, seed=1)
    loc, table = _written(tmp_path, raw)
    edges = [0, 1, 62, 63, 64, 65, 127, 128, 129, 960, 999, 1000]
    for a in edges:
        for b in edges:
            if a < b:
                assert framed.read_range(loc, table, a, b) == raw[a:b], (a, b)
    assert table.span(64, 128) == (1, 2)  # exactly one frame
    assert table.span(63, 129) == (0, 3)
    assert table.span(999, 1000) == (15, 16)
    assert framed.read_range(loc, table, 5, 5) == b""
    with pytest.raises(framed.CorruptTokens, match="outside"):  # an index of another file
        framed.read_range(loc, table, 990, 1002)


def test_empty_file_has_no_frames(tmp_path):
    loc, table = _written(tmp_path, b"")
    assert loc.read_bytes() == b"" and table.frames == 0 and table.offsets == (0,)
    assert framed.read_range(loc, table, 0, 0) == b""
    index = framed.with_table(TOKEN_INDEX_SCHEMA.empty_table(), table)
    assert framed.table_of(index) == table


def test_table_travels_in_the_index_parquet(tmp_path):
    raw = _tokens(300)
    _, table = _written(tmp_path, raw)
    index = pa.table({"doc_id": ["a"], "source": ["s"], "row": [0], "key": [1], "length": [300]},
                     schema=TOKEN_INDEX_SCHEMA)  # fmt: skip
    loc = Location.from_uri(str(tmp_path / "u.parquet"))
    loc.write_parquet(framed.with_table(index, table))
    assert framed.table_of(loc.read_parquet()) == table
    assert framed.table_of(loc.read_parquet(columns=["length"])) == table
    assert framed.table_of(index) is None  # format 0: a raw .bin, read as it is


def test_format_0_file_is_read_raw(tmp_path):
    raw = _tokens(100)
    loc = Location.from_uri(str(tmp_path / "old.bin"))
    loc.write_bytes(raw)
    assert framed.read_range(loc, None, 10, 90) == raw[10:90]


def test_corrupted_frame_is_an_error_not_garbage(tmp_path):
    raw = _tokens(500, seed=2)
    loc, table = _written(tmp_path, raw)
    stored = bytearray(loc.read_bytes())
    a, b = table.offsets[3], table.offsets[4]
    stored[(a + b) // 2] ^= 0x40  # a bit flipped inside frame 3's compressed bytes
    loc.write_bytes(bytes(stored))
    with pytest.raises(framed.CorruptTokens, match="frame 3"):
        framed.read_range(loc, table, 3 * FRAME + 1, 3 * FRAME + 2)
    assert framed.read_range(loc, table, 0, 3 * FRAME) == raw[: 3 * FRAME]  # others still read
    truncated = Location.from_uri(str(tmp_path / "short.bin"))
    truncated.write_bytes(bytes(stored[: table.offsets[-1] - 1]))
    with pytest.raises(framed.CorruptTokens):
        framed.read_range(truncated, table, len(raw) - 2, len(raw))


def test_a_table_that_does_not_fit_its_sizes_is_refused():
    table = framed.FrameTable(64, 1000, (0, 10))
    with pytest.raises(framed.CorruptTokens, match="frames"):
        framed.FrameTable.from_metadata(table.metadata())


def test_section_is_one_frame_of_the_chunks_and_checks_its_size():
    chunks = [_tokens(50, s) for s in range(4)] + [b""]
    data = b"".join(framed.compress_section(iter(chunks)))
    raw = b"".join(chunks)
    assert framed.decompress_section(data, len(raw)) == raw
    assert b"".join(framed.compress_section(iter([b"", b""]))) == b""
    assert framed.decompress_section(b"", 0) == b""
    with pytest.raises(framed.CorruptTokens):
        framed.decompress_section(data, len(raw) - 2)  # the index rows say otherwise
    with pytest.raises(framed.CorruptTokens):
        framed.decompress_section(data + data, len(raw))  # one frame, nothing after it
    with pytest.raises(framed.CorruptTokens):
        framed.decompress_section(b"", 4)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0x40
    with pytest.raises(framed.CorruptTokens):
        framed.decompress_section(bytes(bad), len(raw))


def test_writer_takes_numpy_views_without_copying_them_first():
    out = io.BytesIO()
    writer = framed.FramedWriter(out, FRAME)
    tokens = np.arange(1000, dtype=np.uint16)
    writer.write(tokens.view(np.uint8))
    table = writer.close()
    data = framed.decompress_frames(out.getvalue(), table, 0, table.frames)
    assert np.array_equal(np.frombuffer(data, np.uint16), tokens)

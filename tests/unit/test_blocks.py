"""Block checksums: ShardWriter computes them as it writes, in pieces of any size; the reader's
requests cover whole blocks, each fetched once per run, and keep exactly the bytes asked for."""

from __future__ import annotations

import io

import numpy as np
import pytest

from pipeline.formats.megatron import ShardWriter, block_digests
from pipeline.stream.blocks import block_ranges, first_bad_block
from pipeline.stream.windows import ByteRange


@pytest.mark.parametrize("block", [2, 6, 4096, 1 << 20])
def test_writer_block_digests_are_those_of_the_bytes_written(block):
    rng = np.random.default_rng(1)
    bin_f, idx_f = io.BytesIO(), io.BytesIO()
    writer = ShardWriter(bin_f, idx_f, np.uint16, block_bytes=block)
    for n in (1, 7, 0, 3000, 5, 2):  # pieces straddle block boundaries in every way
        writer.add(rng.integers(0, 1000, n, dtype=np.uint16), np.array([n]))
    info = writer.close()
    data = bin_f.getvalue()
    assert info.bin_block_bytes == block
    assert info.bin_blocks_xxh3_64 == block_digests(data, block)
    assert len(info.bin_blocks_xxh3_64) == -(-len(data) // block)


def test_an_empty_shard_has_no_blocks():
    writer = ShardWriter(io.BytesIO(), io.BytesIO(), np.uint16, block_bytes=8)
    assert writer.close().bin_blocks_xxh3_64 == []


def test_block_ranges_widen_to_whole_blocks_and_keep_the_asked_bytes():
    # segment 0 starts at byte 10 of a 100-byte .bin; the windows want its bytes [4, 50), read
    # as two contiguous requests, then [60, 64) after a gap
    ranges = [ByteRange(0, 4, 30, 2), ByteRange(0, 30, 50, 15), ByteRange(0, 60, 64, 30)]
    out = block_ranges(ranges, [10], [100], [8], step=16, itemsize=2)
    fetched = [(r.start, r.end) for r in out]
    kept = [(r.keep_start, r.keep_end, r.stream_token) for r in out]
    # bytes [14, 60) widen to blocks [8, 64), cut at multiples of 16; [70, 74) to [64, 80)
    assert fetched == [(8, 16), (16, 32), (32, 48), (48, 64), (64, 80)]
    assert kept == [(14, 16, 2), (16, 32, 3), (32, 48, 11), (48, 60, 19), (70, 74, 30)]
    assert all(r.start % 8 == 0 and r.end - r.start <= 16 for r in out)


def test_block_ranges_stop_at_the_bins_end():
    out = block_ranges([ByteRange(0, 0, 6, 0)], [92], [98], [8], step=8, itemsize=2)
    assert [(r.start, r.end, r.keep_start, r.keep_end) for r in out] == [
        (88, 96, 92, 96),
        (96, 98, 96, 98),
    ]


def test_block_ranges_refuse_a_request_size_of_partial_blocks():
    with pytest.raises(ValueError, match="not a whole number of 8-byte blocks"):
        block_ranges([ByteRange(0, 0, 6, 0)], [0], [98], [8], step=12, itemsize=2)


def test_first_bad_block_names_the_blocks_index_in_the_bin():
    data = bytes(range(40))
    expected = block_digests(data, 8)
    assert first_bad_block(data[16:], 16, 8, expected) is None
    broken = bytearray(data)
    broken[27] ^= 1
    assert first_bad_block(bytes(broken[16:]), 16, 8, expected) == 3

"""Range requests in whole checksum blocks, and their check (pure core of the reader's
`verify_checksums` on a version with block checksums, manifest format 2).

A shard's .bin has an xxh3-64 per block of `bin_block_bytes` (formats/megatron.py "Block
checksums"). To check what it reads, the reader fetches whole blocks: each run of contiguous
range requests of one segment (windows.plan_ranges) is widened to the blocks that cover it and
cut again at multiples of `step` (the request size, a whole number of blocks) in the .bin's own
byte offsets, so no block is fetched by two requests of the run. Each fetched block is checked;
only the bytes the windows need (`keep_*`) become stream tokens.

Cost: at most one block more than needed at each end of a run. A weighted mixture's pieces of
MIX_TOKENS start on block boundaries (8 MiB blocks), so whole pieces cost nothing extra; a
smaller version's shorter pieces (mixture.piece_tokens) can cost up to two blocks each.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

from pipeline.formats.megatron import block_digests
from pipeline.stream.plan import ReadPlan
from pipeline.stream.windows import ByteRange


class BlockRange(NamedTuple):
    """One request of whole blocks: bytes [start, end) of the .bin of the segment at `shard`
    (stream position), of which [keep_start, keep_end) are wanted; `stream_token` is the stream
    offset of keep_start's token."""

    shard: int
    start: int
    end: int
    keep_start: int
    keep_end: int
    stream_token: int


def block_ranges(
    ranges: Sequence[ByteRange],
    origins: Sequence[int],
    bin_bytes: Sequence[int],
    block_bytes: Sequence[int],
    step: int,
    itemsize: int,
) -> list[BlockRange]:
    """The ranges (segment-local bytes, in stream order) as whole-block requests of at most
    `step` bytes. `origins[k]`: byte offset of segment k in its .bin; `bin_bytes[k]`,
    `block_bytes[k]`: its .bin's size and block size (step a multiple of it)."""
    runs: list[list[int]] = []  # [segment, first byte, end byte, stream token of first byte]
    for r in ranges:
        if runs and runs[-1][0] == r.shard and runs[-1][2] == r.start:
            runs[-1][2] = r.end
        else:
            runs.append([r.shard, r.start, r.end, r.stream_token])
    out = []
    for k, lo, hi, token in runs:
        block, origin = block_bytes[k], origins[k]
        if step % block:
            raise ValueError(f"request size {step} is not a whole number of {block}-byte blocks")
        a, b = origin + lo, origin + hi
        at, end = a // block * block, min(-(-b // block) * block, bin_bytes[k])
        while at < end:
            cut = min((at // step + 1) * step, end)
            keep0, keep1 = max(at, a), min(cut, b)
            out.append(BlockRange(k, at, cut, keep0, keep1, token + (keep0 - a) // itemsize))
            at = cut
    return out


def first_bad_block(data: bytes, start: int, block: int, expected: Sequence[str]) -> int | None:
    """Index (in the .bin) of the first block of `data` (bytes from `start`, a block boundary)
    whose xxh3-64 is not `expected[index]`, or None."""
    first = start // block
    for i, digest in enumerate(block_digests(data, block)):
        if digest != expected[first + i]:
            return first + i
    return None


def request_blocks(shards: list[dict]) -> int | None:
    """The block size every request must be a whole number of (the lcm of the shards' block
    sizes), or None for a version without block checksums (format 1)."""
    if not shards or any(s.get("bin_blocks_xxh3_64") is None for s in shards):
        return None
    return math.lcm(*(int(s["bin_block_bytes"]) for s in shards))


def whole_blocks(plan: ReadPlan, block: int) -> ReadPlan:
    """The plan with requests of whole blocks (rounded down, at least one), depth capped so the
    buffer still holds them: a checked block is never fetched twice by adjacent requests."""
    if 4 * block > plan.max_buffer_bytes:
        raise ValueError(
            f"verify_checksums reads whole blocks of {block} bytes: max_buffer_bytes"
            f" {plan.max_buffer_bytes} must hold at least four ({4 * block})"
        )
    size = max(block, plan.request_bytes // block * block)
    depth = max(1, min(plan.inflight, plan.max_buffer_bytes // size - 1))
    return dataclasses.replace(plan, request_bytes=size, inflight=depth)

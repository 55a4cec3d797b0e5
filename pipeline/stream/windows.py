"""Which windows a rank reads and which byte ranges hold them (pure core of the stream reader).

Stream of an epoch: the shards of a version in manifest order, permuted by
`shard_order(n, seed, epoch)`, their `.bin` tokens concatenated.
Window j of the stream is tokens `[j*L, j*L + L + 1)` (L = seq_len: inputs and the shifted labels
share one array); there are `window_count(T, L) = (T - 1) // L` windows, the last < L tokens of
the stream are not used.

Assignment: a set of windows still to read, kept as sorted disjoint half-open intervals of window
ids (`Intervals`), is split among `world_size` ranks by position: rank r takes the r-th of W
contiguous, equal-count (± 1) pieces, in stream order. A rank therefore reads a contiguous stretch
of the stream (large range requests, no rank reads another's bytes) and the pieces are disjoint and
cover the set. A fresh epoch's set is `[(0, window_count)]`; after a resume it is whatever the job
had left (see `remaining_after`), so any number of ranks can take over any remainder.

Cutting: the reader holds the fetched ranges as token pieces (`Piece`) and copies each window out
of the contiguous pieces that hold it (`cut`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

Intervals = list[tuple[int, int]]


def window_count(total_tokens: int, seq_len: int) -> int:
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    return max(0, (total_tokens - 1) // seq_len)


def shard_order(shards: int, seed: int, epoch: int) -> np.ndarray:
    """Shard positions in stream order for an epoch: same on every rank and every resume."""
    return np.random.default_rng([seed, epoch]).permutation(shards)


def normalize(intervals: Sequence[Sequence[int]]) -> Intervals:
    """Sorted, merged, non-empty intervals."""
    out: Intervals = []
    for a, b in sorted((int(a), int(b)) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def count(intervals: Intervals) -> int:
    return sum(b - a for a, b in intervals)


def take(intervals: Intervals, start: int, stop: int) -> Intervals:
    """The windows at positions [start, stop) of the ordered set."""
    out: Intervals = []
    seen = 0
    for a, b in intervals:
        lo, hi = max(a, a + start - seen), min(b, a + stop - seen)
        if lo < hi:
            out.append((lo, hi))
        seen += b - a
        if seen >= stop:
            break
    return out


def rank_span(total: int, rank: int, world_size: int) -> tuple[int, int]:
    """Positions [lo, hi) of rank's piece when `total` windows are split W ways (± 1 in size)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside [0, {world_size})")
    size, extra = divmod(total, world_size)
    lo = rank * size + min(rank, extra)
    return lo, lo + size + (rank < extra)


def rank_windows(
    base: Intervals, rank: int, world_size: int, consumed: int = 0, order: WindowOrder | None = None
) -> Intervals:
    """Windows rank still has to read: its piece of `base` less the first `consumed` windows it
    yields (in stream order, or in `order`)."""
    lo, hi = rank_span(count(base), rank, world_size)
    if order is None:
        return take(base, min(lo + consumed, hi), hi)
    return order.drop_first(take(base, lo, hi), consumed)


def remaining_after(
    base: Intervals, world_size: int, consumed: Sequence[int], order: WindowOrder | None = None
) -> Intervals:
    """What the job has left once rank r consumed `consumed[r]` windows of its piece of `base`."""
    if len(consumed) != world_size:
        raise ValueError(f"need one consumed count per rank ({world_size}), got {len(consumed)}")
    parts = [
        w for r in range(world_size) for w in rank_windows(base, r, world_size, consumed[r], order)
    ]
    return normalize(parts)


def iter_windows(intervals: Intervals) -> Iterator[int]:
    for a, b in intervals:
        yield from range(a, b)


def token_ranges(windows: Intervals, seq_len: int) -> Intervals:
    """Stream token ranges holding the windows (a run [a, b) needs tokens [a*L, b*L + 1))."""
    return [(a * seq_len, b * seq_len + 1) for a, b in windows]


class ByteRange(NamedTuple):
    """One range request: bytes [start, end) of the shard at `shard` (manifest position)."""

    shard: int
    start: int
    end: int
    stream_token: int  # stream offset of the range's first token

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    token_ranges_: Intervals,
    order: Sequence[int],
    shard_tokens: Sequence[int],
    itemsize: int,
    request_bytes: int,
    whole_shards: bool = False,
) -> list[ByteRange]:
    """Range requests (<= request_bytes each) covering the token ranges, in stream order.

    `order` lists shard positions in stream order; `shard_tokens[k]` is shard k's token count.
    With `whole_shards`, every shard touched is read from its first to its last byte (needed to
    check its checksum); the extra tokens are fetched but not part of any window.
    """
    step = max(itemsize, request_bytes // itemsize * itemsize)
    offsets = np.concatenate([[0], np.cumsum([shard_tokens[k] for k in order])]).astype(np.int64)
    pieces: list[tuple[int, int, int]] = []  # (position in order, first token, end token), local
    for t0, t1 in token_ranges_:
        first = int(np.searchsorted(offsets, t0, side="right")) - 1
        for pos in range(max(first, 0), len(order)):
            s0, s1 = int(offsets[pos]), int(offsets[pos + 1])
            if s0 >= t1:
                break
            lo, hi = max(t0, s0) - s0, min(t1, s1) - s0
            if whole_shards:
                lo, hi = 0, s1 - s0
            if hi <= lo:
                continue
            if pieces and pieces[-1][0] == pos and pieces[-1][2] >= lo:
                pieces[-1] = (pos, pieces[-1][1], max(hi, pieces[-1][2]))
            else:
                pieces.append((pos, lo, hi))
    ranges = []
    for pos, lo, hi in pieces:
        shard = int(order[pos])
        for start in range(lo * itemsize, hi * itemsize, step):
            end = min(start + step, hi * itemsize)
            ranges.append(ByteRange(shard, start, end, int(offsets[pos]) + start // itemsize))
    return ranges


class WindowOrder(NamedTuple):
    """The order a rank yields its windows in: shuffled inside bounded groups.

    Group g is window ids [g*group, (g+1)*group) of the epoch (the same groups on every rank and
    after every resume). A set of windows is yielded group by group, in stream order of the groups,
    and inside a group by `np.random.default_rng([seed, epoch, g]).permutation(group)`: each
    window's rank in that permutation orders it. A subset of a group keeps the relative order it
    has in the whole group, so dropping the windows already yielded leaves exactly the tail of the
    order (exact resume), whichever ranks the rest is later split among. `group` 0 or 1 is stream
    order (no shuffling). A group is fetched as contiguous ranges, then cut in the shuffled order:
    range requests keep their size, the reader holds one group at a time.
    """

    group: int
    seed: int
    epoch: int

    def groups(self, windows: Intervals) -> Iterator[list[int]]:
        """The windows, one list per group, each list in yield order."""
        if self.group <= 1:
            for j in iter_windows(windows):
                yield [j]
            return
        current, members = -1, []
        for j in iter_windows(windows):
            g = j // self.group
            if g != current:
                if members:
                    yield self._shuffled(current, members)
                current, members = g, []
            members.append(j)
        if members:
            yield self._shuffled(current, members)

    def _shuffled(self, g: int, members: list[int]) -> list[int]:
        rank = np.argsort(np.random.default_rng([self.seed, self.epoch, g]).permutation(self.group))
        return sorted(members, key=lambda j: rank[j - g * self.group])

    def drop_first(self, windows: Intervals, n: int) -> Intervals:
        """The windows left once the first `n` of them in yield order are gone."""
        total = count(windows)
        if self.group <= 1 or n <= 0 or n >= total:
            return take(windows, min(max(n, 0), total), total)
        whole, in_group, current = 0, 0, None  # windows of the groups fully yielded
        for a, b in windows:
            while a < b:
                g, end = a // self.group, min(b, (a // self.group + 1) * self.group)
                if g != current:
                    if whole + in_group > n:
                        break
                    whole, in_group, current = whole + in_group, 0, g
                in_group += end - a
                a = end
            else:
                continue
            break
        else:
            if whole + in_group <= n:
                whole += in_group
        rest = take(windows, whole, total)
        if n > whole:
            first = next(self.groups(rest))
            rest = _minus(rest, [(j, j + 1) for j in first[: n - whole]])
        return rest


def _minus(windows: Intervals, gone: Intervals) -> Intervals:
    """Windows less the (sorted, disjoint) intervals `gone`."""
    out: Intervals = []
    gone = normalize(gone)
    for a, b in windows:
        for x, y in gone:
            if y <= a or x >= b:
                continue
            if x > a:
                out.append((a, x))
            a = max(a, y)
        if a < b:
            out.append((a, b))
    return normalize(out)


class Piece(NamedTuple):
    start: int  # stream offset of tokens[0]
    tokens: np.ndarray
    nbytes: int  # budget it holds until dropped

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


def cut(pending: deque[Piece], w0: int, w1: int) -> np.ndarray:
    """Tokens [w0, w1) of the stream from the contiguous pieces held, as a new array."""
    parts = [
        p.tokens[max(w0 - p.start, 0) : w1 - p.start]
        for p in pending
        if p.start < w1 and p.end > w0
    ]
    window = parts[0].copy() if len(parts) == 1 else np.concatenate(parts)
    if len(window) != w1 - w0:
        raise RuntimeError(f"internal: window [{w0}, {w1}) assembled {len(window)} tokens")
    return window

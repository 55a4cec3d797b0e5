"""Stream a committed dataset version into training windows, with large ranges kept in flight.

Contract: a rank reads only a version whose manifest passes `verify`'s judge (formats/claims.py:
ManifestError otherwise, before any read), only what it lists, in large ranges kept in flight by
Little's law (stream/plan.py); windows depend only on the version, seq_len, rank, world size
and seed; with verify_checksums it checks every block it reads against the manifest
(VerifyError naming shard and block); its state resumes exactly (stream/resume.py).
In full: docs/reading.md, "How StreamReader reads".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import xxhash

from pipeline.core.reachability import check_reachable
from pipeline.core.storage import Location
from pipeline.core.units import MiB
from pipeline.formats.claims import judged_manifest
from pipeline.formats.manifest import ManifestError, split_shards
from pipeline.formats.megatron import ShardFormatError, decode_index
from pipeline.formats.verify import VerifyError
from pipeline.formats.versions import resolve_version
from pipeline.stream.blocks import (
    BlockRange,
    block_ranges,
    first_bad_block,
    request_blocks,
    whole_blocks,
)
from pipeline.stream.boundaries import Window, eos_id, with_boundaries
from pipeline.stream.fetch import FetchStats, RangeFetcher, Request, probe_storage, with_pool
from pipeline.stream.index_header import check_index_header
from pipeline.stream.mixture import epoch_segments, layout_version
from pipeline.stream.plan import (
    DEFAULT_BANDWIDTH,
    DEFAULT_LATENCY_S,
    ReadPlan,
    read_plan,
    shuffle_group,
)
from pipeline.stream.resume import (
    STATE_FORMAT,
    check_same_stream,
    check_state,
    job_remaining,
    merge_states,
    window_order,
)
from pipeline.stream.windows import (
    ByteRange,
    Intervals,
    Piece,
    WindowOrder,
    count,
    cut,
    normalize,
    plan_ranges,
    rank_windows,
    token_ranges,
    window_count,
)


class StreamReader:
    def __init__(
        self,
        uri_or_location: str | Location,
        seq_len: int,
        *,
        storage: Any = None,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        request_bytes: int | None = None,
        inflight: int | None = None,
        target_bytes_per_s: float | None = None,
        latency_s: float | None = None,
        bandwidth_bytes_per_s: float | None = None,
        probe: bool = False,
        max_buffer_bytes: int = 512 * MiB,
        verify_checksums: bool = False,
        retries: int = 3,
        split: str = "train",
        shuffle_windows: bool = True,
        shuffle_buffer_bytes: int | None = None,
        boundaries: bool = False,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside [0, world_size={world_size})")
        loc = (
            uri_or_location
            if isinstance(uri_or_location, Location)
            else Location.from_uri(uri_or_location, storage)
        )
        check_reachable(loc)  # a stopped or wrong endpoint: StorageUnreachable within seconds
        version = resolve_version(loc)
        # `verify`'s judge of the manifest (model and claims), whatever verify_checksums says:
        # ManifestError naming the field, before a byte of a shard is read
        self.manifest = judged_manifest(version)
        try:
            self.dtype = np.dtype(self.manifest["tokenizer"]["dtype"]).newbyteorder("<")
        except (KeyError, TypeError) as e:
            raise ManifestError(f"{version.uri}: manifest has no tokenizer dtype: {e}") from None
        self.seq_len, self.rank, self.world_size, self.seed = seq_len, rank, world_size, seed
        self.verify_checksums, self.retries = verify_checksums, retries
        if split not in ("train", "valid"):
            raise ValueError(f"split must be 'train' or 'valid', got {split!r}")
        self.split = split
        shards = split_shards(self.manifest, split)
        check_index_header(version, shards, self.dtype)
        self._split_shards = shards
        self.layout = layout_version(self.manifest, split)
        self.total_tokens = sum(s.tokens for s in self._epoch_segments(epoch))
        self.windows_per_epoch = window_count(self.total_tokens, seq_len)
        self.eos_id = eos_id(self.manifest, version.uri) if boundaries else None
        self.boundaries = boundaries
        window_bytes = (seq_len + 1) * self.dtype.itemsize
        if 2 * window_bytes > max_buffer_bytes:
            raise ValueError(
                f"max_buffer_bytes {max_buffer_bytes} must hold at least two windows"
                f" ({window_bytes} bytes each)"
            )
        self.probe = None
        if probe and shards:
            big = max(shards, key=lambda s: s["bin_bytes"])
            self.probe = probe_storage(version / big["bin"], int(big["bin_bytes"]))
            latency_s, bandwidth_bytes_per_s = self.probe.latency_s, self.probe.bandwidth
        self.plan: ReadPlan = read_plan(
            DEFAULT_LATENCY_S if latency_s is None else latency_s,
            bandwidth_bytes_per_s or DEFAULT_BANDWIDTH,
            target_bytes_per_s,
            max_buffer_bytes,
            request_bytes,
            inflight,
        )
        self._block_bytes = request_blocks(shards) if verify_checksums else None
        if self._block_bytes is not None:
            self.plan = whole_blocks(self.plan, self._block_bytes)
        self._idx_checked: set[str] = set()  # .idx files checked (block mode: once per shard)
        self.shuffle_group = shuffle_group(
            shuffle_windows, shuffle_buffer_bytes, max_buffer_bytes, self.plan, window_bytes
        )
        self.version = with_pool(version, self.plan.inflight + 2)
        self.stats = FetchStats()
        self._active: Iterator[np.ndarray] | None = None
        self._start_epoch(epoch)

    # -- iteration ---------------------------------------------------------------------------------
    def _epoch_segments(self, epoch: int) -> list:
        return epoch_segments(self.manifest, self._split_shards, self.split, self.seed, epoch)

    def _start_epoch(self, epoch: int, base: Intervals | None = None, consumed: int = 0) -> None:
        self.close()
        self.epoch = epoch
        self._segments = self._epoch_segments(epoch)  # in stream order
        self._shards = [seg.shard for seg in self._segments]
        self._shard_tokens = [seg.tokens for seg in self._segments]
        self._segment_starts = np.cumsum([0, *self._shard_tokens[:-1]], dtype=np.int64)
        self._base = normalize(base if base is not None else [(0, self.windows_per_epoch)])
        self._consumed = consumed

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning (segment and window order depend on seed and epoch)."""
        self._start_epoch(epoch)

    @property
    def consumed(self) -> int:
        """Windows this rank has yielded of its piece of the current epoch's assignment."""
        return self._consumed

    def remaining(self) -> int:
        """Windows this rank has left in the current epoch."""
        return count(rank_windows(self._base, self.rank, self.world_size, self._consumed))

    def __iter__(self) -> StreamReader:
        if self._active is None and self.remaining() == 0:
            self._start_epoch(self.epoch + 1)
        return self

    def __next__(self) -> np.ndarray | Window:
        if self._active is None:
            if self.remaining() == 0:
                raise StopIteration
            self._active = self._windows()
        try:
            return next(self._active)
        except BaseException:
            self._active = None
            raise

    @property
    def window_order(self) -> WindowOrder:
        return WindowOrder(self.shuffle_group, self.seed, self.epoch)

    def _windows(self) -> Iterator[np.ndarray | Window]:
        order = self.window_order
        windows = rank_windows(self._base, self.rank, self.world_size, self._consumed, order)
        ranges = plan_ranges(
            token_ranges(windows, self.seq_len),
            range(len(self._segments)),
            self._shard_tokens,
            self.dtype.itemsize,
            self.plan.request_bytes,
            whole_shards=self.verify_checksums and self._block_bytes is None,
        )
        if self._block_bytes is not None:
            ranges = block_ranges(
                ranges,
                [seg.first * self.dtype.itemsize for seg in self._segments],
                [int(seg.shard["bin_bytes"]) for seg in self._segments],
                [int(seg.shard["bin_block_bytes"]) for seg in self._segments],
                self.plan.request_bytes,
                self.dtype.itemsize,
            )
        entries, requests = self._requests(ranges)
        fetcher = RangeFetcher(
            requests,
            self.plan.inflight,
            self.plan.max_buffer_bytes,
            self.retries,
            self.stats,
            name=f"stream-reader-r{self.rank}",
        )
        try:
            pieces = self._pieces(fetcher, entries)
            pending: deque[Piece] = deque()
            L = self.seq_len
            for group in order.groups(windows):  # yield order; one group's tokens held at once
                w0, w1 = min(group) * L, max(group) * L + L + 1
                while pending and pending[0].end <= w0:
                    fetcher.release(pending.popleft().nbytes)
                while not pending or pending[-1].end < w1:
                    piece = next(pieces)
                    if piece.end <= w0:  # bytes read only for a checksum
                        fetcher.release(piece.nbytes)
                    else:
                        pending.append(piece)
                for j in group:
                    window = cut(pending, j * L, j * L + L + 1)
                    self._consumed += 1
                    self.stats.windows += 1
                    yield self._with_boundaries(window, j * L) if self.boundaries else window
            for piece in pieces:  # rest of the last shard, read for its checksum
                fetcher.release(piece.nbytes)
        finally:
            fetcher.close()

    def _with_boundaries(self, window: np.ndarray, w0: int) -> Window:
        """Document starts from EOS, and where a mixture's piece starts inside the window."""
        starts = self._segment_starts
        lo, hi = np.searchsorted(starts, [w0 + 1, w0 + self.seq_len])
        return with_boundaries(window, self.eos_id, starts[lo:hi] - w0)

    def _requests(self, ranges: list) -> tuple[list, list[Request]]:
        """Fetch list: the ranges, each shard's .idx before its first range when verifying
        (with block checksums: once per shard per reader)."""
        entries: list[ByteRange | BlockRange | int] = []
        requests: list[Request] = []
        planned: set[str] = set()
        for r in ranges:
            seg = self._segments[r.shard]
            shard, at = seg.shard, seg.first * self.dtype.itemsize
            if isinstance(r, BlockRange):
                if shard["idx"] not in self._idx_checked | planned:
                    planned.add(shard["idx"])
                    entries.append(r.shard)
                    requests.append(Request(self.version / shard["idx"], 0, shard["idx_bytes"]))
                entries.append(r)
                requests.append(Request(self.version / shard["bin"], r.start, r.end))
                continue
            if self.verify_checksums and r.start == 0 and self._whole(r.shard):
                entries.append(r.shard)
                requests.append(Request(self.version / shard["idx"], 0, int(shard["idx_bytes"])))
            entries.append(r)
            requests.append(Request(self.version / shard["bin"], at + r.start, at + r.end))
        return entries, requests

    def _pieces(self, fetcher: RangeFetcher, entries: list[ByteRange | int]) -> Iterator[Piece]:
        hashers: dict[int, Any] = {}
        for i, entry in enumerate(entries):
            data = fetcher.get(i)
            if isinstance(entry, int):
                self._check_index(entry, data)
                self._idx_checked.add(self._shards[entry]["idx"])
                fetcher.release(len(data))
                continue
            if isinstance(entry, BlockRange):
                self._check_blocks(entry, data)
                at = entry.start
                keep = memoryview(data)[entry.keep_start - at : entry.keep_end - at]
                yield Piece(entry.stream_token, np.frombuffer(keep, self.dtype), len(data))
                continue
            if self.verify_checksums and self._whole(entry.shard):
                hasher = hashers.setdefault(entry.shard, xxhash.xxh3_128())
                hasher.update(data)
                if entry.end == self._shards[entry.shard]["bin_bytes"]:
                    self._check_digest(entry.shard, "bin", hashers.pop(entry.shard).hexdigest())
            yield Piece(entry.stream_token, np.frombuffer(data, self.dtype), len(data))

    def _whole(self, position: int) -> bool:
        """The segment is a whole shard (only whole shards can be checked against checksums)."""
        seg = self._segments[position]
        return seg.first == 0 and seg.tokens == int(seg.shard["tokens"])

    def epoch_layout(self) -> list[tuple[str | None, str, int, int]]:
        """(source, shard .bin, first token, tokens) of each segment in this epoch's stream
        order: which stretch of the token stream comes from where (windows are then shuffled
        within groups of `shuffle_group` windows, see `WindowOrder`)."""
        return [(s.source, s.shard["bin"], s.first, s.tokens) for s in self._segments]

    def _check_digest(self, shard: int, kind: str, digest: str) -> None:
        expected = self._shards[shard][f"{kind}_xxh3_128"]
        if digest != expected:
            name = self._shards[shard][kind]
            raise VerifyError(
                f"{(self.version / name).uri}: streamed bytes have xxh3-128 {digest},"
                f" manifest says {expected}"
            )

    def _check_blocks(self, entry: BlockRange, data: bytes) -> None:
        shard = self._shards[entry.shard]
        block = int(shard["bin_block_bytes"])
        bad = first_bad_block(data, entry.start, block, shard["bin_blocks_xxh3_64"])
        if bad is not None:
            raise VerifyError(
                f"{(self.version / shard['bin']).uri}: block {bad} (bytes {bad * block}-"
                f"{min((bad + 1) * block, int(shard['bin_bytes']))}) does not have the"
                " manifest's xxh3-64: the shard is corrupted"
            )

    def _check_index(self, shard: int, data: bytes) -> None:
        self._check_digest(shard, "idx", xxhash.xxh3_128_hexdigest(data))
        meta = self._shards[shard]
        where = (self.version / meta["idx"]).uri
        try:
            info = decode_index(data)
        except ShardFormatError as e:
            raise VerifyError(f"{where}: {e}") from None
        if info.dtype != self.dtype or info.bin_size != meta["bin_bytes"]:
            raise VerifyError(
                f"{where}: index describes {info.bin_size} bytes of {info.dtype},"
                f" manifest {meta['bin_bytes']} bytes of {self.dtype}"
            )

    def close(self) -> None:
        """Stop the fetcher threads of the epoch in progress (the position is kept)."""
        active, self._active = self._active, None
        if active is not None:
            active.close()  # runs the generator's `finally`: joins every fetcher thread

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- resume ------------------------------------------------------------------------------------
    def _stream_id(self) -> dict[str, Any]:
        return {
            "name": self.manifest.get("name"),
            "version": self.manifest.get("version"),
            "tokens": self.total_tokens,
            "seq_len": self.seq_len,
            "seed": self.seed,
            "split": self.split,
            "layout": self.layout,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            **self._stream_id(),
            "epoch": self.epoch,
            "shuffle_group": self.shuffle_group,
            "base": [list(iv) for iv in self._base],
            "world_size": self.world_size,
            "rank": self.rank,
            "consumed": self._consumed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state(state)
        check_same_stream(state, self._stream_id())
        group = window_order(state).group
        window_bytes = (self.seq_len + 1) * self.dtype.itemsize
        if group * window_bytes + 2 * self.plan.request_bytes > self.plan.max_buffer_bytes:
            raise ValueError(
                f"the state's shuffle groups of {group} windows do not fit in max_buffer_bytes"
                f" {self.plan.max_buffer_bytes} with two requests of {self.plan.request_bytes}"
            )
        self.shuffle_group = group  # the state's order: its consumed windows are a prefix of it
        base = normalize(state["base"])
        if state["rank"] == self.rank and state["world_size"] == self.world_size:
            self._start_epoch(state["epoch"], base, state["consumed"])
        else:
            self._start_epoch(state["epoch"], job_remaining(state))

    @staticmethod
    def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """One job state from every rank's state: exactly the windows no rank has consumed yet
        (see resume.py)."""
        return merge_states(states)

"""Read planning from first principles: request size, requests in flight, shard size, per-node rate.

    python -m pipeline plan --latency-ms 50 --bandwidth-mbps 100 --target-gbps 2
    python -m pipeline plan --probe s3://bucket/data/name --endpoint-url http://...
    python -m pipeline plan --probe s3://bucket/data/name --config C [--set storage.KEY=V]

One request costs `W = L + s / B` (L first-byte latency, B one connection's bandwidth, s bytes).
- Latency is the fraction `L / W` of each request; it costs less than `f` when
  `s >= L * B * (1 - f) / f`, i.e. `9 * L * B` for f = 10 % (45 MB at 50 ms and
  100 MB/s).
- Little's law: moving X bytes/s in requests of s bytes keeps `N = X * W / s` requests in flight
  (2 GB/s in 16 MB ranges at 50 ms and 100 MB/s: W = 0.21 s, N = 26.25, so 27).
The functions here are pure arithmetic; `StreamReader` sizes its requests and its prefetch depth
with `read_plan`, from declared or probed L and B (see `pipeline.stream.fetch.probe_storage`), and
its shuffle groups within the same buffer with `shuffle_group`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.core.units import MB, MiB, human_bytes

DEFAULT_LATENCY_S = 0.050  # object storage's first-byte latency: tens of ms, plan with 50
DEFAULT_BANDWIDTH = 100 * MB  # ... and ~100 MB/s per connection
DEFAULT_TARGET = 1_000 * MB  # what one reader aims for when not told: generous, memory-capped
MIN_REQUEST = 1 * MiB
MAX_REQUEST = 64 * MiB
MAX_INFLIGHT = 64  # threads per reader; beyond this, add readers (processes), not threads
MIN_SHARD, MAX_SHARD = 64 * MiB, 1024 * MiB  # several large requests each, few objects


def request_time(latency_s: float, bandwidth: float, size: float) -> float:
    """W = L + s / B: seconds one request of `size` bytes takes."""
    return latency_s + size / bandwidth


def latency_bound_size(latency_s: float, bandwidth: float, fraction: float = 0.10) -> float:
    """Smallest request size (bytes) at which first-byte latency costs at most `fraction` of it."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    return latency_s * bandwidth * (1 - fraction) / fraction


def inflight_needed(target: float, latency_s: float, bandwidth: float, size: float) -> int:
    """Little's law, rounded up: requests to keep outstanding to move `target` bytes/s."""
    if target <= 0 or size <= 0:
        raise ValueError("target and size must be positive")
    return max(1, math.ceil(target * request_time(latency_s, bandwidth, size) / size - 1e-9))


def default_request_bytes(latency_s: float, bandwidth: float) -> int:
    """The 10 % rule's size, rounded up to whole MiB and clamped to [1 MiB, 64 MiB]."""
    size = math.ceil(latency_bound_size(latency_s, bandwidth) / MiB) * MiB
    return min(MAX_REQUEST, max(MIN_REQUEST, size))


def recommended_shard_bytes(request_bytes: int) -> int:
    """Shard size: a power-of-two MiB of at least 4 requests, within [64 MiB, 1 GiB].

    A shard smaller than a request forces short requests (latency > 10 %); at >= 4 full requests
    per shard the one partial request at a shard's end is a small share of its reads.
    """
    size = MIN_SHARD
    while size < 4 * request_bytes and size < MAX_SHARD:
        size *= 2
    return size


@dataclass(frozen=True)
class ReadPlan:
    """How one reader reads: request size, requests in flight, and the figures behind them."""

    request_bytes: int
    inflight: int
    latency_s: float
    bandwidth: float  # bytes/s of one connection
    target: float  # bytes/s aimed for
    max_buffer_bytes: int
    little_inflight: int  # Little's law before the memory cap

    @property
    def request_seconds(self) -> float:
        return request_time(self.latency_s, self.bandwidth, self.request_bytes)

    @property
    def expected_bytes_per_s(self) -> float:
        """Throughput the plan can sustain: N requests of s bytes every W seconds (capped)."""
        return min(self.target, self.inflight * self.request_bytes / self.request_seconds)


def read_plan(
    latency_s: float = DEFAULT_LATENCY_S,
    bandwidth: float = DEFAULT_BANDWIDTH,
    target: float | None = None,
    max_buffer_bytes: int = 512 * MiB,
    request_bytes: int | None = None,
    inflight: int | None = None,
) -> ReadPlan:
    """Request size and depth for a reader; explicit values win, the memory cap always holds.

    The buffer holds the requests in flight plus the one being cut into windows, so N is at most
    `max_buffer_bytes // s - 1`; s itself is at most a quarter of the cap.
    """
    if latency_s < 0 or bandwidth <= 0 or max_buffer_bytes <= 0:
        raise ValueError("latency must be >= 0, bandwidth and max_buffer_bytes > 0")
    target = DEFAULT_TARGET if target is None else target
    size = request_bytes or default_request_bytes(latency_s, bandwidth)
    size = max(4096, min(size, max_buffer_bytes // 4)) // 4096 * 4096  # token-aligned (4 KiB)
    if size < 4096:
        raise ValueError(f"max_buffer_bytes {max_buffer_bytes} is too small (>= 16 KiB needed)")
    little = inflight or inflight_needed(target, latency_s, bandwidth, size)
    depth = max(1, min(little, max_buffer_bytes // size - 1, MAX_INFLIGHT))
    return ReadPlan(size, depth, latency_s, bandwidth, target, max_buffer_bytes, little)


def node_bytes_per_s(
    gpus_per_node: int, tokens_per_s_per_gpu: float, bytes_per_token: int
) -> float:
    """Token bytes one node's trainers consume per second."""
    return gpus_per_node * tokens_per_s_per_gpu * bytes_per_token


# -- what `python -m pipeline plan` prints -------------------------------------------------------
def plan_lines(
    latency_s: float,
    bandwidth: float,
    target: float,
    *,
    nodes: int = 1,
    gpus_per_node: int | None = None,
    tokens_per_s_per_gpu: float | None = None,
    bytes_per_token: int = 2,
    measured: bool = False,
) -> list[str]:
    """The report `plan` prints (pure: numbers in, lines out)."""
    threshold = latency_bound_size(latency_s, bandwidth)
    lines = [
        f"latency L                   {latency_s * 1000:.1f} ms{' (probed)' if measured else ''}",
        f"bandwidth per connection B  {human_bytes(bandwidth)}/s{' (probed)' if measured else ''}",
        f"target throughput X         {human_bytes(target)}/s",
        f"request size for latency < 10 %:  s >= 9*L*B = {human_bytes(threshold)}",
    ]
    for label, size in (("that size", threshold), ("16 MB ranges", 16 * MB)):
        w = request_time(latency_s, bandwidth, size)
        n = inflight_needed(target, latency_s, bandwidth, size)
        lines.append(
            f"in flight for {label:<13} W = L + s/B = {w:.3f} s, rate = {target / size:.1f}"
            f" req/s, N = X*W/s = {target * w / size:.2f} -> {n},"
            f" buffer N*s = {human_bytes(n * size)}"
        )
    reader = read_plan(latency_s, bandwidth, target)
    lines.append(
        f"reader default: request {reader.request_bytes / MiB:.0f} MiB, {reader.inflight}"
        f" in flight (Little: {reader.little_inflight}), buffer cap"
        f" {reader.max_buffer_bytes / MiB:.0f} MiB"
    )
    lines.append(
        f"shard size: >= one request; recommended"
        f" {recommended_shard_bytes(reader.request_bytes) // MiB} MiB"
    )
    if gpus_per_node and tokens_per_s_per_gpu:
        per_node = node_bytes_per_s(gpus_per_node, tokens_per_s_per_gpu, bytes_per_token)
        n_node = inflight_needed(per_node, latency_s, bandwidth, reader.request_bytes)
        lines.append(
            f"per node: {gpus_per_node} GPUs x {tokens_per_s_per_gpu:,.0f} tokens/s x"
            f" {bytes_per_token} B = {human_bytes(per_node)}/s, {n_node} request(s) of"
            f" {reader.request_bytes / MiB:.0f} MiB in flight;"
            f" {nodes} node(s): {human_bytes(per_node * nodes)}/s"
        )
    return lines


def shuffle_group(
    shuffle: bool,
    buffer_bytes: int | None,
    max_buffer_bytes: int,
    plan: ReadPlan,
    window_bytes: int,
) -> int:
    """Windows per shuffle group: the group's tokens are held while its windows are cut, next to
    the ranges in flight, so it takes an eighth of the buffer unless told (explicit sizes must
    leave room for two requests: the one being waited for and a partly used one)."""
    if not shuffle:
        return 0
    size = max_buffer_bytes // 8 if buffer_bytes is None else buffer_bytes
    if size + 2 * plan.request_bytes > max_buffer_bytes:
        raise ValueError(
            f"shuffle_buffer_bytes {size} plus two requests of {plan.request_bytes} bytes exceed"
            f" max_buffer_bytes {max_buffer_bytes}"
        )
    return max(1, size // window_bytes)

"""Fetcher threads for the stream reader, and the latency / bandwidth probe.

`RangeFetcher` runs `inflight` threads over a fixed list of range requests. Requests start in list
order, each only once its bytes fit in the buffer budget; results are handed to the consumer in
list order. The budget counts every byte fetched or being fetched until the consumer releases it,
so the reader's memory never exceeds it. Because budget is granted in list order, the request the
consumer waits for always started before any later one: no deadlock however small the budget.
Every read goes through `Location.read_bytes`, so `IO` (core/io_counters.py) counts it. `with_pool`
gives the fetcher's location an S3 connection pool as large as its threads.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pipeline.core.reachability import check_reachable
from pipeline.core.storage import Location

_NOT_RETRIED = (FileNotFoundError, PermissionError, IsADirectoryError)


class FetchError(OSError):
    """A range read failed after its retries; the message names the object and the range."""


class Request(NamedTuple):
    location: Location
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class FetchStats:
    """What the fetchers did (bytes and requests actually read); updated under the fetcher lock."""

    requests: int = 0
    bytes: int = 0
    retries: int = 0
    max_inflight: int = 0
    max_buffered_bytes: int = 0
    wait_s: float = 0.0  # time the consumer spent waiting for data
    windows: int = 0  # windows handed to the consumer
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


def read_range(
    request: Request,
    retries: int,
    stop: threading.Event | None = None,
    stats: FetchStats | None = None,
) -> bytes:
    """One range GET with exponential backoff; a short read counts as a failure."""
    loc, attempt = request.location, 0
    while True:
        try:
            data = loc.read_bytes(request.start, request.end)
            if len(data) != request.size:
                raise OSError(
                    f"short read: {len(data)} of {request.size} bytes (object smaller"
                    " than the manifest says?)"
                )
            return data
        except _NOT_RETRIED as e:
            raise FetchError(f"{loc.uri} bytes {request.start}-{request.end}: {e!r}") from e
        except Exception as e:
            if attempt >= retries or (stop is not None and stop.is_set()):
                raise FetchError(
                    f"{loc.uri} bytes {request.start}-{request.end}: failed after"
                    f" {attempt + 1} attempt(s): {e!r}"
                ) from e
        attempt += 1
        if stats is not None:
            with stats._lock:
                stats.retries += 1
        if stop is not None:
            stop.wait(0.05 * 2**attempt)
        else:
            time.sleep(0.05 * 2**attempt)


class RangeFetcher:
    """`inflight` threads fetching `requests` in order within `budget_bytes`; `get(i)` in order."""

    def __init__(
        self,
        requests: Sequence[Request],
        inflight: int,
        budget_bytes: int,
        retries: int,
        stats: FetchStats,
        name: str = "stream-reader",
    ) -> None:
        if requests and max(r.size for r in requests) > budget_bytes:
            raise ValueError(f"a request is larger than the buffer budget {budget_bytes}")
        self._requests = list(requests)
        self._budget = budget_bytes
        self._retries = retries
        self._stats = stats
        self._cond = threading.Condition(stats._lock)
        self._stop = threading.Event()
        self._next = 0  # next request to start
        self._results: dict[int, bytes | BaseException] = {}
        self._buffered = 0
        self._active = 0
        count = max(1, min(inflight, len(self._requests)))
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-fetch-{i}", daemon=True)
            for i in range(count)
        ]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while (
                    not self._stop.is_set()
                    and self._next < len(self._requests)
                    and (self._buffered + self._requests[self._next].size > self._budget)
                ):
                    self._cond.wait()
                if self._stop.is_set() or self._next >= len(self._requests):
                    return
                index, request = self._next, self._requests[self._next]
                self._next += 1
                self._buffered += request.size
                self._active += 1
                s = self._stats
                s.max_inflight = max(s.max_inflight, self._active)
                s.max_buffered_bytes = max(s.max_buffered_bytes, self._buffered)
            result: bytes | BaseException
            try:
                result = read_range(request, self._retries, self._stop, self._stats)
            except BaseException as e:  # handed to the consumer, raised there
                result = e
            with self._cond:
                self._active -= 1
                if not isinstance(result, BaseException):
                    self._stats.requests += 1
                    self._stats.bytes += len(result)
                self._results[index] = result
                self._cond.notify_all()

    def get(self, index: int) -> bytes:
        """Result of request `index` (call in order); raises its FetchError. Release it later."""
        start = time.perf_counter()
        with self._cond:
            while index not in self._results and not self._stop.is_set():
                self._cond.wait()
            self._stats.wait_s += time.perf_counter() - start
            if index not in self._results:
                raise RuntimeError("fetcher closed")
            result = self._results.pop(index)
        if isinstance(result, BaseException):
            self.release(self._requests[index].size)
            raise result
        return result

    def release(self, nbytes: int) -> None:
        """The consumer dropped `nbytes` of fetched data: let fetchers use the budget again."""
        with self._cond:
            self._buffered -= nbytes
            self._cond.notify_all()

    def close(self) -> None:
        """Stop every fetcher thread and wait for it (a request in progress finishes first)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self._results.clear()


# -- probe -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    latency_s: float  # median time of small range GETs
    bandwidth: float  # bytes/s of one connection, from the best large range GET
    small_times: tuple[float, ...]
    large_bytes: int
    large_times: tuple[float, ...]


def probe_storage(
    loc: Location,
    size: int,
    small_bytes: int = 4096,
    large_bytes: int = 16 * 2**20,
    samples: int = 5,
    large_samples: int = 2,
) -> Probe:
    """Measure first-byte latency (small GETs) and one connection's bandwidth (large GETs)."""

    def timed(start: int, end: int) -> float:
        t0 = time.perf_counter()
        read_range(Request(loc, start, end), retries=2)
        return time.perf_counter() - t0

    small_bytes = max(1, min(small_bytes, size))
    small = tuple(timed(0, small_bytes) for _ in range(samples))
    latency = statistics.median(small)
    large_bytes = max(1, min(large_bytes, size))
    large = tuple(timed(0, large_bytes) for _ in range(large_samples))
    transfer = max(min(large) - latency, 1e-6)
    return Probe(latency, large_bytes / transfer, small, large_bytes, large)


def probe_uri(uri: str, storage=None) -> Probe:
    """Probe an object, or the largest shard of a committed version / dataset folder."""
    from pipeline.formats.manifest import ManifestError, load_manifest
    from pipeline.formats.versions import resolve_version

    loc = Location.from_uri(uri, storage)
    check_reachable(loc)
    try:
        version = resolve_version(loc)
        shards = load_manifest(version)["shards"]
    except (ManifestError, FileNotFoundError, NotADirectoryError):
        return probe_storage(loc, int(loc.fs.size(loc.path)))
    if not shards:
        raise ValueError(f"{uri}: the version has no shards to probe")
    biggest = max(shards, key=lambda s: s["bin_bytes"])
    return probe_storage(version / biggest["bin"], biggest["bin_bytes"])


def with_pool(loc: Location, connections: int) -> Location:
    """The same location with an S3 connection pool of at least `connections`."""
    if loc.is_local:
        return loc
    options = dict(loc.fs.storage_options)
    config = dict(options.get("config_kwargs") or {})
    if config.get("max_pool_connections", 10) >= connections:
        return loc
    options["config_kwargs"] = {**config, "max_pool_connections": connections}
    return Location(type(loc.fs)(**options), loc.path)

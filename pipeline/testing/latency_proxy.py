"""A TCP proxy on loopback that adds first-byte latency and caps each connection's bandwidth.

`tc netem` is not available here; this stands in for a far object store:

    with LatencyProxy("http://127.0.0.1:5000", latency_s=0.05, bandwidth=50e6) as proxy:
        ...  # point the S3 client at proxy.endpoint
        proxy.counters()  # requests, bytes each way, active and max concurrently active requests

- Latency: each HTTP request on a connection (keep-alive included) waits `latency_s` before the
  first bytes of its response are forwarded. A request starts when the client sends bytes while
  no request is open on the connection; it ends when its response is complete (framed by
  Content-Length or chunked encoding; 1xx interim responses skipped; HEAD/204/304 have no body).
- Bandwidth: a token bucket per connection and direction, `bandwidth` bytes/s.
- Counters are independent of the client: what really crossed the wire.

- Gate (tests): `hold_answers_until_active(n)` holds every answer until n requests are open at
  once, then lets them all go: a client that keeps n requests in flight is shown doing so
  whatever the machine's speed or scheduling, not only when its requests happen to overlap.

The proxy runs its own asyncio loop in a thread; `stop()` closes the server and every connection
and joins the thread. `latency_s` and `bandwidth` may be changed between requests.
`python -m pipeline.testing.latency_proxy --upstream URL --latency-ms 50` runs one in the
foreground.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

_CHUNK = 64 * 1024


@dataclass
class ProxyCounters:
    requests: int = 0
    bytes_to_server: int = 0
    bytes_to_client: int = 0
    connections: int = 0
    active: int = 0
    max_active: int = 0


class _TokenBucket:
    """`rate` bytes/s with a burst of `burst` bytes; `await spend(n)` waits for the tokens."""

    def __init__(self, rate: float | None, burst: int = _CHUNK) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), time.monotonic()

    async def spend(self, n: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate) - n
        self.stamp = now
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.rate)


class ResponseFraming:
    """Feeds on a response's bytes; `feed` returns True once the (final) response is complete."""

    def __init__(self, method: bytes) -> None:
        self.no_body = method == b"HEAD"
        self.head = b""
        self.state = "head"  # head -> body | chunk_size | chunk_data | trailer | until_close
        self.left = 0
        self.line = b""

    def feed(self, data: bytes) -> bool:
        while data:
            if self.state == "head":
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return False
                data, head, self.head = self.head[end + 4 :], self.head[:end], b""
                if self._start_body(head):
                    return True
            elif self.state == "body":
                used = min(self.left, len(data))
                self.left -= used
                data = data[used:]
                if self.left == 0:
                    return True
            elif self.state == "chunk_data":
                used = min(self.left, len(data))
                self.left -= used
                data = data[used:]
                if self.left == 0:
                    self.state = "chunk_size"
            elif self.state in ("chunk_size", "trailer"):
                self.line += data
                end = self.line.find(b"\r\n")
                if end < 0:
                    return False
                line, data, self.line = self.line[:end], self.line[end + 2 :], b""
                if self.state == "trailer":
                    if not line:
                        return True
                elif line:  # the CRLF after a chunk's data gives an empty line: skip it
                    size = int(line.split(b";")[0], 16)
                    self.state, self.left = ("chunk_data", size) if size else ("trailer", 0)
            else:  # until_close
                return False
        return False

    def _start_body(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(b":")
            headers[key.strip().lower()] = value.strip().lower()
        if 100 <= status < 200:  # interim (100 Continue): the final response follows
            self.state = "head"
            return False
        if self.no_body or status in (204, 304):
            return True
        if b"chunked" in headers.get(b"transfer-encoding", b""):
            self.state = "chunk_size"
            return False
        if b"content-length" in headers:
            self.left = int(headers[b"content-length"])
            self.state = "body"
            return self.left == 0
        self.state = "until_close"
        return False


class LatencyProxy:
    def __init__(
        self,
        upstream: str,
        latency_s: float = 0.0,
        bandwidth: float | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        parts = urlsplit(upstream if "://" in upstream else f"tcp://{upstream}")
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.latency_s, self.bandwidth = latency_s, bandwidth
        self.host, self.port = host, port
        self._counters = ProxyCounters()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._gate: asyncio.Event | None = None  # set: answers flow (no gate armed)
        self._gate_at = 0  # open the gate once this many requests are open at once
        self._gate_guard_s = 0.0

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def counters(self) -> ProxyCounters:
        with self._lock:
            return ProxyCounters(**vars(self._counters))

    def reset_counters(self) -> None:
        """Zero the totals; max_active restarts from the requests open now."""
        with self._lock:
            active = self._counters.active
            self._counters = ProxyCounters(active=active, max_active=active)

    def hold_answers_until_active(self, n: int, guard_s: float = 120.0) -> None:
        """From now on, hold every answer until `n` requests are open at once (then answer as
        usual). `guard_s` only ends a hold that a client with fewer in flight would never end
        (the answers then go, and the test's count shows fewer than `n`)."""

        async def arm() -> None:
            self._gate_at, self._gate_guard_s = n, guard_s
            self._gate.clear()

        asyncio.run_coroutine_threadsafe(arm(), self._loop).result()

    def _count(self, **amounts: int) -> None:
        with self._lock:
            c = self._counters
            for key, value in amounts.items():
                setattr(c, key, getattr(c, key) + value)
            c.max_active = max(c.max_active, c.active)
            if self._gate_at and c.active >= self._gate_at:  # on the loop's thread
                self._gate_at = 0
                self._gate.set()

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> LatencyProxy:
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()
        self._thread = None

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # reported to start() if it happens before ready
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._gate = asyncio.Event()
        self._gate.set()
        tasks: set[asyncio.Task] = set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            tasks.add(task)
            try:
                await self._relay(reader, writer)
            except asyncio.CancelledError:
                pass  # stop(): end quietly (asyncio logs a cancelled connection callback)
            finally:
                tasks.discard(task)

        server = await asyncio.start_server(on_connect, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one connection ----------------------------------------------------------------------------
    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        self._count(connections=1)
        state = {"open": None}  # the ResponseFraming of the request open on this connection
        pumps = [
            asyncio.create_task(self._requests(client_r, server_w, state)),
            asyncio.create_task(self._responses(server_r, client_w, state)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            if state["open"] is not None:
                self._count(active=-1)
            for w in (client_w, server_w):
                w.close()

    async def _requests(
        self, client_r: asyncio.StreamReader, server_w: asyncio.StreamWriter, state: dict
    ) -> None:
        bucket = _TokenBucket(self.bandwidth)
        while data := await client_r.read(_CHUNK):
            if state["open"] is None:
                state["open"] = ResponseFraming(data.split(b" ", 1)[0])
                state["waited"] = False
                self._count(requests=1, active=1)
            await bucket.spend(len(data))
            server_w.write(data)
            await server_w.drain()
            self._count(bytes_to_server=len(data))
        with contextlib.suppress(OSError):
            server_w.write_eof()

    async def _responses(
        self, server_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, state: dict
    ) -> None:
        bucket = _TokenBucket(self.bandwidth)
        while data := await server_r.read(_CHUNK):
            framing = state["open"]
            if framing is not None and not state["waited"]:
                state["waited"] = True
                if not self._gate.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._gate.wait(), self._gate_guard_s)
                await asyncio.sleep(self.latency_s)
            await bucket.spend(len(data))
            client_w.write(data)
            await client_w.drain()
            self._count(bytes_to_client=len(data))
            if framing is not None and framing.feed(data):
                state["open"] = None
                self._count(active=-1)
        raise ConnectionResetError("upstream closed")  # ends the relay of this connection


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.testing.latency_proxy")
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:5000")
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--bandwidth-mbps", type=float, help="per connection, MB/s")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    bandwidth = args.bandwidth_mbps * 1e6 if args.bandwidth_mbps else None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with LatencyProxy(args.upstream, args.latency_ms / 1000, bandwidth, port=args.port) as proxy:
        print(f"proxy {proxy.endpoint} -> {args.upstream}", flush=True)
        while not stop.wait(0.5):
            pass
        print(f"stopped: {proxy.counters()}", flush=True)


if __name__ == "__main__":
    main()

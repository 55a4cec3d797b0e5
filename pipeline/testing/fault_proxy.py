"""An HTTP-aware TCP proxy on loopback that injects S3 faults, for tests and benchmarks.

    python -m pipeline.testing.fault_proxy --upstream http://127.0.0.1:5000 --slowdown-every 7

It sits in front of an S3 endpoint (SeaweedFS, any S3) and reads each HTTP/1.1 request whole (h11
does the framing). Then, by the request's number n (1, 2, ... over all connections):
- a permanent rule whose method and key match answers its error (e.g. 403 AccessDenied) forever;
- else every `slowdown_every`-th request is answered 503 SlowDown (S3's "reduce your request
  rate"), every `reset_every`-th gets a TCP reset, every `stall_every`-th gets no answer for
  `stall_seconds` (longer than the client's read timeout) and then a closed connection;
- else the request is forwarded upstream and the answer relayed unchanged; the first `count`
  requests matching a hold rule are kept waiting `seconds` (or until their client closes the
  connection: then nothing is forwarded) before that, so a test knows its client is mid-request
  (`holding` names the clients waiting now).
A faulted request never reaches the upstream, so a retry can not apply a write twice (which
matters for conditional writes such as If-None-Match). `counters` tells what happened, as an
independent check of the client's retries. `/moto-api/` requests are never faulted.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import struct
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

import h11

_ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
    "<Message>{message}</Message><Resource>{resource}</Resource>"
    "<RequestId>fault-proxy-{n}</RequestId></Error>"
)
_MAX_BODY_READ = 1 << 16


@dataclass(frozen=True)
class PermanentFault:
    """Answer every matching request with this error: `key` is a regex searched in the path."""

    key: str
    methods: tuple[str, ...] = ("GET", "HEAD")
    status: int = 403
    code: str = "AccessDenied"
    message: str = "Access Denied"

    def matches(self, method: str, path: str) -> bool:
        return method in self.methods and re.search(self.key, path) is not None


@dataclass(frozen=True)
class Hold:
    """Keep the first `count` matching requests waiting `seconds`, then forward them; one whose
    client closes the connection meanwhile (killed) ends its hold and is not forwarded."""

    key: str
    seconds: float
    count: int = 1
    methods: tuple[str, ...] = ("GET",)

    def matches(self, method: str, path: str) -> bool:
        return method in self.methods and re.search(self.key, path) is not None


@dataclass(frozen=True)
class FaultPlan:
    slowdown_every: int = 0  # 0: never
    reset_every: int = 0
    stall_every: int = 0
    stall_seconds: float = 5.0
    permanent: tuple[PermanentFault, ...] = ()
    holds: tuple[Hold, ...] = ()

    def fault_for(self, n: int, method: str, path: str) -> str | PermanentFault | None:
        if path.startswith("/moto-api/"):
            return None
        for rule in self.permanent:
            if rule.matches(method, path):
                return rule
        for kind, every in (
            ("slowdown", self.slowdown_every),
            ("reset", self.reset_every),
            ("stall", self.stall_every),
        ):
            if every and n % every == 0:
                return kind
        return None


@dataclass
class FaultProxy:
    """Run the proxy on a background thread: `with FaultProxy(upstream, plan) as proxy: ...`."""

    upstream: str
    plan: FaultPlan = field(default_factory=FaultPlan)
    counters: Counter = field(default_factory=Counter)
    endpoint: str = ""
    host: str = "127.0.0.1"  # where it listens (a test bridge's address, for other namespaces)

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.upstream)
        self._upstream_addr = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._requests = 0
        self._holds_left = [rule.count for rule in self.plan.holds]
        # (host, port) of each client whose request is being held now: a test finds the process
        # stuck in it by that socket address.
        self.holding: list[tuple[str, int]] = []
        # (method, request target as sent: path and query) of every request received, in order:
        # what a test counts, independent of the client and of the server's internals.
        self.requests: list[tuple[str, str]] = []
        # Every key exists from the start, so that another thread can copy the dict any time.
        for key in (
            "requests",
            "forwarded",
            "slowdown",
            "reset",
            "stall",
            "permanent",
            "held",
            "client_errors",
            "bytes_down",
        ):
            self.counters[key] = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        started = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, args=(started,), daemon=True, name="fault-proxy"
        )
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, self.host, 0)
        )
        port = self._server.sockets[0].getsockname()[1]
        self.endpoint = f"http://{self.host}:{port}"
        started.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        self._server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def snapshot(self) -> dict[str, int]:
        return dict(self.counters)

    # -- one client connection ---------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                received = await _read_message(conn, reader, writer)
                if received is None:
                    return
                request, body = received
                self._requests += 1
                n = self._requests
                method = request.method.decode()
                self.requests.append((method, request.target.decode()))
                path = urllib.parse.unquote(request.target.decode().split("?", 1)[0])
                self.counters["requests"] += 1
                fault = self.plan.fault_for(n, method, path)
                if fault == "reset":
                    self.counters["reset"] += 1
                    _reset(writer)
                    return
                if fault == "stall":
                    self.counters["stall"] += 1
                    await asyncio.sleep(self.plan.stall_seconds)
                    return
                if fault == "slowdown":
                    self.counters["slowdown"] += 1
                    await _send_error(
                        conn,
                        writer,
                        503,
                        "SlowDown",
                        "Please reduce your request rate.",
                        path,
                        n,
                        method,
                    )
                elif isinstance(fault, PermanentFault):
                    self.counters["permanent"] += 1
                    await _send_error(
                        conn, writer, fault.status, fault.code, fault.message, path, n, method
                    )
                else:
                    if not await self._hold_if_planned(method, path, reader, writer, conn):
                        return  # its client went away while held: nothing to answer
                    self.counters["forwarded"] += 1
                    await self._forward(conn, writer, request, body)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, asyncio.IncompleteReadError):
            self.counters["client_errors"] += 1
        except asyncio.CancelledError:
            # Shutdown. Not re-raised: Python 3.11.7's asyncio.streams calls task.exception()
            # on a cancelled handler task and logs a spurious traceback.
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _hold_if_planned(
        self,
        method: str,
        path: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: h11.Connection,
    ) -> bool:
        """Hold a matching request (the rule's `seconds`, or until its client closes the
        connection); False when the client went away meanwhile."""
        for i, rule in enumerate(self.plan.holds):
            if self._holds_left[i] and rule.matches(method, path):
                self._holds_left[i] -= 1
                self.counters["held"] += 1
                client = writer.get_extra_info("peername")[:2]
                self.holding.append(client)
                try:
                    return await _open_after(reader, conn, rule.seconds)
                finally:
                    self.holding.remove(client)
        return True

    async def _forward(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request, body: bytes
    ) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream_addr)
        upstream = h11.Connection(h11.CLIENT)
        try:
            # The body is already here, so the client's Expect: 100-continue is answered by us.
            headers = [(k, v) for k, v in request.headers if k.lower() != b"expect"]
            out = upstream.send(
                h11.Request(method=request.method, target=request.target, headers=headers)
            )
            if body:
                out += upstream.send(h11.Data(data=body))
            out += upstream.send(h11.EndOfMessage())
            up_writer.write(out)
            await up_writer.drain()
            response, payload = await _read_message(upstream, up_reader, None)
        finally:
            up_writer.close()
        self.counters["bytes_down"] += len(payload)
        data = conn.send(
            h11.Response(
                status_code=response.status_code, headers=response.headers, reason=response.reason
            )
        )
        if payload:
            data += conn.send(h11.Data(data=payload))
        data += conn.send(h11.EndOfMessage())
        writer.write(data)
        await writer.drain()


async def _open_after(reader: asyncio.StreamReader, conn: h11.Connection, seconds: float) -> bool:
    """Wait `seconds`, or until the client closes its connection (a killed process's sockets
    are closed by its kernel): whether it is still open."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        try:
            data = await asyncio.wait_for(reader.read(_MAX_BODY_READ), left)
        except asyncio.TimeoutError:
            return True
        except ConnectionError:
            return False
        if not data:
            return False
        conn.receive_data(data)  # a pipelined next request: h11 keeps it for the next cycle
    return True


async def _read_message(
    conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None
):
    """One whole request (server side) or response (client side): (head, body), or None at EOF."""
    head, body = None, bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if writer is not None and head is not None and conn.they_are_waiting_for_100_continue:
                writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
                await writer.drain()
            conn.receive_data(await reader.read(_MAX_BODY_READ))
        elif isinstance(event, (h11.Request, h11.Response)):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return head, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            if head is None:
                return None
            raise ConnectionError("connection closed in the middle of a message")
        # h11.InformationalResponse from upstream (100 Continue): nothing to relay


async def _send_error(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    code: str,
    message: str,
    resource: str,
    n: int,
    method: str,
) -> None:
    body = _ERROR_XML.format(code=code, message=message, resource=resource, n=n).encode()
    headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    data = conn.send(h11.Response(status_code=status, headers=headers))
    if method != "HEAD":  # an answer to HEAD has headers only
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    writer.write(data)
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0) rather than FIN: the client sees 'connection reset by peer'."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.testing.fault_proxy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--upstream", required=True, help="the S3 endpoint to protect")
    parser.add_argument("--slowdown-every", type=int, default=0)
    parser.add_argument("--reset-every", type=int, default=0)
    parser.add_argument("--stall-every", type=int, default=0)
    parser.add_argument("--stall-seconds", type=float, default=5.0)
    parser.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="KEY_REGEX",
        help="answer GET/HEAD of matching keys 403 AccessDenied forever",
    )
    parser.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="KEY_REGEX=SECONDS",
        help="keep the first GET of a matching key waiting SECONDS before forwarding it",
    )
    args = parser.parse_args(argv)
    holds = []
    for spec in args.hold:
        key, _, seconds = spec.rpartition("=")
        holds.append(Hold(key, float(seconds)))
    plan = FaultPlan(
        args.slowdown_every,
        args.reset_every,
        args.stall_every,
        args.stall_seconds,
        tuple(PermanentFault(key) for key in args.deny),
        tuple(holds),
    )
    with FaultProxy(args.upstream, plan) as proxy:
        print(
            f"fault proxy on {proxy.endpoint} -> {args.upstream}; Ctrl-C prints the counts",
            flush=True,
        )
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print(proxy.snapshot())


if __name__ == "__main__":
    main()

"""HTTP messages and WARC records as a crawler stores them, for the crawl sample and corpus.

`Archive` writes records with warcio (its WARCWriter: one gzip member per record when `gzip`,
else plain bytes the caller may compress whole) in Common Crawl's order, a warcinfo record
first, then per capture request, response (or revisit), metadata, linked by
WARC-Concurrent-To; record ids come from the caller's seeded generator and dates from a fixed
clock, so the bytes depend only on the inputs. `response_bytes` builds the HTTP message as
received: status line, headers, then the body with its content and transfer codings applied
(gzip, deflate, br; chunked), or decoded with the codings renamed X-Crawler-* as Common
Crawl's crawler stores it.
"""

from __future__ import annotations

import gzip
import io
import random
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import brotli
from warcio.warcwriter import WARCWriter

USER_AGENT = "pipeline-sample-crawler/1.0 (+https://crawler.example.org/about)"


def encode(body: bytes, coding: str) -> bytes:
    """`body` with one HTTP content coding applied (deterministic: gzip without a timestamp)."""
    if coding == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0)
    if coding == "deflate":  # RFC 9110's deflate: the zlib format
        return zlib.compress(body, 6)
    if coding == "br":
        return brotli.compress(body, quality=5)
    raise ValueError(f"unknown content coding {coding!r}")


def chunked(body: bytes, rng: random.Random) -> bytes:
    """`body` in HTTP/1.1 chunked transfer coding, chunks of 1-4 KB, with a closing chunk."""
    out, at = [], 0
    while at < len(body):
        size = rng.randint(1024, 4096)
        piece = body[at : at + size]
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
        at += size
    return b"".join(out) + b"0\r\n\r\n"


@dataclass
class Response:
    """One HTTP response: `body` as the server meant it (before any coding)."""

    status: int
    reason: str
    content_type: str | None
    body: bytes
    codings: tuple[str, ...] = ()  # content codings the server applied, in order
    transfer_chunked: bool = False
    stored_decoded: bool = False  # Common Crawl style: body stored decoded, X-Crawler-* headers
    headers: list[tuple[str, str]] = field(default_factory=list)  # more headers (Location...)


def response_bytes(resp: Response, when: datetime, rng: random.Random) -> bytes:
    """The HTTP message as a WARC response record's block holds it."""
    head = [("Date", http_date(when)), ("Server", rng.choice(("nginx/1.22.1", "Apache/2.4.57")))]
    if resp.content_type:
        head.append(("Content-Type", resp.content_type))
    head += resp.headers
    body = resp.body
    for coding in resp.codings:
        body = encode(body, coding)
    if resp.stored_decoded:
        if resp.codings:
            head.append(("X-Crawler-Content-Encoding", ", ".join(resp.codings)))
            head.append(("X-Crawler-Content-Length", str(len(body))))
        if resp.transfer_chunked:
            head.append(("X-Crawler-Transfer-Encoding", "chunked"))
        body = resp.body
        head.append(("Content-Length", str(len(body))))
    else:
        if resp.codings:
            head.append(("Content-Encoding", ", ".join(resp.codings)))
        if resp.transfer_chunked:
            head.append(("Transfer-Encoding", "chunked"))
            body = chunked(body, rng)
        else:
            head.append(("Content-Length", str(len(body))))
    head += [("Vary", "Accept-Encoding"), ("Connection", "close")]
    lines = [f"HTTP/1.1 {resp.status} {resp.reason}"] + [f"{k}: {v}" for k, v in head]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def request_bytes(url: str) -> bytes:
    host, _, path = url.split("://", 1)[1].partition("/")
    lines = [
        f"GET /{path} HTTP/1.1",
        f"Host: {host}",
        f"User-Agent: {USER_AGENT}",
        "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "Accept-Language: en-US,en;q=0.5",
        "Accept-Encoding: br,gzip",
        "Connection: Keep-Alive",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_date(when: datetime) -> str:
    return when.strftime("%a, %d %b %Y %H:%M:%S GMT")


class Archive:
    """A WARC file being written: records in order, each one's offset kept (`offsets`)."""

    def __init__(self, out: io.BytesIO, gzip_members: bool, version: str, rng: random.Random,
                 start: datetime) -> None:  # fmt: skip
        self.out, self.rng, self.clock = out, rng, start
        self.version = version
        self.writer = WARCWriter(out, gzip=gzip_members, warc_version=version)
        self.warcinfo_id: str | None = None
        self.offsets: dict[str, int] = {}  # record id -> offset of its first byte (or member)

    def record_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def warc_date(self, when: datetime) -> str:
        if self.version == "WARC/1.1":  # 1.1 allows sub-second precision
            return when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    def tick(self) -> datetime:
        self.clock += timedelta(
            seconds=self.rng.randint(1, 9), milliseconds=self.rng.randint(0, 999)
        )
        return self.clock

    def write(self, uri: str, kind: str, block: bytes, content_type: str,
              headers: dict[str, str], when: datetime) -> str:  # fmt: skip
        rid = headers.pop("WARC-Record-ID", None) or self.record_id()
        fields = {"WARC-Record-ID": rid, "WARC-Date": self.warc_date(when), **headers}
        if self.warcinfo_id and kind != "warcinfo":
            fields["WARC-Warcinfo-ID"] = self.warcinfo_id
        record = self.writer.create_warc_record(
            uri, kind, payload=io.BytesIO(block), length=len(block),
            warc_content_type=content_type, warc_headers_dict=fields,
        )  # fmt: skip
        self.offsets[rid] = self.out.tell()
        self.writer.write_record(record)
        return rid

    def warcinfo(self, filename: str, fields: dict[str, str]) -> str:
        block = "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode()
        headers = {"WARC-Filename": filename}
        self.warcinfo_id = self.write("", "warcinfo", block, "application/warc-fields", headers,
                                      self.clock)  # fmt: skip
        return self.warcinfo_id

    def capture(self, url: str, http: bytes, metadata: dict[str, str], when: datetime,
                headers: dict[str, str] | None = None) -> str:  # fmt: skip
        """request, response, metadata of one fetch at `when` (from `tick`); the response's
        record id."""
        ip = f"192.0.2.{self.rng.randint(1, 254)}"  # TEST-NET-1: documentation addresses
        response_id = self.record_id()
        request = self.write(
            url,
            "request",
            request_bytes(url),
            "application/http; msgtype=request",
            {"WARC-IP-Address": ip, "WARC-Concurrent-To": response_id},
            when,
        )
        self.write(url, "response", http, "application/http; msgtype=response",
                   {"WARC-Record-ID": response_id, "WARC-IP-Address": ip,
                    "WARC-Concurrent-To": request, **(headers or {})}, when)  # fmt: skip
        self.metadata(url, response_id, metadata, when)
        return response_id

    def metadata(self, url: str, refers: str, fields: dict[str, str], when: datetime) -> str:
        block = "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode()
        return self.write(url, "metadata", block, "application/warc-fields",
                          {"WARC-Concurrent-To": refers}, when)  # fmt: skip

    def revisit(self, url: str, http_head: bytes, refers_to: str, refers_url: str,
                refers_date: str, digest: str, when: datetime) -> str:  # fmt: skip
        """A revisit (identical payload digest): the HTTP headers only, no body."""
        headers = {
            "WARC-Profile": "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest",
            "WARC-Refers-To": refers_to,
            "WARC-Refers-To-Target-URI": refers_url,
            "WARC-Refers-To-Date": refers_date,
            "WARC-Payload-Digest": digest,
        }
        return self.write(url, "revisit", http_head, "application/http; msgtype=response",
                          headers, when)  # fmt: skip

    def conversion(self, url: str, text: str, refers_to: str, language: str) -> str:
        when = self.tick()
        headers = {"WARC-Refers-To": refers_to, "WARC-Identified-Content-Language": language}
        return self.write(url, "conversion", text.encode(), "text/plain", headers, when)

"""Small WARC files built in tests: records written out by hand (WARC/1.0 text, HTTP messages
as crawlers record them), each record its own gzip member like Common Crawl's, or the whole file
one gzip stream. Test data only; the product reads WARC with fastwarc."""

from __future__ import annotations

import gzip
import io
import uuid
from dataclasses import dataclass, field


@dataclass
class Record:
    """One WARC record; `body` is the HTTP body as sent (already encoded, chunked, ...)."""

    kind: str = "response"
    url: str = "http://example.com/"
    body: bytes = b"<html><body><p>Hello.</p></body></html>"
    status: str = "200 OK"
    headers: list[tuple[str, str]] = field(
        default_factory=lambda: [("Content-Type", "text/html; charset=utf-8")]
    )
    date: str = "2024-05-01T12:00:00Z"
    record_id: str = ""
    warc_headers: list[tuple[str, str]] = field(default_factory=list)
    http: bool = True  # False: the body is the record's block (warcinfo, conversion, ...)

    def __post_init__(self) -> None:
        if not self.record_id:
            self.record_id = f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, self.kind + self.url)}>"

    def block(self) -> bytes:
        if not self.http:
            return self.body
        head = f"HTTP/1.1 {self.status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in self.headers)
        return head.encode() + b"\r\n" + self.body

    def to_bytes(self) -> bytes:
        block = self.block()
        content_type = "application/http; msgtype=response" if self.http else "text/plain"
        lines = [
            "WARC/1.0",
            f"WARC-Type: {self.kind}",
            f"WARC-Record-ID: {self.record_id}",
            f"WARC-Target-URI: {self.url}",
            f"WARC-Date: {self.date}",
            f"Content-Type: {content_type}",
            *(f"{k}: {v}" for k, v in self.warc_headers),
            f"Content-Length: {len(block)}",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


def page(i: int, words: int = 40) -> Record:
    """A distinct HTML page: its own URL and text."""
    text = " ".join(f"word{(i * 7919 + k) % 1013}" for k in range(words))
    body = f"<html><head><title>Page {i}</title></head><body><article><h1>Title {i}</h1>"
    body += f"<p>Page {i} says: {text}.</p><p>Second paragraph of page {i}.</p></article>"
    return Record(url=f"http://example.com/{i}", body=(body + "</body></html>").encode())


def members(records: list[Record]) -> list[bytes]:
    """Each record as its own gzip member (Common Crawl's layout), in order."""
    return [gzip.compress(r.to_bytes(), mtime=0) for r in records]


def per_record_gzip(records: list[Record]) -> bytes:
    return b"".join(members(records))


def whole_stream_gzip(records: list[Record]) -> bytes:
    return gzip.compress(b"".join(r.to_bytes() for r in records), mtime=0)


def uncompressed(records: list[Record]) -> bytes:
    return b"".join(r.to_bytes() for r in records)


def warcinfo() -> Record:
    return Record(kind="warcinfo", url="", body=b"software: test\r\n", http=False)


def request(url: str = "http://example.com/") -> Record:
    body = f"GET / HTTP/1.1\r\nHost: {url}\r\n\r\n".encode()
    return Record(kind="request", url=url, body=body, http=False, record_id="")


def brotli_bytes(data: bytes) -> bytes:
    """`data` brotli-compressed (fastwarc's writer: no brotli package needed)."""
    from fastwarc.stream_io import BrotliWriter

    out = io.BytesIO()
    writer = BrotliWriter(out)
    writer.write(data)
    writer.close()  # flushes (finish alone leaves the stream unfinished)
    return out.getvalue()


def chunked(data: bytes, size: int = 50) -> bytes:
    """`data` in HTTP/1.1 chunked transfer coding."""
    parts = [b"%x\r\n%s\r\n" % (len(data[i : i + size]), data[i : i + size])
             for i in range(0, len(data), size)]  # fmt: skip
    return b"".join(parts) + b"0\r\n\r\n"


def random_page(seed: int, words: int = 2000) -> Record:
    """A page of `words` pseudo-random words (compresses like text, not like a pattern)."""
    import random

    rng = random.Random(seed)
    heads = ("tal", "mor", "ven", "quo", "dri", "sel", "pan", "hek", "bru", "cim")
    tails = ("a", "ist", "umen", "or", "ine", "ab", "eth", "oss", "ry", "ul")
    vocab = [f"{h}{m}{t}" for h in heads for m in ("", "an", "ol", "ek") for t in tails]
    paras = [" ".join(rng.choice(vocab) for _ in range(100)) for _ in range(words // 100)]
    body = f"<html><head><title>Page {seed}</title></head><body><nav>Home | About</nav>"
    body += "<article>" + "".join(f"<p>{p}.</p>" for p in paras) + "</article></body></html>"
    return Record(url=f"http://example.com/{seed}", body=body.encode())


def write_corpus(folder, files: int = 3, pages: int = 120) -> list[Record]:
    """A crawl of `files` WARC files (Common Crawl's per-record gzip, one whole-stream gzip,
    one uncompressed when there are three or more), each with a warcinfo, request records, a
    404 and an image, and pages that repeat across files (for dedup); the records written."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for f in range(files):
        records = [warcinfo()]
        for i in range(pages):
            seed = f * pages + i if i % 10 else i  # every tenth page is in every file
            records += [request(f"http://example.com/{seed}"), random_page(seed)]
        records.append(Record(url=f"http://example.com/gone{f}", status="404 Not Found"))
        odd = [("Content-Type", "text/html"), ("Content-Encoding", "compress")]  # quarantined
        records.append(Record(url=f"http://example.com/odd{f}", headers=odd))
        image = [("Content-Type", "image/png")]
        records.append(Record(url=f"http://example.com/{f}.png", headers=image, body=b"\x89PNG"))
        if f == 1:
            name, data = f"crawl-{f}.warc.gz", whole_stream_gzip(records)
        elif f == 2:
            name, data = f"crawl-{f}.warc", uncompressed(records)
        else:
            name, data = f"crawl-{f}.warc.gz", per_record_gzip(records)
        (folder / name).write_bytes(data)
        written += records
    return written

"""The read pass on web archives, part by part, outside the pipeline (bench extract's parts).

Each part is the plain library call on the previous part's output, so that its time is that
part's alone: `parse_fastwarc` (records and raw HTTP bodies, nothing decoded), `http_decode`
(transfer and content codings removed, then the charset: BOM, HTTP header, <meta>, detection,
as browsers do), `extract_all` (resiliparse's extract_plain_text, main content), and
`curate_all` (a config's curation chain, pipeline/curate/chain.py, on the extracted texts).
`parse_warcio` parses the same files with warcio, for reference. None of this is the
pipeline's reader: the whole run is measured apart (bench/extract.py).
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

WARC_SUFFIXES = (".warc", ".warc.gz", ".warc.wet.gz")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


@dataclass
class Body:
    """One HTML response's body as stored: still in its transfer and content codings."""

    record_id: str
    raw: bytes
    chunked: bool
    codings: tuple[str, ...]
    charset: str | None  # from the Content-Type header


def archive_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(WARC_SUFFIXES))


def parse_fastwarc(files: list[Path]) -> tuple[int, list[Body]]:
    """Every record of `files` (its payload read), and the HTML responses' bodies."""
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    records, bodies = 0, []
    for path in files:
        for rec in ArchiveIterator(str(path), auto_decode="none"):
            records += 1
            raw = rec.reader.read()
            if rec.record_type != WarcRecordType.response or not rec.http_headers:
                continue
            ctype = rec.http_content_type or ""
            if "html" not in ctype or rec.http_headers.status_code != 200:
                continue
            h = rec.http_headers
            te = (h.get("Transfer-Encoding") or "").lower()
            ce = (h.get("Content-Encoding") or "").lower()
            codings = tuple(c.strip() for c in ce.split(",") if c.strip() not in ("", "identity"))
            bodies.append(Body(rec.record_id, raw, "chunked" in te, codings, rec.http_charset))
    return records, bodies


def parse_warcio(files: list[Path]) -> int:
    """Records of `files` through warcio, each payload read raw; a whole-stream .warc.gz,
    which warcio refuses after its first record, is read again through gzip.open."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    def count(stream) -> int:
        n = 0
        for rec in ArchiveIterator(stream):
            rec.raw_stream.read()
            n += 1
        return n

    records = 0
    for path in files:
        with open(path, "rb") as raw:
            try:
                records += count(raw)
            except ArchiveLoadFailed:
                raw.seek(0)
                with gzip.open(raw) as whole:
                    records += count(whole)
    return records


def dechunk(data: bytes) -> bytes:
    """A chunked body's data (what arrived of it, when the record was truncated)."""
    out, at = [], 0
    while at < len(data):
        end = data.find(b"\r\n", at)
        if end < 0:
            break
        try:
            size = int(data[at:end].split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out.append(data[end + 2 : end + 2 + size])
        at = end + 2 + size + 2
    return b"".join(out)


def content_decode(data: bytes, coding: str) -> bytes:
    """One content coding removed; a body cut short (WARC-Truncated) gives what it held."""
    if coding in ("gzip", "x-gzip", "deflate"):
        wbits = 31 if coding != "deflate" else (15 if data[:1] == b"\x78" else -15)
        d = zlib.decompressobj(wbits=wbits)
        try:
            return d.decompress(data) + d.flush()
        except zlib.error:
            return b""
    if coding == "br":
        import brotli

        try:
            return brotli.Decompressor().process(data)
        except brotli.error:
            return b""
    return data


def charset_of(body: bytes, header: str | None) -> tuple[str, int]:
    """(encoding, bytes to skip) in a browser's order: BOM, HTTP header, <meta>, detection."""
    from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, len(bom)
    if header:
        return map_encoding_to_html5(header) or "utf-8", 0
    meta = _META_CHARSET.search(body[:1024])
    if meta:
        return map_encoding_to_html5(meta.group(1).decode("ascii", "replace")) or "utf-8", 0
    return detect_encoding(body), 0


def http_decode(bodies: list[Body]) -> list[str]:
    """Each body's HTML as text."""
    from resiliparse.parse.encoding import bytes_to_str

    out = []
    for b in bodies:
        data = dechunk(b.raw) if b.chunked else b.raw
        for coding in reversed(b.codings):  # the last applied is removed first
            data = content_decode(data, coding)
        encoding, skip = charset_of(data, b.charset)
        out.append(bytes_to_str(data[skip:], encoding))
    return out


def extract_all(htmls: list[str]) -> list[str]:
    from resiliparse.extract.html2text import extract_plain_text

    return [extract_plain_text(h, main_content=True) for h in htmls]


def curate_all(steps: list, ids: list[str], texts: list[str]) -> int:
    """The chain over the texts in batches of CURATE_BATCH, as the read task runs it; the
    number of documents it kept."""
    from pipeline.curate import chain
    from pipeline.run.read_tasks import CURATE_BATCH

    if not steps or not texts:
        return len(texts)
    built = chain.build(chain.parse(steps))
    docs = pa.table({
        "doc_id": pa.array(ids, pa.string()),
        "source": pa.array(["bench"] * len(ids), pa.string()),
        "row": pa.array(range(len(ids)), pa.int64()),
        "text": pa.array(texts, pa.string()),
    })  # fmt: skip
    kept = 0
    for at in range(0, docs.num_rows, CURATE_BATCH):
        kept += chain.apply(built, docs.slice(at, CURATE_BATCH)).kept.num_rows
    return kept

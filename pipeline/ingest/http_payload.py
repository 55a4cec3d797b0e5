"""An HTTP body as a crawler recorded it, made into HTML text: transfer and content encodings
undone (bounded: never more than the cap is held), then decoded with the charset browsers would
pick (pure: bytes in, text out).

Charset order, as browsers do: a BOM, the HTTP header's charset, the `<meta>` charset (first
1024 bytes), then detection (uchardet, through resiliparse); bytes the chosen charset cannot
decode fall back to UTF-8 and Windows-1252, then are replaced (resiliparse's bytes_to_str).
"""

from __future__ import annotations

import codecs
import io
import zlib

from fastwarc.stream_io import BrotliReader, ChunkedReader
from resiliparse.parse.encoding import bytes_to_str, detect_encoding

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class Undecodable(Exception):
    """The body's transfer or content encoding cannot be undone (the message says why)."""


class TooLarge(Exception):
    """The decoded body is larger than the cap (`size`: the bytes seen before stopping)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def is_html(content_type: str | None) -> bool:
    """Whether an HTTP Content-Type (parameters ignored) names HTML."""
    return bool(content_type) and content_type.split(";")[0].strip().lower() in _HTML_TYPES


def _bounded(reader: io.RawIOBase | object, cap: int) -> bytes:
    data = reader.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(len(data))
    return data


def decoded_body(body: bytes, transfer: str | None, encoding: str | None, cap: int) -> bytes:
    """`body` with its Transfer-Encoding (chunked) and Content-Encoding (gzip, x-gzip,
    deflate, br, identity) undone, at most `cap` bytes (TooLarge past it); Undecodable when an
    encoding is unknown or its bytes are corrupt."""
    try:
        if transfer and "chunked" in transfer.lower():
            body = ChunkedReader(io.BytesIO(body)).read()
        for coding in reversed([c.strip().lower() for c in (encoding or "").split(",")]):
            if coding in ("", "identity", "none"):
                continue
            if coding in ("gzip", "x-gzip", "deflate"):
                body = _inflate(body, cap)
            elif coding == "br":
                body = _bounded(BrotliReader(io.BytesIO(body)), cap)
            else:
                raise Undecodable(f"Content-Encoding {coding!r} is not supported")
    except (zlib.error, OSError, ValueError) as e:
        raise Undecodable(f"{type(e).__name__}: {e}") from None
    if len(body) > cap:
        raise TooLarge(len(body))
    return body


def _inflate(body: bytes, cap: int) -> bytes:
    """gzip or zlib (wbits 47 tells them apart), else raw deflate, which some servers send as
    `deflate`."""
    try:
        inflate = zlib.decompressobj(wbits=47)
        data = inflate.decompress(body, cap + 1)
    except zlib.error:
        inflate = zlib.decompressobj(wbits=-15)
        data = inflate.decompress(body, cap + 1)
    if len(data) > cap:
        raise TooLarge(len(data))
    return data


def html_text(body: bytes, http_charset: str | None = None) -> str:
    """The HTML text of a decoded body: BOM, HTTP charset, <meta>, detection (module doc)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return bytes_to_str(body[len(bom) :], name, errors="replace", strip_bom=False)
    encoding = None
    if http_charset:
        try:
            encoding = codecs.lookup(http_charset.strip().strip("\"'")).name
        except LookupError:  # an unknown label: as if there were none
            encoding = None
    if encoding is None:
        encoding = detect_encoding(body, from_html_meta=True)
    return bytes_to_str(body, encoding, errors="replace")

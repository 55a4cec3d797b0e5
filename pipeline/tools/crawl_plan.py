"""What the crawl sample holds: which text goes on which page, and every planted case.

`make_plan` picks original documents of the shipped sample (`sample_texts`), gives each a
site and URL, and lays out the captures of each WARC file (ordinary pages, then the planted
cases, at seeded positions) and the WET file's conversions. `write_captures` turns captures
into records through an `Archive`. `EXPECT` says, per plant, whether the record should become
a document and why not; the README and `_planted.json` are made from it
(tools/crawl_truth.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.tools.crawl_html import SITES, error_page, page
from pipeline.tools.crawl_warc import Archive, Response, response_bytes
from pipeline.tools.real_text import classify_doc_file, jaccard, mutate_words, word_shingles
from pipeline.tools.sample_io import iter_records, list_data_files, usable_text

MIN_TEXT, MAX_TEXT = 600, 9_000  # bytes of a page's text: realistic, and the sample stays small
HTML = "text/html; charset=utf-8"
PROSE_KINDS = ("news", "readme", "other", "license")
PROSE_SHARE = 0.6  # of ordinary pages; the rest are changelogs and copyright files
# plant -> (how a reader counts it, what it tests). The count names are the run's (the
# manifest's `records` and the summary, pipeline/ingest/web_archive.py): `documents` for a
# record that becomes a document, else what the record was.
EXPECT = {
    "page": ("documents", "an ordinary HTML page, 200 OK"),
    "exact_same_site": ("documents", "the same page again at another URL (a tracking query)"),
    "exact_mirror": ("documents", "the same text on another site: only the boilerplate differs"),
    "exact_other_file": ("documents", "the same page again, in another WARC file"),
    "near": ("documents", "the text with 1-2 % of its words edited, on another site"),
    "index_page": ("documents", "links only: a page the curation chain removes"),
    "not_found": ("status_4xx", "a 404 error page (not the content of the URL)"),
    "redirect": ("status_3xx", "a 301 redirect to a page of the file"),
    "revisit": ("revisit", "a revisit record: HTTP headers only, refers to an earlier capture"),
    "png": ("not_html", "an image/png response"),
    "pdf": ("not_html", "an application/pdf response"),
    "chunked": ("documents", "Transfer-Encoding: chunked"),
    "chunked_gzip": ("documents", "Content-Encoding: gzip inside Transfer-Encoding: chunked"),
    "br": ("documents", "Content-Encoding: br"),
    "deflate": ("documents", "Content-Encoding: deflate (zlib)"),
    "cp1252": ("documents", "windows-1252, in the Content-Type header and in <meta charset>"),
    "latin1_meta": ("documents", "ISO-8859-1 declared only in <meta charset> (header: text/html)"),
    "bom": ("documents", "a UTF-8 BOM, while the header says windows-1252: the BOM wins"),
    "truncated": ("documents", "WARC-Truncated: length, the HTML cut at 60 % (the rest is text)"),
    "truncated_gzip": ("documents", "WARC-Truncated: length inside a gzip body: what arrived"),
    "xhtml": ("documents", "Content-Type: application/xhtml+xml"),
    "wet": ("documents", "a WET conversion record: plain text, no extraction"),
    "wet_empty": ("no_text", "a WET conversion record with no text"),
}


@dataclass(frozen=True)
class Text:
    origin: str  # the sample's location: "source#row"
    path: str  # the Debian file it was cut from
    kind: str
    text: str


@dataclass
class Capture:
    url: str
    plant: str
    response: Response | None = None
    text: str | None = None
    origin: str = ""
    copy_of: str | None = None  # url of the page it copies (duplicates, revisit, redirect)
    truncate_at: float | None = None  # share of the HTTP body kept
    parent_text: str | None = None  # a duplicate's original text


@dataclass
class Plan:
    files: dict[str, list[Capture]] = field(default_factory=dict)
    wet: list[Capture] = field(default_factory=list)

    def captures_for(self, rel: str) -> list[Capture]:
        return self.files[rel]


def sample_texts(sample: Path) -> list[Text]:
    """The shipped sample's original documents (its planted copies and bad records left out),
    in listing order."""
    truth = json.loads((sample / "_planted.json").read_text())
    base = {(s, r): origin for s, r, _id, role, origin in truth["documents"] if role == "base"}
    found = []
    for path in list_data_files(sample):
        source = path.relative_to(sample).as_posix()
        for row, record in iter_records(path):
            text = usable_text(record)
            origin = base.get((source, row))
            if text is not None and origin is not None:
                kind = "license" if "common-licenses" in origin else classify_doc_file(Path(origin))
                found.append(Text(f"{source}#{row}", origin, kind, text))
    return found


def _site_and_title(t: Text, rng: random.Random) -> tuple[str, str, str]:
    package, name = Path(t.path).parent.name, Path(t.path).name.removesuffix(".gz")
    if t.kind == "license":
        return "licenses", f"{name} licence", f"/license/{name.lower()}/"
    if t.kind == "copyright":
        return "licenses", f"Copyright of {package}", f"/copyright/{package}/"
    if t.kind == "changelog" and rng.random() < 0.3:
        return (
            "forum",
            f"{package}: what changed",
            f"/t/{package}-what-changed/{rng.randint(1000, 99999)}",
        )
    if t.kind == "changelog":
        return "packages", f"{package} changelog", f"/{package}/changelog/"
    return "packages", f"{package}: {name}", f"/{package}/{name.lower().replace('.', '-')}/"


def _url(host: str, path: str, used: set[str]) -> str:
    url, n = f"https://{host}{path}", 1
    while url in used:
        n += 1
        url = f"https://{host}{path}page-{n}/"
    used.add(url)
    return url


class Pools:
    """The texts left to place: prose (NEWS, README, licences, other documentation) and the
    rest (changelogs, copyright files), which the FineWeb-like chain mostly removes; ordinary
    pages mix them, planted cases take prose so that they reach dedup and the shards."""

    def __init__(self, texts: list[Text], rng: random.Random) -> None:
        pool = [t for t in texts if MIN_TEXT <= len(t.text.encode()) <= MAX_TEXT]
        rng.shuffle(pool)
        self.rng = rng
        self.prose = [t for t in pool if t.kind in PROSE_KINDS]
        self.rest = [t for t in pool if t.kind not in PROSE_KINDS]

    def ordinary(self) -> Text:
        take_prose = self.rng.random() < PROSE_SHARE or not self.rest
        return (self.prose if take_prose else self.rest).pop()

    def planted(self) -> Text:
        """The next prose text that `reads_as_prose`."""
        t = next(t for t in reversed(self.prose) if reads_as_prose(t.text))
        self.prose.remove(t)
        return t


def reads_as_prose(text: str) -> bool:
    """Sentences rather than lists, code or logs: at least 80 words, 85 % of them with a
    letter, half the paragraphs ending a sentence, no curly bracket. A cheap stand-in for the
    curation chain (which the builder does not run, so that the sample does not change with
    it): planted pages that pass it mostly survive configs/crawl.yaml's chain."""
    if "{" in text or "}" in text:
        return False
    words = text.split()
    paras = [p.strip() for p in text.split("\n\n") if p.strip()]
    if len(words) < 80 or not paras:
        return False
    alpha = sum(any(c.isalpha() for c in w) for w in words) / len(words)
    ends = sum(p.endswith((".", "!", "?", ":", '"')) for p in paras) / len(paras)
    return alpha >= 0.85 and ends >= 0.5


def make_plan(texts: list[Text], files: list[tuple[str, int]], wet_pages: int,
              rng: random.Random) -> Plan:  # fmt: skip
    pools = Pools(texts, rng)
    used: set[str] = set()
    pages: dict[str, tuple[str, str, Text]] = {}  # url -> (site, title, text)

    def new_page(t: Text) -> str:
        site, title, path = _site_and_title(t, rng)
        url = _url(SITES[site].host, path, used)
        pages[url] = (site, title, t)
        return url

    def html_capture(url: str, plant: str = "page", **kw) -> Capture:
        site, title, t = pages[url]
        related = [(u, pages[u][1]) for u in sorted(pages) if pages[u][0] == site and u != url][:6]
        body = page(SITES[site], title, t.text, related).encode()
        coding = rng.choices(("cc", "identity", "gzip"), (5, 3, 2))[0]
        resp = Response(200, "OK", HTML, body, () if coding == "identity" else ("gzip",),
                        stored_decoded=coding == "cc")  # fmt: skip
        return Capture(url, plant, resp, t.text, t.origin, **kw)

    plan = Plan()
    for rel, count in files:
        plan.files[rel] = [html_capture(new_page(pools.ordinary())) for _ in range(count)]
    plan.wet = [_wet(pools.ordinary(), used) for _ in range(wet_pages)]
    plan.wet.insert(wet_pages // 2, Capture("https://forum.example.com/t/empty/1", "wet_empty",
                                            text="", origin=""))  # fmt: skip
    main, second = files[0][0], files[1][0]
    originals = [c for c in plan.files[main] if reads_as_prose(c.text)]
    plants = _plants(plan.files[main], originals, pools, pages, new_page, html_capture, rng)
    plants_second = [_copy(originals[10], "exact_other_file", pages, rng, same=True)]
    for captures, extra in ((plan.files[main], plants), (plan.files[second], plants_second)):
        for c in extra:
            at = rng.randint(1, len(captures)) if c.plant != "revisit" else len(captures)
            captures.insert(at, c)
    return plan


def _wet(t: Text, used: set[str]) -> Capture:
    path = f"/{Path(t.path).parent.name}/text/"
    return Capture(_url(SITES["packages"].host, path, used), "wet", text=t.text, origin=t.origin)


def _copy(original: Capture, plant: str, pages, rng, same: bool) -> Capture:
    """A duplicate of `original`: the same HTML at another URL of its site (same=True), or
    its text (edited for `near`) on the mirror site's template."""
    site, title, t = pages[original.url]
    if same:
        url = original.url + "?utm_source=feed&utm_medium=rss"
        resp = Response(200, "OK", HTML, original.response.body, ("gzip",), stored_decoded=True)
        return Capture(url, plant, resp, t.text, t.origin, copy_of=original.url,
                       parent_text=t.text)  # fmt: skip
    text = (
        mutate_words(t.text, round(rng.uniform(0.01, 0.02), 3), rng) if plant == "near" else t.text
    )
    url = f"https://{SITES['mirror'].host}/{original.url.split('/', 3)[3]}"
    body = page(SITES["mirror"], title, text, []).encode()
    resp = Response(200, "OK", HTML, body)
    return Capture(url, plant, resp, text, t.origin, copy_of=original.url, parent_text=t.text)


def _plants(main: list[Capture], originals: list[Capture], pools: Pools, pages, new_page,
            html_capture, rng) -> list[Capture]:  # fmt: skip
    out = [_copy(originals[i], "exact_same_site", pages, rng, same=True) for i in (0, 1)]
    out += [_copy(originals[i], "exact_mirror", pages, rng, same=False) for i in (2, 3, 4)]
    out += [_copy(originals[i], "near", pages, rng, same=False) for i in (5, 6, 7, 8)]
    site = SITES["packages"]
    missing = f"https://{site.host}/no-such-package/changelog/"
    out.append(
        Capture(
            missing,
            "not_found",
            Response(404, "Not Found", HTML, error_page(site, 404, "Not Found").encode()),
        )
    )
    target = main[0].url
    moved = (f'<html><head><title>301 Moved Permanently</title></head><body><h1>Moved '
             f'Permanently</h1><p>The document has moved <a href="{target}">here</a>.</p>'
             "</body></html>\n").encode()  # fmt: skip
    out.append(Capture(target.rstrip("/"), "redirect",
                       Response(301, "Moved Permanently", "text/html; charset=iso-8859-1", moved,
                                headers=[("Location", target)]), copy_of=target))  # fmt: skip
    out.append(Capture(originals[9].url, "revisit", copy_of=originals[9].url))
    out.append(
        Capture(
            f"https://{site.host}/static/img/logo.png",
            "png",
            Response(200, "OK", "image/png", _png(rng)),
        )
    )
    first = pools.prose[-1]
    out.append(
        Capture(
            f"https://{site.host}/{Path(first.path).parent.name}/manual.pdf",
            "pdf",
            Response(200, "OK", "application/pdf", _pdf(first.text)),
        )
    )
    for plant, codings, chunk in (
        ("chunked", (), True),
        ("chunked_gzip", ("gzip",), True),
        ("br", ("br",), False),
        ("deflate", ("deflate",), False),
    ):
        c = html_capture(new_page(pools.planted()), plant)
        c.response.codings, c.response.transfer_chunked = codings, chunk
        c.response.stored_decoded = False
        out.append(c)
    out += _charset_plants(pools.prose, pages, new_page, rng)
    for plant, coding in (("truncated", ()), ("truncated_gzip", ("gzip",))):
        c = html_capture(new_page(pools.planted()), plant, truncate_at=0.6)
        c.response.codings, c.response.stored_decoded = coding, False
        out.append(c)
    c = html_capture(new_page(pools.planted()), "xhtml")
    c.response.content_type = "application/xhtml+xml; charset=utf-8"
    out.append(c)
    for n, s in enumerate(("packages", "licenses")):
        links = "\n".join(f"{pages[u][1]}" for u in sorted(pages) if pages[u][0] == s)
        url = f"https://{SITES[s].host}/index/{n + 1}/"
        body = page(SITES[s], "All pages", links, []).encode()
        out.append(Capture(url, "index_page", Response(200, "OK", HTML, body), links))
    return out


def _charset_plants(pool, pages, new_page, rng) -> list[Capture]:
    """Pages in windows-1252 (header and <meta>), ISO-8859-1 (<meta> only), and UTF-8 with a
    BOM under a header that says windows-1252: texts with non-ASCII characters those
    charsets can encode."""

    def fits(t: Text) -> bool:
        try:
            t.text.encode("latin-1")
        except UnicodeEncodeError:
            return False
        return any(ord(ch) > 127 for ch in t.text) and reads_as_prose(t.text)

    chosen = [t for t in pool if fits(t)][:3]
    for t in chosen:
        pool.remove(t)
    out = []
    for t, (plant, meta, header, codec, bom) in zip(chosen, (
        ("cp1252", "windows-1252", "text/html; charset=windows-1252", "cp1252", False),
        ("latin1_meta", "iso-8859-1", "text/html", "latin-1", False),
        ("bom", None, "text/html; charset=windows-1252", "utf-8", True),
    ), strict=True):  # fmt: skip
        url = new_page(t)
        site, title, _ = pages[url]
        body = page(SITES[site], title, t.text, [], charset=meta).encode(codec)
        resp = Response(200, "OK", header, (b"\xef\xbb\xbf" if bom else b"") + body)
        out.append(Capture(url, plant, resp, t.text, t.origin))
    return out


def _png(rng: random.Random) -> bytes:
    """A valid 16x16 RGB PNG of seeded pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(48)) for _ in range(16))
    header = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def _pdf(text: str) -> bytes:
    """A one-page PDF showing the text's first line (its xref offsets computed)."""
    line = text.strip().splitlines()[0][:80].replace("\\", "").replace("(", "").replace(")", "")
    stream = f"BT /F1 12 Tf 72 720 Td ({line}) Tj ET".encode("latin-1", "replace")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, obj)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def payload_digest(http: bytes) -> str:
    """WARC-Payload-Digest of an HTTP message: sha1 of the bytes after its header block."""
    body = http.split(b"\r\n\r\n", 1)[1]
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def write_captures(archive: Archive, captures: list[Capture], rng: random.Random) -> list[dict]:
    """Each capture's records through `archive`; a row per response, revisit or metadata,
    request record (what _planted.json lists)."""
    rows, done = [], {}  # url -> (record id, WARC-Date, payload digest, HTTP header block)
    for c in captures:
        when = archive.tick()
        if c.plant == "revisit":
            rid0, date0, digest, head = done[c.copy_of]
            rid = archive.revisit(c.url, head, rid0, c.copy_of, date0, digest, when)
            rows.append(_row(rid, "revisit", c))
            continue
        http = response_bytes(c.response, when, rng)
        headers = {}
        if c.truncate_at is not None:
            head_len = http.index(b"\r\n\r\n") + 4
            http = http[: head_len + int((len(http) - head_len) * c.truncate_at)]
            headers["WARC-Truncated"] = "length"
        fetch = {"fetchTimeMs": str(rng.randint(40, 900))}
        if c.response.content_type and "html" in c.response.content_type:
            fetch["charset-detected"] = _declared(c)
        rid = archive.capture(c.url, http, fetch, when, headers)
        head = http[: http.index(b"\r\n\r\n") + 4]
        done[c.url] = (rid, archive.warc_date(when), payload_digest(http), head)
        rows.append(_row(rid, "response", c))
    return rows


def _declared(c: Capture) -> str:
    return {"cp1252": "windows-1252", "latin1_meta": "ISO-8859-1"}.get(c.plant, "UTF-8")


def _row(rid: str, kind: str, c: Capture) -> dict:
    counted = EXPECT[c.plant][0]
    row = {"record_id": rid, "type": kind, "url": c.url, "plant": c.plant,
           "document": counted == "documents", "counted_as": counted}  # fmt: skip
    if c.response is not None:
        row["status"] = c.response.status
        row["content_type"] = c.response.content_type
    if c.origin:
        row["text_from"] = c.origin
    if c.copy_of:
        row["copy_of"] = c.copy_of
    if c.parent_text is not None:  # word 5-gram Jaccard of the texts (not of the pages)
        row["jaccard_to_original"] = round(
            jaccard(word_shingles(c.text), word_shingles(c.parent_text)), 4
        )
    return row

"""Build a web-crawl corpus (WARC files of realistic HTML pages) for benchmarks.

    python -m pipeline.tools.make_crawl_corpus --out DIR --mb N [--seed 0] [--file-mb 64]
        [--boilerplate-kb 40]

Pages carry the real text make_corpus uses (pipeline.tools.make_corpus.real_documents: Debian
documentation, licences, man pages, the Python standard library; near duplicates by word edits
once the machine's text runs out) in the site templates of tools/crawl_html.py, each with about
`--boilerplate-kb` KB of inline CSS, scripts and menus (a Common Crawl page is tens of KB of
markup around a few KB of text). Captures are written in Common Crawl's layout
(tools/crawl_warc.py: request, response, metadata; each record its own gzip member) into
DIR/CRAWL-NNNNN.warc.gz files of about `--file-mb` MB of HTML each; bodies are stored as
Common Crawl stores them (decoded, X-Crawler-* headers) for half the pages, as received
(identity or gzip) for the rest; one capture in 50 is an image, one in 100 a 404.
`--mb` counts HTML bytes (decoded bodies). Same machine contents + seed -> same bytes.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import time
from datetime import datetime, timezone
from pathlib import Path

from pipeline.tools.crawl_html import SITES, error_page, heavy_boilerplate, page
from pipeline.tools.crawl_warc import Archive, Response, response_bytes
from pipeline.tools.make_corpus import documents

START = datetime(2024, 5, 1, tzinfo=timezone.utc)
_SITE_OF = {"license": "licenses", "copyright": "licenses", "changelog": "forum"}


class CorpusWriter:
    """Captures into successive WARC files of about `file_bytes` of HTML each."""

    def __init__(self, out: Path, file_bytes: int, rng: random.Random) -> None:
        self.out, self.file_bytes, self.rng = out, file_bytes, rng
        self.files: list[dict] = []
        self.archive: Archive | None = None
        self.buffer = io.BytesIO()

    def _open(self) -> Archive:
        if self.archive is None or self.files[-1]["html_bytes"] >= self.file_bytes:
            self.close()
            name = f"CRAWL-{len(self.files):05d}.warc.gz"
            self.files.append({"file": name, "captures": 0, "html_bytes": 0})
            self.buffer = io.BytesIO()
            self.archive = Archive(self.buffer, True, "WARC/1.0", self.rng, START)
            self.archive.warcinfo(name, {"software": "pipeline.tools.make_crawl_corpus"})
        return self.archive

    def capture(self, url: str, resp: Response) -> None:
        archive = self._open()
        when = archive.tick()
        http = response_bytes(resp, when, self.rng)
        archive.capture(url, http, {"fetchTimeMs": str(self.rng.randint(40, 900))}, when)
        self.files[-1]["captures"] += 1
        if "html" in (resp.content_type or "") and resp.status == 200:
            self.files[-1]["html_bytes"] += len(resp.body)

    def close(self) -> None:
        if self.archive is not None:
            (self.out / self.files[-1]["file"]).write_bytes(self.buffer.getvalue())
            self.archive = None


def build(out: Path, target_bytes: int, seed: int, file_bytes: int = 64_000_000,
          boilerplate_kb: int = 40) -> dict:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("CRAWL-*.warc.gz"):
        stale.unlink()
    rng = random.Random(seed)
    writer, written = CorpusWriter(out, file_bytes, rng), []
    html_bytes = pages = 0
    names: list[str] = ["home"]
    for n, doc in enumerate(documents(rng, written)):
        if html_bytes >= target_bytes:
            break
        if doc.kind != "mutated":  # what mutated documents are drawn from
            written.append(doc)
        package = Path(doc.origin).parent.name or "doc"
        names = (names + [package])[-200:]  # the menu: packages seen lately, as a site lists
        site = SITES[_SITE_OF.get(doc.kind, "packages")]
        url = f"https://{site.host}/{package}/{n:08d}/"
        if n % 100 == 99:
            body = error_page(site, 404, "Not Found").encode()
            writer.capture(url + "missing/", Response(404, "Not Found", "text/html", body))
        if n % 50 == 49:
            writer.capture(url + "logo.png", Response(200, "OK", "image/png", rng.randbytes(4000)))
        padding = heavy_boilerplate(
            rng, names, rng.randint(boilerplate_kb // 2, boilerplate_kb * 3 // 2)
        )
        body = page(site, f"{package}: {Path(doc.origin).name}", doc.text, [], padding=padding)
        data = body.encode()
        coding = rng.choices(("cc", "identity", "gzip"), (5, 3, 2))[0]
        codings = () if coding == "identity" else ("gzip",)
        resp = Response(200, "OK", "text/html; charset=utf-8", data, codings,
                        stored_decoded=coding == "cc")  # fmt: skip
        writer.capture(url, resp)
        html_bytes += len(data)
        pages += 1
    writer.close()
    return {"files": writer.files, "pages": pages, "html_bytes": html_bytes}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--mb", type=float, default=64, help="HTML to write, in MB (10^6 bytes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--file-mb", type=float, default=64, help="HTML per WARC file, in MB")
    parser.add_argument("--boilerplate-kb", type=int, default=40, help="markup around a text")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = build(args.out, int(args.mb * 1e6), args.seed, int(args.file_mb * 1e6),
                   args.boilerplate_kb)  # fmt: skip
    print(f"{'file':<24} {'captures':>9} {'HTML bytes':>12} {'on disk':>12}")
    for f in result["files"]:
        size = (args.out / f["file"]).stat().st_size
        print(f"{f['file']:<24} {f['captures']:>9} {f['html_bytes']:>12} {size:>12}")
    print(json.dumps({
        "files": len(result["files"]), "pages": result["pages"],
        "html_bytes": result["html_bytes"],
        "bytes": sum((args.out / f["file"]).stat().st_size for f in result["files"]),
        "seconds": round(time.perf_counter() - started, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()

"""Benchmark: parsing a Common Crawl-style .warc.gz with warcio, with fastwarc, and with the
pipeline's reader, on the same records in one run.

    python -m pipeline bench warc-parse [--records 20000] [--repeat 2]

A per-record gzip WARC of --records HTML responses (~2.7 KB of HTML each, written with warcio's
writer, as Common Crawl lays it out) is read four ways:
  (a) warcio     ArchiveIterator, each response's body read (the baseline)
  (b) fastwarc   ArchiveIterator over the whole file, each response's body read
  (c) reader     the pipeline's read_piece (ingest/web_archive.py: gzip members one at a time,
                 HTTP decoding, charset) with an extractor that returns the HTML as it is
  (d) extract    (c) with resiliparse's main-content extraction (extract.engine's default)
Checks: (a), (b) and (c) see the same records and body bytes. Each runs --repeat times and the
best is kept (a shared machine). Needs warcio: pip install 'pipeline[bench]'.
Last line: JSON with records/s of each and fastwarc_vs_warcio, reader_vs_warcio.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

from pipeline.cli import args as cli_args
from pipeline.core.storage import Location
from pipeline.ingest.readers import read_piece


def build(records: int) -> bytes:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    rng = random.Random(0)
    words = ["".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]  # fmt: skip
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    for i in range(records):
        paras = "".join(f"<p>{' '.join(rng.choices(words, k=40))}</p>" for _ in range(10))
        body = f"<html><body><article>{paras}</article></body></html>".encode()
        headers = StatusAndHeaders(
            "200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1"
        )
        record = writer.create_warc_record(
            f"http://example.com/{i}", "response", payload=io.BytesIO(body), http_headers=headers
        )
        writer.write_record(record)
    return out.getvalue()


def warcio_pass(data: bytes) -> tuple[int, int]:
    from warcio.archiveiterator import ArchiveIterator

    n = size = 0
    for record in ArchiveIterator(io.BytesIO(data)):
        if record.rec_type == "response":
            size += len(record.content_stream().read())
            n += 1
    return n, size


def fastwarc_pass(data: bytes) -> tuple[int, int]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    n = size = 0
    for record in ArchiveIterator(io.BytesIO(data), record_types=WarcRecordType.response):
        size += len(record.reader.read())
        n += 1
    return n, size


def reader_pass(folder: Path, size: int, extract) -> tuple[int, int]:
    piece = {
        "path": "a.warc.gz",
        "start": 0,
        "end": size,
        "size": size,
        "format": "warc",
        "compression": "gzip",
        "etag": None,
        "mtime": (folder / "a.warc.gz").stat().st_mtime,
    }
    root, n, total, kinds = Location.from_uri(str(folder)), 0, 0, Counter()
    for docs, _ in read_piece(root, piece, "text", None, extract=extract, records=kinds):
        n += docs.num_rows
        total += sum(len(t.encode()) for t in docs["text"].to_pylist())
    return n, total


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench warc-parse", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--records", type=int, default=20000, help="HTML responses in the generated WARC file"
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs of each reader; best kept")
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    from resiliparse.extract.html2text import extract_plain_text

    data = build(args.records)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "a.warc.gz").write_bytes(data)
        ways = {
            "warcio": lambda: warcio_pass(data),
            "fastwarc": lambda: fastwarc_pass(data),
            "reader": lambda: reader_pass(folder, len(data), lambda html: html),
            "extract": lambda: reader_pass(
                folder, len(data), lambda html: extract_plain_text(html, main_content=True)
            ),
        }
        best, seen = {}, {}
        for _ in range(args.repeat):
            for name, run in ways.items():
                start = time.perf_counter()
                seen[name] = run()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    if not seen["warcio"] == seen["fastwarc"] == seen["reader"]:
        raise SystemExit(f"the ways disagree: {seen}")
    n = seen["warcio"][0]
    print(f"{len(data) / 1e6:.1f} MB per-record gzip WARC, {n} responses, best of {args.repeat}")
    print(f"{'way':<10} {'seconds':>8} {'records/s':>10}")
    for name, seconds in best.items():
        print(f"{name:<10} {seconds:>8.2f} {n / seconds:>10,.0f}")
    rates = {name: round(n / s) for name, s in best.items()}
    result = {
        "records": n,
        **{f"{name}_records_per_s": r for name, r in rates.items()},
        "fastwarc_vs_warcio": round(rates["fastwarc"] / rates["warcio"], 2),
        "reader_vs_warcio": round(rates["reader"] / rates["warcio"], 2),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

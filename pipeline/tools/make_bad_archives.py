"""Build the damaged web archives that docs/web-archives.md runs the pipeline on, one folder
per case, each beside a healthy crawl, so that a user can see what a run keeps and counts.

    python -m pipeline.tools.make_bad_archives --out DIR [--mb 8] [--huge-mb 100]

Every folder holds `crawl.warc.gz`, a make_crawl_corpus crawl of `--mb` MB of HTML (each
record its own gzip member, as Common Crawl writes), healthy or damaged:

- `cut_last_record/`: the crawl cut in the middle of its last record's gzip member (a
  download or copy that stopped short);
- `corrupt_member/`: the crawl with 20 bytes inside the deflate data of a response record's
  member in its middle flipped (a bad disk block, a bit flip in transit);
- `not_a_warc/`: the healthy crawl and `notes.warc.gz`, a gzip file of JSON lines named like
  an archive;
- `huge_record/`: the healthy crawl and `huge.warc.gz`, one capture whose page is
  `--huge-mb` MB of HTML (over ingest.max_doc_bytes) and one ordinary capture.

The damage is described in DIR/cases.json (the file, the member's offset and what was done).
Same --mb, --huge-mb -> same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import shutil
import tempfile
import zlib
from datetime import datetime, timezone
from pathlib import Path

from pipeline.tools import make_crawl_corpus
from pipeline.tools.crawl_warc import Archive, Response, response_bytes

START = datetime(2024, 5, 1, tzinfo=timezone.utc)


def member_offsets(data: bytes) -> list[int]:
    """Where each gzip member of `data` starts (the file read through, member by member)."""
    starts, at = [], 0
    while at < len(data):
        starts.append(at)
        inflate = zlib.decompressobj(wbits=31)
        inflate.decompress(data[at:])
        at = len(data) - len(inflate.unused_data)
    return starts


def _response_member(data: bytes, starts: list[int]) -> int:
    """The index of the first response record's member at or after the middle of the file."""
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        head = zlib.decompressobj(wbits=31).decompress(data[start:end], 1024)
        if start >= len(data) // 2 and b"WARC-Type: response" in head:
            return i
    raise ValueError("no response record in the second half of the crawl")


def huge_archive(huge_mb: float) -> bytes:
    """One capture of a `huge_mb` MB page, then an ordinary one: per-record gzip."""
    rng, out = random.Random(0), io.BytesIO()
    archive = Archive(out, True, "WARC/1.0", rng, START)
    archive.warcinfo("huge.warc.gz", {"software": "pipeline.tools.make_bad_archives"})
    line = b"<p>all work and no play makes a page too large to keep</p>\n"
    pages = {
        "https://www.example.org/huge/": b"<html><body>"
        + line * int(huge_mb * 1e6 / len(line))
        + b"</body></html>",
        "https://www.example.org/small/": b"<html><body><p>A page of ordinary size, kept."
        b"</p></body></html>",
    }
    for url, body in pages.items():
        when = archive.tick()
        http = response_bytes(Response(200, "OK", "text/html; charset=utf-8", body), when, rng)
        archive.capture(url, http, {"fetchTimeMs": "120"}, when)
    return out.getvalue()


def build(out: Path, mb: float = 8.0, huge_mb: float = 100.0) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        make_crawl_corpus.build(Path(tmp), int(mb * 1e6), seed=0, file_bytes=10**12)
        crawl = (Path(tmp) / "CRAWL-00000.warc.gz").read_bytes()
    starts = member_offsets(crawl)
    cases: dict[str, dict] = {}

    def case(name: str, files: dict[str, bytes], damage: dict) -> None:
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for file, data in files.items():
            (folder / file).write_bytes(data)
        cases[name] = damage

    last = starts[-1]
    cut = last + (len(crawl) - last) // 2
    case("cut_last_record", {"crawl.warc.gz": crawl[:cut]},
         {"file": "crawl.warc.gz", "member_offset": last, "damage": f"cut at byte {cut}"
          f" of {len(crawl)}, inside the last record's member"})  # fmt: skip
    i = _response_member(crawl, starts)
    at = starts[i] + 40  # past the member's gzip header, inside its deflate data
    flipped = crawl[:at] + bytes(b ^ 0x55 for b in crawl[at : at + 20]) + crawl[at + 20 :]
    case(
        "corrupt_member",
        {"crawl.warc.gz": flipped},
        {
            "file": "crawl.warc.gz",
            "member_offset": starts[i],
            "damage": f"bytes {at}-{at + 19} flipped (xor 0x55), member {i} of {len(starts)}",
        },
    )
    notes = b"".join(json.dumps({"id": n, "text": f"note {n}"}).encode() + b"\n"
                     for n in range(3))  # fmt: skip
    case(
        "not_a_warc",
        {"crawl.warc.gz": crawl, "notes.warc.gz": gzip.compress(notes, mtime=0)},
        {"file": "notes.warc.gz", "damage": "gzip of JSON lines, not WARC records"},
    )
    case(
        "huge_record",
        {"crawl.warc.gz": crawl, "huge.warc.gz": huge_archive(huge_mb)},
        {"file": "huge.warc.gz", "damage": f"a {huge_mb:g} MB HTML page in one record"},
    )
    (out / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    return cases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--mb", type=float, default=8.0, help="HTML in the crawl, in MB")
    parser.add_argument("--huge-mb", type=float, default=100.0, help="the huge page, in MB")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.out, args.mb, args.huge_mb), indent=1))


if __name__ == "__main__":
    main()

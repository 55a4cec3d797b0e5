"""Build the shipped web-archive sample (sample/crawl/) from the shipped sample's real text.

    python -m pipeline.tools.make_crawl_sample [--out sample/crawl] [--sample sample]

Pages are the original documents of sample/ (Debian documentation and licence texts, see
sample/README.md) wrapped in site templates (tools/crawl_html.py) and served as HTTP responses
in Common Crawl's layout (tools/crawl_warc.py, written with warcio): a per-record gzip WARC/1.0
file, a whole-stream gzip and a plain WARC/1.1 file, and a small WET file of conversion
records. Planted: exact and near duplicate pages, non-HTML responses, a 404, a redirect, a
revisit, every content and transfer coding, non-UTF-8 charsets, a BOM, truncated records and
boilerplate-only pages. Each record's kind, offset and plant are written to `_planted.json`,
the counts to README.md. Same sample/ + same seed -> byte-identical files.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
from datetime import datetime, timezone
from pathlib import Path

from pipeline.tools import crawl_plan, crawl_truth
from pipeline.tools.crawl_plan import Plan
from pipeline.tools.crawl_warc import Archive

SEED = 20240501
START = datetime(2024, 5, 1, 0, 0, 0, tzinfo=timezone.utc)
PREFIX = "SAMPLE-20240501000000"
FILES = (  # (path, layout, WARC version, pages of ordinary HTML in it)
    (f"warc/{PREFIX}-00000.warc.gz", "members", "WARC/1.0", 90),
    (f"warc/{PREFIX}-00001.warc.gz", "stream", "WARC/1.1", 15),
    (f"warc/{PREFIX}-00002.warc", "plain", "WARC/1.1", 5),
)
WET = f"wet/{PREFIX}-00000.warc.wet.gz"
WET_PAGES = 12


def warcinfo_fields(name: str, version: str) -> dict[str, str]:
    return {
        "software": "pipeline.tools.make_crawl_sample (warcio)",
        "format": f"WARC File Format {version.split('/')[1]}",
        "conformsTo": "https://iipc.github.io/warc-specifications/",
        "isPartOf": "SAMPLE-2024-18",
        "publisher": "this project's shipped sample (not Common Crawl)",
        "description": f"{name}: Debian documentation served as web pages, with planted cases",
        "operator": "pipeline maintainers",
        "robots": "checked via crawler-commons",
    }


def write_warc(out: Path, rel: str, layout: str, version: str, plan: Plan, rng) -> list[dict]:
    buffer = io.BytesIO()
    archive = Archive(buffer, layout == "members", version, rng, START)
    archive.warcinfo(Path(rel).name, warcinfo_fields(Path(rel).name, version))
    rows = crawl_plan.write_captures(archive, plan.captures_for(rel), rng)
    data = buffer.getvalue()
    if layout == "stream":  # one gzip member for the whole file
        data = gzip.compress(data, compresslevel=9, mtime=0)
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    (out / rel).write_bytes(data)
    return [{"file": rel, "offset": archive.offsets[r["record_id"]], **r} for r in rows] + [
        {"file": rel, "offset": 0, "record_id": archive.warcinfo_id, "type": "warcinfo",
         "url": "", "plant": "warcinfo", "document": False, "counted_as": "warcinfo"}
    ]  # fmt: skip


def write_wet(out: Path, plan: Plan, rng) -> list[dict]:
    buffer = io.BytesIO()
    archive = Archive(buffer, True, "WARC/1.0", rng, START)
    archive.warcinfo(Path(WET).name, warcinfo_fields(Path(WET).name, "WARC/1.0"))
    rows = [{"file": WET, "offset": 0, "record_id": archive.warcinfo_id, "type": "warcinfo",
             "url": "", "plant": "warcinfo", "document": False,
             "counted_as": "warcinfo"}]  # fmt: skip
    for item in plan.wet:
        rid = archive.conversion(item.url, item.text, archive.record_id(), "eng")
        rows.append({"file": WET, "offset": archive.offsets[rid], "record_id": rid,
                     "type": "conversion", "url": item.url, "plant": item.plant,
                     "document": bool(item.text.strip()),
                     "counted_as": crawl_plan.EXPECT[item.plant][0],
                     "text_from": item.origin})  # fmt: skip
    (out / WET).parent.mkdir(parents=True, exist_ok=True)
    (out / WET).write_bytes(buffer.getvalue())
    return rows


def build(out: Path, sample: Path, seed: int = SEED) -> dict:
    rng = random.Random(seed)
    texts = crawl_plan.sample_texts(sample)
    plan = crawl_plan.make_plan(texts, [(f, n) for f, _, _, n in FILES], WET_PAGES, rng)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("warc/*"), *out.glob("wet/*")]:
        stale.unlink()
    records = []
    for rel, layout, version, _ in FILES:
        records += write_warc(out, rel, layout, version, plan, rng)
    records += write_wet(out, plan, rng)
    records.sort(key=lambda r: (r["file"], r["offset"], r["type"]))
    truth = crawl_truth.ground_truth(records, plan, seed)
    (out / "_planted.json").write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n")
    summary = crawl_truth.summarize(out, records)
    (out / "README.md").write_text(crawl_truth.readme(summary, truth))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("sample/crawl"))
    parser.add_argument("--sample", type=Path, default=None, help="default: OUT's parent folder")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    summary = build(args.out, args.sample or args.out.resolve().parent, args.seed)
    print(crawl_truth.format_table(summary))
    print(json.dumps(summary["totals"]))


if __name__ == "__main__":
    main()

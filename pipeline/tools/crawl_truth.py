"""The crawl sample's ground truth (`_planted.json`) and its README, from what was written.

The record counts are read back from the written files with warcio's ArchiveIterator, not
taken from the plan, so the README states what the files hold.
"""

from __future__ import annotations

import gzip
import io
from collections import Counter
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from pipeline.tools.crawl_plan import EXPECT, MAX_TEXT, MIN_TEXT, Plan

KINDS = ("warcinfo", "request", "response", "revisit", "metadata", "conversion")


def ground_truth(records: list[dict], plan: Plan, seed: int) -> dict:
    return {
        "seed": seed,
        "doc_id": "WARC-Record-ID of the response or conversion record",
        "offset": "byte offset of the record (its gzip member in a per-record .warc.gz; 0 for "
        "every record of a whole-stream .warc.gz, which is one member)",
        "document": "true where a reader should make a document of the record (README.md)",
        "counted_as": "how a run counts the record (the manifest's `records`): `documents`, or"
        " what the record was",
        "plants": {k: {"counted_as": v[0], "tests": v[1]} for k, v in EXPECT.items()},
        "records": records,
    }


def count_kinds(path: Path) -> Counter:
    """Records per WARC-Type (decompressed first: warcio refuses a whole-stream .warc.gz)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)  # every member, one after the other
    return Counter(r.rec_type for r in ArchiveIterator(io.BytesIO(data)))


def summarize(out: Path, records: list[dict]) -> dict:
    files = []
    for rel in sorted({r["file"] for r in records}):
        kinds = count_kinds(out / rel)
        mine = [r for r in records if r["file"] == rel]
        counted = Counter(r["counted_as"] for r in mine)
        counted.update({k: kinds[k] for k in ("request", "metadata") if kinds.get(k)})
        counted["warc_truncated"] = sum(r["plant"].startswith("truncated") for r in mine)
        files.append({"file": rel, "bytes": (out / rel).stat().st_size, "kinds": dict(kinds),
                      "documents": sum(r["document"] for r in mine),
                      "counted": {k: v for k, v in sorted(counted.items()) if v}})  # fmt: skip
    plants = Counter(r["plant"] for r in records if r["plant"] != "warcinfo")
    counted: Counter = Counter()
    for f in files:
        counted.update(f["counted"])
    totals = {
        "files": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "records": sum(sum(f["kinds"].values()) for f in files),
        "documents": sum(f["documents"] for f in files),
        **{k: sum(f["kinds"].get(k, 0) for f in files) for k in KINDS},
    }
    return {"files": files, "plants": dict(sorted(plants.items())), "totals": totals,
            "counted": dict(sorted(counted.items()))}  # fmt: skip


def format_table(summary: dict) -> str:
    head = f"| file | bytes | {' | '.join(KINDS)} | documents |"
    lines = [head, "|" + "---|" * (len(KINDS) + 3)]
    for f in summary["files"]:
        counts = " | ".join(str(f["kinds"].get(k, 0)) for k in KINDS)
        lines.append(f"| `{f['file']}` | {f['bytes']:,} | {counts} | {f['documents']} |")
    t = summary["totals"]
    counts = " | ".join(str(t[k]) for k in KINDS)
    lines.append(f"| all | {t['bytes']:,} | {counts} | {t['documents']} |")
    return "\n".join(lines)


def readme(summary: dict, truth: dict) -> str:
    plants = "\n".join(
        f"| `{name}` | {n} | `{EXPECT[name][0]}` | {EXPECT[name][1]} |"
        for name, n in summary["plants"].items()
    )
    t = summary["totals"]
    counted = "\n".join(f"| `{k}` | {v} |" for k, v in summary["counted"].items())
    return f"""# Crawl sample

A small web crawl ({t["bytes"]:,} bytes in {t["files"]} files, {t["records"]} WARC records,
{t["documents"]} of them should become documents) for tests, examples and
`configs/crawl.yaml`. Regenerate with
`python -m pipeline.tools.make_crawl_sample --out sample/crawl` (seed {truth["seed"]}; written
with warcio, the `crawl-sample` extra); the bytes depend only on the shipped `sample/` and the
seed, and a test checks that the files here are what the builder makes.

## Where the text comes from, and its licence

Every page's text is an original document of the shipped sample (`sample/`, see
sample/README.md): text cut from Debian 12's `/usr/share/doc/<package>/` files (copyright
files, changelogs, NEWS and README files) and `/usr/share/common-licenses/`, written by the
upstream developers, the Debian maintainers and the licences' stewards. Each text stays under
the terms stated in its package's `copyright` file, as in the shipped sample, which carries
the same texts; the licence texts themselves are distributed verbatim, as their stewards
allow. `text_from` in `_planted.json` names each page's sample document
(`source#row`), whose `documents` entry in `sample/_planted.json` names the Debian file.
Everything around the text was made by this builder and belongs to this project: the HTML
templates and their boilerplate, the HTTP and WARC headers, the PNG's pixels and the PDF. No
page was fetched from anywhere: the hosts are RFC 2606 example domains (`example.org`,
`example.com`, `example.net`), the IP addresses RFC 5737 documentation addresses.

## Layout

Common Crawl's: `warc/` holds the archives, `wet/` the extracted text. Each capture is a
`request`, a `response` (or `revisit`) and a `metadata` record (fetch time, detected charset)
linked by `WARC-Concurrent-To`; every file starts with a `warcinfo` record.

- `warc/*-00000.warc.gz`: WARC/1.0, each record its own gzip member (as Common Crawl writes).
- `warc/*-00001.warc.gz`: WARC/1.1, the whole file one gzip stream.
- `warc/*-00002.warc`: WARC/1.1, uncompressed.
- `wet/*-00000.warc.wet.gz`: WARC/1.0 `conversion` records (plain text), per-record gzip.

About half of the ordinary pages are stored as Common Crawl stores them (body decoded, the
server's `Content-Encoding` and `Content-Length` kept as `X-Crawler-Content-Encoding` and
`X-Crawler-Content-Length`), the rest as received (identity, or `Content-Encoding: gzip`);
the planted cases below add the other codings.

Records by kind:

{format_table(summary)}

## What a run makes of it

pipeline/ingest/web_archive.py makes a document of each `response` holding an HTTP 2xx
message with an HTML Content-Type (`text/html`, `application/xhtml+xml`) and of each
`conversion` record with text; it counts every other record by what it was. The run reports
these counts per source (the manifest's `records`, the summary's lines above `documents in`);
on this sample, e.g. `python -m pipeline run --config configs/crawl.yaml`:

| counted as | records |
|---|---|
{counted}

(`warc_truncated`: of the documents, those whose payload the crawler cut.) What the curation
chain and dedup then remove depends on their settings; with configs/crawl.yaml most planted
pages read as prose and reach dedup (tools/crawl_plan.py `reads_as_prose`).

## What was planted

Ground truth per record (file, offset, WARC-Record-ID, type, URL, plant, status, how a run
counts it, the sample document its text came from, the page it copies and the word 5-gram
Jaccard of their texts) is in
`_planted.json`. Ordinary pages hold texts of {MIN_TEXT:,} to {MAX_TEXT:,} bytes.

| plant | records | counted as | what it tests |
|---|---|---|---|
{plants}

Duplicates: `exact_same_site` and `exact_other_file` copies are byte-identical HTML at another
URL; `exact_mirror` copies carry the same text in another site's template, so they are exact
duplicates only after main-content extraction drops the boilerplate; `near` copies are edits
of a page's text on that other template (word-level edits, `tools/real_text.mutate_words`).
`index_page` pages are lists of page titles: extraction gives text, the curation chain
(configs/crawl.yaml) removes it. Request, metadata and warcinfo records never become documents.
"""

"""Ground truth, summary table and README of the sample corpus (see make_sample)."""

from __future__ import annotations

from pathlib import Path

import xxhash
from datasketch import MinHash, MinHashLSH

from pipeline.tools.real_text import jaccard, word_shingles

NATURAL_JACCARD = 0.7  # natural pairs at or above this (exact, on word 5-grams) are listed
_LSH_THRESHOLD = 0.6  # candidates are proposed a little below, then verified exactly
_NUM_PERM = 128


def _location(doc) -> list:
    return [doc.source, doc.row, doc.doc_id]


def natural_near_pairs(docs: list) -> list[tuple[object, object, float]]:
    """Near-duplicate pairs that occur naturally (e.g. licence texts under different headers)."""
    shingles = [word_shingles(d.text) for d in docs]
    hashed = [[s.encode() for s in sorted(sh)] for sh in shingles]
    signatures = MinHash.bulk(hashed, num_perm=_NUM_PERM, hashfunc=xxhash.xxh32_intdigest)
    lsh = MinHashLSH(threshold=_LSH_THRESHOLD, num_perm=_NUM_PERM)
    for index, signature in enumerate(signatures):
        lsh.insert(index, signature)
    pairs = []
    for i, signature in enumerate(signatures):
        for j in sorted(lsh.query(signature)):
            if j > i and (score := jaccard(shingles[i], shingles[j])) >= NATURAL_JACCARD:
                pairs.append((docs[i], docs[j], round(score, 4)))
    return pairs


def _root(doc):
    while doc.parent is not None:
        doc = doc.parent
    return doc


def ground_truth(docs: list, empty_files: tuple[str, ...], hidden_files: tuple[str, ...]) -> dict:
    good = [d for d in docs if d.role != "bad"]
    base = [d for d in docs if d.role == "base"]
    exact = [
        {"copy": _location(d), "original": _location(d.parent), "variant": d.detail["variant"]}
        for d in docs
        if d.role == "exact"
    ]
    near = []
    for d in (d for d in docs if d.role == "near"):
        copy_shingles = word_shingles(d.text)
        near.append(
            {
                "copy": _location(d),
                "parent": _location(d.parent),
                "parent_is_planted": d.parent.role == "near",
                "edit_rate": d.detail["edit_rate"],
                "jaccard_to_parent": round(jaccard(copy_shingles, word_shingles(d.parent.text)), 4),
                "jaccard_to_root": round(jaccard(copy_shingles, word_shingles(_root(d).text)), 4),
            }
        )
    natural = [
        {"a": _location(a), "b": _location(b), "jaccard": score}
        for a, b, score in natural_near_pairs(base)
    ]
    bad = [
        {"source": d.source, "row": d.row, "kind": d.detail["bad"]} for d in docs if d.role == "bad"
    ]
    ordered = sorted(good, key=lambda d: (d.source, d.row))
    return {
        "normalization": "NFC, whitespace runs collapsed to one space, stripped",
        "shingles": "lower-cased word 5-grams of the normalised text (Jaccard figures)",
        "doc_id": "id field as a string, else xxh3_64 hex of '<source>\\x00<row>'",
        "location": "[source, row, doc_id]",
        "exact_duplicates": exact,
        "near_duplicates": near,
        "natural_near_duplicates": natural,
        "bad_records": bad,
        "files_to_skip": sorted([*empty_files, *hidden_files]),
        "documents": [[d.source, d.row, d.doc_id, d.role, d.origin] for d in ordered],
    }


def summarize(out: Path, docs: list, container_paths: list[str]) -> dict:
    rows = []
    for path in container_paths:
        members = [d for d in docs if d.container == path]
        target = out / path
        files = sorted(target.iterdir()) if target.is_dir() else [target]
        files = [f for f in files if not f.name.startswith(".")]
        rows.append(
            {
                "path": path + ("/*.txt" if target.is_dir() else ""),
                "files": len(files),
                "records": len(members),
                "docs": sum(d.role != "bad" for d in members),
                "bytes": sum(f.stat().st_size for f in files),
                "text_bytes": sum(len(d.text.encode()) for d in members if d.role != "bad"),
                "exact": sum(d.role == "exact" for d in members),
                "near": sum(d.role == "near" for d in members),
                "bad": sum(d.role == "bad" for d in members),
            }
        )
    totals = {key: sum(r[key] for r in rows) for key in rows[0] if key != "path"}
    totals["base_docs"] = sum(d.role == "base" for d in docs)
    totals["near_chained"] = sum(d.role == "near" and d.parent.role == "near" for d in docs)
    return {"rows": rows, "totals": totals}


def format_table(summary: dict) -> str:
    columns = ("path", "files", "records", "docs", "bytes", "text_bytes", "exact", "near", "bad")
    lines = [" | ".join(f"{c:>10}" if c != "path" else f"{c:<32}" for c in columns)]
    for row in [*summary["rows"], {"path": "TOTAL", **summary["totals"]}]:
        cells = [f"{row['path']:<32}", *(f"{row[c]:>10}" for c in columns[1:])]
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def readme(summary: dict, truth: dict, seed: int) -> str:
    totals = summary["totals"]
    variants: dict[str, int] = {}
    for item in truth["exact_duplicates"]:
        variants[item["variant"]] = variants.get(item["variant"], 0) + 1
    near_scores = [item["jaccard_to_parent"] for item in truth["near_duplicates"]]
    natural_docs = {tuple(p[k][:2]) for p in truth["natural_near_duplicates"] for k in "ab"}
    layout = [
        f"| `{r['path']}` | {_format_name(r['path'])} | {r['files']} | {r['records']} "
        f"| {r['docs']} | {r['bytes']} |"
        for r in summary["rows"]
    ]
    facts = {
        "mb": f"{totals['bytes'] / 1e6:.1f}",
        "docs": totals["docs"],
        "files": totals["files"],
        "seed": seed,
        "layout": "\n".join(layout),
        "skip": ", ".join(f"`{f}`" for f in truth["files_to_skip"]),
        "exact": totals["exact"],
        "exact_share": f"{totals['exact'] / totals['docs']:.1%}",
        "variants": ", ".join(f"{n} {name}" for name, n in sorted(variants.items())),
        "near": totals["near"],
        "near_share": f"{totals['near'] / totals['docs']:.1%}",
        "chained": totals["near_chained"],
        "near_min": f"{min(near_scores):.2f}",
        "near_max": f"{max(near_scores):.2f}",
        "natural_pairs": len(truth["natural_near_duplicates"]),
        "natural_docs": len(natural_docs),
        "natural_min": NATURAL_JACCARD,
        "bad": totals["bad"],
        "bad_share": f"{totals['bad'] / totals['records']:.2%}",
        "bad_list": "; ".join(f"{b['kind']} in `{b['source']}`" for b in truth["bad_records"]),
    }
    return _README_TEMPLATE.format(**facts)


_README_TEMPLATE = """# Sample corpus

A small real-text corpus ({mb} MB on disk, {docs} documents in {files} data files) for tests and
examples. Regenerate with `python -m pipeline.tools.make_sample --out sample` (seed {seed}); the
result depends on the packages installed on the Debian machine that runs it.

## Where the text comes from

Nothing here was written by this project. The documents are cut from files on a Debian 12
machine: `/usr/share/doc/<package>/` (copyright files, `changelog.Debian.gz` and upstream
changelogs, NEWS and README files) and `/usr/share/common-licenses/` (GPL, LGPL, GFDL, Apache,
Artistic, BSD, MPL, CC0 texts). Their authors are the upstream developers and the Debian
maintainers of each package, and the stewards of each licence (Free Software Foundation, Apache
Software Foundation, Mozilla Foundation, Creative Commons, The Perl Foundation, the Regents of
the University of California). Each text stays under the terms stated in
`/usr/share/doc/<package>/copyright`; the `documents` list of `_planted.json` names the file each
document came from. Large files were cut at changelog entries or paragraph boundaries into
documents of 300 B to 30 KB.

## Layout

| path | format | files | records | documents | bytes |
|---|---|---|---|---|---|
{layout}

Records in `web/` carry string ids and a `meta` object, `docs/` integer ids, the Parquet file has
the columns `id`, `text`, `package`; `forum/*.ndjson` records and `books/*.txt` files have no id
(derived: xxh3_64 hex of `"<source>\\x00<row>"`). `web/2024/part-0001.jsonl.gz` escapes
non-ASCII characters as `\\u00e9`-style escapes, the other JSONL files store them as UTF-8.
Files without documents (a lister skips them, a reader must survive the zero-byte
`web/part-0006.jsonl`): {skip}; also this README and `_planted.json`.

## What was planted

Ground truth, with `[source, row, doc_id]` locations, is in `_planted.json`.

- **Exact duplicates**: {exact} copies ({exact_share} of documents) of distinct originals, each
  in another file than its original: {variants}. `whitespace` and `crlf` copies differ in
  whitespace only; `unicode_form` copies are the NFD (or NFC) form of the original, so they match
  only after normalisation (NFC + whitespace collapse). Natural exact duplicates (identical files
  of sibling packages) were removed, so these are all the exact duplicates.
- **Near duplicates**: {near} copies ({near_share}) with 1-5 % of the words substituted,
  inserted or deleted; {chained} of them are copies of a copy (chains A -> A' -> A'').
  Jaccard of word 5-grams to the parent: {near_min} to {near_max}.
- **Natural near duplicates**: {natural_pairs} pairs among the original documents with
  word-5-gram Jaccard >= {natural_min} ({natural_docs} documents): changelogs shared by the
  binary packages of one source package (they differ in the package name), licence texts inside
  copyright files, successive licence versions.
- **Bad records** ({bad}, {bad_share} of records): {bad_list}.
"""


def _format_name(path: str) -> str:
    for suffix in (".jsonl.gz", ".jsonl.zst", ".jsonl", ".ndjson", ".parquet"):
        if path.endswith(suffix):
            return suffix.lstrip(".")
    return "txt (one document per file)"

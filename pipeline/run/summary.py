"""The end-of-run summary: files, documents, bytes and time per stage; removals; quarantine;
and, last, the version and the Megatron `--data-path` to train on.

Per stage, `files` counts input files (only the listing knows files) and `docs` the documents
the stage handled: records read (quarantined ones included), quarantined documents, hash rows,
signed documents, documents removed (the audit), tokenized and packed documents."""

from __future__ import annotations

from pipeline.core.units import megabytes
from pipeline.formats.data_path import data_path_line
from pipeline.run.clock import timing_line
from pipeline.run.results import RunResult


def format_summary(result: RunResult) -> str:
    m, counts = result.manifest, result.manifest["counts"]
    if result.already_committed:
        return "\n".join(
            [
                f"already committed: this input and config are version {m['version']}"
                f" ({result.version.uri}){_honours(m)}; nothing was written",
                *train_on(result),
            ]
        )
    lines = [
        f"{'stage':<10} {'files':>6} {'docs':>10} {'bytes read':>12} {'seconds':>8} {'MB/s':>7}"
        f" {'tasks':>6} {'reused':>6} {'peak RSS':>9}"
    ]
    for s in result.stages:
        rate = s.bytes / 1e6 / s.seconds if s.seconds else 0.0
        lines.append(
            f"{s.name:<10} {_count(s.files):>6} {_count(s.docs):>10} {megabytes(s.bytes):>12}"
            f" {s.seconds:>8.2f} {rate:>7.1f} {s.tasks:>6} {s.reused:>6} {s.peak_rss_mb:>6.0f} MB"
        )
    reused = {s.name: s.reused for s in result.stages if s.reused}
    if reused:
        lines.append(
            "reused from earlier runs (unchanged inputs): "
            + ", ".join(f"{name} {n} units" for name, n in reused.items())
        )
    lines.append("")
    records = counts.get("records") or {}  # web archives (ingest/web_archive.py)
    if records:
        read = sum(n for kind, n in records.items() if kind != "warc_truncated")  # a subset
        lines.append(f"web archive records {read:>8,}  (by kind; documents, quarantined: in below)")
        for kind, n in records.items():
            lines.append(f"  {kind:<17}{n:>9,}")
    lines.append(f"documents in      {counts['docs_in']:>10,}")
    lines.append(f"  removed exact   {counts['removed_exact']:>10,}")
    lines.append(f"  removed near    {counts['removed_near']:>10,}")
    if "removed_takedown" in counts:  # the dataset's takedown list (formats/takedowns.py)
        entries = len((m.get("takedowns") or {}).get("entries", []))
        named = f"  ({_entries(entries)} of the takedown list)" if entries else ""
        lines.append(f"  taken down      {counts['removed_takedown']:>10,}{named}")
    for rule, n in (counts.get("removed_filtered") or {}).items():  # curation (docs/curate.md)
        lines.append(f"  filtered {rule:<20}{n:>8,}")
    curated = counts.get("curated") or {}
    for step, n in curated.get("changed", {}).items():
        spans = ", ".join(f"{k.split('.', 1)[-1]} {v:,}" for k, v in curated.get("spans", {})
                          .items() if k.startswith(f"{step}."))  # fmt: skip
        lines.append(f"  rewritten {step:<19}{n:>8,}  (kept; {spans or 'no spans'})")
    lines.append(f"  quarantined     {counts['quarantined']:>10,}")
    for reason, n in counts["quarantined_by_reason"].items():
        lines.append(f"    {reason:<15}{n:>9,}")
    lines.append(f"documents out     {counts['docs_out']:>10,}")
    lines.append(f"tokens            {counts['tokens']:>10,}  ({m['tokenizer']['dtype']})")
    tok = m["tokenizer"]
    if "engine" in tok:
        why = f"  ({tok['engine_reason']})" if tok.get("engine_reason") else ""
        lines.append(f"tokenizer engine  {tok['engine']:>10}{why}")
    total = sum(s["bin_bytes"] for s in m["shards"])
    lines.append(f"shards            {len(m['shards']):>10,}  ({megabytes(total)} of tokens)")
    valid = (m.get("splits") or {}).get("valid") or []
    if valid:
        vbytes, vdocs = sum(s["bin_bytes"] for s in valid), sum(s["documents"] for s in valid)
        lines.append(
            f"validation shards {len(valid):>10,}  ({vdocs:,} documents,"
            f" {megabytes(vbytes)} of tokens)"
        )
    if result.moved:  # storage traffic: (read + written) / listed input bytes, stats.json
        per, moved = result.moved["bytes_moved_per_input_byte"], result.moved
        stages = ", ".join(f"{k} {v:.2f}" for k, v in per.items() if k != "total" and v)
        lines.append(
            f"bytes moved       {per['total']:>10.2f} x input ({megabytes(moved['bytes_read'])}"
            f" read + {megabytes(moved['bytes_written'])} written; {stages})"
        )
    if m.get("sources"):
        lines.append("")
        lines += source_table(m["sources"])
        lines.append("")
    skipped = m["run"].get("skipped_files", {})
    if skipped:
        listing = m["lineage"]["skipped"]
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(skipped.items()))
        lines.append(f"files skipped     {reasons}  (listed in {listing})")
    if result.timing:
        note = "  (kernels compiled: first run here)" if result.compiled_kernels else ""
        lines.append(timing_line(result.timing, note))
    lines.append(f"committed         {result.version.uri}")
    if result.retention_actions is not None:
        lines.append(f"retention         {result.retention_actions} actions applied")
    for report in result.reports:
        if report.endswith(".md"):
            lines.append(f"cost report       {report}")
    return "\n".join(lines + train_on(result))


def _count(n: int) -> str:
    return f"{n:,}" if n else "-"


def train_on(result: RunResult) -> list[str]:
    """The last line: the version and Megatron's `--data-path` for its training shards (none
    for a version written before blend lines)."""
    blend = (result.manifest.get("blend") or {}).get("train")
    if not blend:
        return []
    version = result.manifest["version"]
    return [f"train on {version}: --data-path {data_path_line(result.version.uri, blend)}"]


def _honours(m: dict) -> str:
    entries = (m.get("takedowns") or {}).get("entries", [])
    return f", which honours the takedown list ({_entries(len(entries))})" if entries else ""


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def source_table(sources: dict) -> list[str]:
    """Per source: documents in and out, removals (and those in favour of another source),
    quarantine, tokens, validation documents and weight."""
    lines = [
        f"{'source':<12} {'in':>8} {'exact':>7} {'near':>7} {'filter':>7} {'quar.':>6}"
        f" {'out':>8} {'valid':>6} {'tokens':>11} {'weight':>6}  removed in favour of"
    ]
    for name, e in sources.items():
        favour = ", ".join(f"{k} {n:,}" for k, n in e.get("removed_in_favour_of", {}).items())
        filtered = sum((e.get("removed_filtered") or {}).values())
        lines.append(
            f"{name:<12} {e['docs_in']:>8,} {e['removed_exact']:>7,} {e['removed_near']:>7,}"
            f" {filtered:>7,} {e['quarantined']:>6,} {e['docs_out']:>8,}"
            f" {e.get('valid_documents', 0):>6,} {e['tokens']:>11,} {e.get('weight', 1.0):>6g}"
            f"  {favour or '-'}"
        )
    per_rule = {r for e in sources.values() for r in (e.get("removed_filtered") or {})}
    for rule in sorted(per_rule):
        by_source = ", ".join(f"{name} {(e.get('removed_filtered') or {}).get(rule, 0):,}"
                              for name, e in sources.items())  # fmt: skip
        lines.append(f"  filter {rule}: {by_source}")
    return lines


def print_summary(result: RunResult) -> None:
    print(format_summary(result))

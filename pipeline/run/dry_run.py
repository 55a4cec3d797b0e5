"""`run --dry-run`: what a run would read, per source, from the listing and one record per file
kind; nothing is written and no other content is read.

Per source: the files and bytes accepted, the skipped files with their reasons (as the run's
skipped.parquet would hold them), the first record's fields of the first file of each format
(ingest/first_record.py), the work units (ingest/listing.cut_units) and the dedup partitions the
listed bytes give (DedupConfig.partition_count). It calls the run's own listing
(run/read_tasks.py list_units) in this process, without Ray.
"""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

import pyarrow.compute as pc

from pipeline.config.model import Config
from pipeline.core.storage import Location
from pipeline.core.units import human_bytes
from pipeline.ingest.first_record import first_record
from pipeline.run.read_tasks import list_units

SKIPPED_SHOWN = 20  # skipped files named per source; the rest are counted


def dry_run_lines(cfg: Config) -> list[str]:
    listed = list_units(Location.from_uri(cfg.sources[0].uri, cfg.storage), cfg)
    partitions = cfg.dedup.partition_count(listed.listed_bytes)
    lines = [
        f"dry run of {cfg.name}: nothing is written; output would be"
        f" {cfg.output.uri.rstrip('/')}/{cfg.name}/"
    ]
    for src in cfg.sources:
        inputs = listed.inputs.filter(pc.equal(listed.inputs["origin"], src.name))
        units = listed.units.filter(pc.equal(listed.units["origin"], src.name))
        skipped = listed.skipped.filter(pc.equal(listed.skipped["origin"], src.name))
        size = int(pc.sum(inputs["size"]).as_py() or 0)
        formats = Counter(inputs["format"].to_pylist())
        lines += [
            "",
            f"source {src.name}: {src.uri}  include {src.include} exclude {src.exclude}",
            f"  files      {inputs.num_rows:,} ({human_bytes(size)}):"
            f" {', '.join(f'{n} {fmt}' for fmt, n in sorted(formats.items())) or 'none'}",
            f"  units      {len(set(units['unit_id'].to_pylist())):,}"
            f" of about {cfg.ingest.unit_bytes.human_readable()} (ingest.unit_bytes)",
        ]
        lines += _skipped_lines(skipped)
        lines += _first_record_lines(cfg, src, inputs)
    lines += [
        "",
        f"all sources: {listed.files:,} files, {human_bytes(listed.listed_bytes)},"
        f" {listed.unit_count:,} units, {partitions:,} dedup partitions"
        + (" (dedup.partitions)" if cfg.dedup.partitions else " (dedup.partition_bytes)"),
    ]
    return lines


def _skipped_lines(skipped) -> list[str]:
    if not skipped.num_rows:
        return ["  skipped    none"]
    reasons = Counter(skipped["reason"].to_pylist())
    lines = [f"  skipped    {', '.join(f'{n} {r}' for r, n in sorted(reasons.items()))}:"]
    rows = skipped.to_pylist()
    for row in rows[:SKIPPED_SHOWN]:
        lines.append(f"             {row['path']}  ({row['reason']}, {row['size']:,} B)")
    if len(rows) > SKIPPED_SHOWN:
        lines.append(f"             ... {len(rows) - SKIPPED_SHOWN} more")
    return lines


def _first_record_lines(cfg: Config, src, inputs) -> list[str]:
    """The first record of the first file of each extension (.json, .jsonl.gz, ...): one read
    each."""
    lines, seen = [], set()
    root = Location.from_uri(src.uri, cfg.storage)
    for row in inputs.to_pylist():
        suffixes = PurePosixPath(row["path"].lower()).suffixes
        suffix = "".join(suffixes[-2:] if row["compression"] != "none" else suffixes[-1:])
        if suffix in seen:
            continue
        seen.add(suffix)
        kind = (row["format"], row["compression"])
        found = first_record(root / row["path"], *kind, int(cfg.ingest.max_doc_bytes))
        lines.append(f"  first record of {row['path']} ({row['format']}):")
        if "problem" in found:
            lines.append(f"             {found['problem']}")
            continue
        fields = found["fields"]
        for name, value in fields.items():
            if row["format"] in ("warc", "html"):
                value = value if not isinstance(value, str) or len(value) < 80 else value[:77] + "…"
            marks = [m for m, f in (("text", src.text_field), ("id", src.id_field)) if f == name]
            tag = f"  <- {'/'.join(marks)}_field" if marks else ""
            lines.append(f"             {name}: {value!r}{tag}")
        if row["format"] in ("text", "warc", "html"):  # no text field: the page's text
            continue
        if src.text_field not in fields:
            lines.append(
                f"             no field {src.text_field!r} (text_field): every record"
                " of such files would be quarantined as missing_text"
            )
    return lines

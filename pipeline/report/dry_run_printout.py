"""The dry run's printout: the settings, the cut, a line per stage and the totals; and the
same plan as JSON (plan --json).

Contract: prints what report/dry_run.py planned, adding only sums and the bytes moved per input
byte.
"""

from __future__ import annotations

import json

from pydantic import ByteSize

from pipeline.report.dry_run_assumptions import TOKEN_BYTES
from pipeline.report.dry_run_stages import StagePlan


def _pack_cut(cut: dict) -> str:
    if cut["pack_one_pass"]:
        return "pack in one pass: each shard task reads the units' token files"
    g, k = cut["pack_groups"], cut["pack_buckets"]
    disk = si(cut["token_bytes"] / (g * k))
    return f"pack exchange {g} unit groups x {k} key buckets, {disk}B of local disk per pass-1 task"


def si(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def _binary(n: int) -> str:
    return ByteSize(n).human_readable()


def dry_run_lines(cut: dict, stages: list[StagePlan]) -> list[str]:
    per_partition = cut.get("partition_bytes")
    lines = [
        f"settings: units of {_binary(cut['unit_bytes'])} (ingest.unit_bytes), shards of"
        f" {_binary(cut['shard_bytes'])} (pack.shard_bytes), dedup partitions "
        + (
            f"of {_binary(per_partition)} listed (dedup.partition_bytes)"
            if per_partition
            else "fixed (dedup.partitions)"
        )
        + f"; assumed input files of {_binary(cut['file_bytes'])} (--file-bytes)"
        f" and {cut['corpus_bytes'] // max(1, cut['docs']):,} B per document (--docs)",
        f"corpus {si(cut['corpus_bytes'])}B in {cut['files']:,} files, {cut['docs']:,} docs:"
        f" {cut['units']:,} units, {cut['partitions']:,} dedup partitions, {cut['shards']:,}"
        f" shards ({si(cut['token_bytes'])}B of tokens at"
        f" {cut.get('token_bytes_per_id', TOKEN_BYTES)} B each; {_pack_cut(cut)})",
        f"{'stage':<10}{'tasks':>9}{'GET':>9}{'PUT':>9}{'HEAD':>8}{'LIST':>6}{'mean GET':>10}"
        f"{'read':>8}{'written':>8}{'MB/task':>9}{'core-h':>9}{'$ req':>9}{'moved':>7}",
    ]
    for s in stages:
        r = s.requests
        mean_get = s.bytes_read / r["get"] if r.get("get") else 0
        lines.append(
            f"{s.name:<10}{s.tasks:>9,}{si(r.get('get', 0)):>9}{si(r.get('put', 0)):>9}"
            f"{si(r.get('head', 0)):>8}{si(r.get('list', 0)):>6}{si(mean_get) + 'B':>10}"
            f"{si(s.bytes_read) + 'B':>8}{si(s.bytes_written) + 'B':>8}{s.peak_mb:>9,.0f}"
            f"{s.core_hours:>9,.0f}{s.dollars:>9,.2f}"
            f"{(s.bytes_read + s.bytes_written) / cut['corpus_bytes']:>6.2f}x"
        )
    total_req = sum(sum(s.requests.values()) for s in stages)
    lines.append(
        f"{'total':<10}{sum(s.tasks for s in stages):>9,}  requests {si(total_req)},"
        f" core-hours {sum(s.core_hours for s in stages):,.0f},"
        f" request $ {sum(s.dollars for s in stages):,.2f}"
    )
    read, written = sum(s.bytes_read for s in stages), sum(s.bytes_written for s in stages)
    lines.append(
        f"bytes moved {bytes_moved_per_input_byte(cut, stages):.2f} x input"
        f" ({si(read)}B read + {si(written)}B written for {si(cut['corpus_bytes'])}B in)"
    )
    return lines


def bytes_moved_per_input_byte(cut: dict, stages: list[StagePlan]) -> float:
    """(bytes read + bytes written, every stage) / input bytes: the run's storage traffic."""
    moved = sum(s.bytes_read + s.bytes_written for s in stages)
    return moved / cut["corpus_bytes"]


def dry_run_json(cut: dict, stages: list[StagePlan]) -> str:
    return json.dumps(
        {
            "cut": cut,
            "bytes_moved_per_input_byte": round(bytes_moved_per_input_byte(cut, stages), 3),
            "stages": [s.__dict__ for s in stages],
        }
    )

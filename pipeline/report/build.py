"""The cost report: gather a listing, the run's stage counters and the training reads; price them
(report/cost.py); render as Markdown (report/markdown.py), JSON, and HTML (report/html.py), both
laying out the same tables (report/tables.py).

Inputs it consumes:
- the retention plan (retention/plan.py): the listing with data and storage classes, before and
  after;
- pipeline stage counters, `_work/runs/<run_id>/stats.json` (formats/run_stats.py), of the run
  that made the newest committed version unless a run id or file is given; times runs per month;
- training reads: a reader counters JSON (READER_SCHEMA) for some epochs, or else an estimate:
  per epoch, every shard of the newest committed version read once in `range_bytes` range GETs
  plus one GET of each .idx; multiplied by epochs per month.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import TYPE_CHECKING, Any

from pipeline.core.layout import REPORTS_DIR, utc_stamp
from pipeline.core.storage import Location
from pipeline.core.units import MiB
from pipeline.formats.manifest import ManifestError, load_manifest
from pipeline.formats.run_stats import RunStats, StageStats, StatsError, parse_stats
from pipeline.report import cost
from pipeline.retention.plan import Plan, plan_retention

if TYPE_CHECKING:  # type only: config imports this package's section model
    from pipeline.config.model import Config

READER_SCHEMA = """{"epochs": float (default 1), "bytes_read": int, "get_requests": int,
 "head_requests": int, "list_requests": int}  (or the same keys under "io": an IO.delta;
 or reader_fetch.FetchStats' {"requests", "bytes"}, read as range GETs)"""

# A stage reads the data class its input lives in (first matching name prefix wins).
STAGE_READS = (
    ("list", "raw"),
    ("read", "raw"),
    ("quarantine", "quarantine"),
    ("exact", "exact_hashes"),
    ("dedup", "exact_hashes"),
    ("near", "near_dedup"),
    ("audit", "exact_hashes"),
    ("tokenize", "read_docs"),  # runs before the read task tokenized
    ("select", "token_parts"),
    ("pack", "token_parts"),
    ("commit", "versions"),
    ("verify", "versions"),
)
RANGE_BYTES = 16 * MiB
READER_BYTES = ("bytes_read", "requests", "bytes")  # the other counters a reader file holds
MAX_COUNTER = 2.0**63  # an int64: a larger count (or NaN, inf) is not a reader's


def stage_class(stage: StageStats) -> str:
    if stage.reads_class:
        return stage.reads_class
    name = stage.stage.lower()
    return next((c for prefix, c in STAGE_READS if name.startswith(prefix)), "other")


def pipeline_streams(stats: RunStats, runs_per_month: float) -> list[cost.ReadStream]:
    return [
        cost.ReadStream(
            f"pipeline {s.stage}",
            stage_class(s),
            float(s.io.get("bytes_read", 0)) * runs_per_month,
            {k: n * runs_per_month for k, n in cost.requests_from_io(s.io).items()},
        )
        for s in stats.stages
    ]


def _newest_manifest(plan: Plan) -> dict[str, Any] | None:
    live = sorted(
        {d.group for d in plan.decisions if d.data_class == "versions" and d.action != "delete"}
    )
    for version in reversed(live):
        try:
            return load_manifest(plan.dataset / version)
        except ManifestError:
            continue
    return None


class NoSuchRun(ValueError):
    """--run-id names no run of the dataset (no `_work/runs/<run_id>/stats.json`)."""


def _reader_counters(uri: str, cfg: Config) -> dict[str, Any]:
    """The reader counters JSON at `uri` (READER_SCHEMA); StatsError naming the file and the
    first bad field, rather than a report priced from text that is not counters."""
    data = Location.from_uri(uri, cfg.storage).read_bytes()
    try:
        return reader_counters(data)
    except StatsError as e:
        raise StatsError(f"{uri}: {e}") from None


def reader_counters(data: bytes) -> dict[str, Any]:
    """Reader counters from a file's bytes: a JSON object whose counters (READER_SCHEMA's keys,
    flat or under "io") are numbers from 0 to MAX_COUNTER and whose epochs is above 0."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        where = f"byte {e.object[e.start]:#04x} at offset {e.start}"
        raise StatsError(f"not UTF-8 text ({where})") from None
    except ValueError as e:
        raise StatsError(f"not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise StatsError(f"not an object of reader counters, a {type(raw).__name__}")
    io = raw.get("io", raw)
    if not isinstance(io, dict):
        raise StatsError("io: not an object of counters")
    if "bytes_read" not in io and "bytes" not in io:  # another JSON file given by mistake
        raise StatsError("no bytes_read (nor bytes): not reader counters")
    counters = [f"{kind}_requests" for kind in cost.REQUEST_KINDS]
    for where, key in [(raw, "epochs"), *((io, k) for k in [*counters, *READER_BYTES])]:
        value = where.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is None or (number and 0 <= value <= MAX_COUNTER and key != "epochs"):
            continue
        if key == "epochs" and number and 0 < value <= MAX_COUNTER:
            continue
        low = "above 0" if key == "epochs" else "from 0"
        raise StatsError(f"{key}: {value!r} is not a number {low} to {MAX_COUNTER:g}")
    return raw


def _find_stats(plan: Plan, manifest: dict | None, run_id: str | None) -> Location | None:
    """_work/runs/<run>/stats.json of the given run, else of the newest version's run, else the
    newest one there is."""
    stats = {
        d.obj.key.split("/")[2]: d.obj
        for d in plan.decisions
        if d.obj.root == "dataset"
        and d.obj.key.startswith("_work/runs/")
        and d.obj.key.endswith("/stats.json")
        and d.obj.key.count("/") == 3
    }
    if run_id is not None and run_id not in stats:  # asked for: a report without it misleads
        runs = ", ".join(sorted(stats)[:5]) or "none"
        raise NoSuchRun(
            f"--run-id {run_id!r}: no {plan.dataset.uri}/_work/runs/{run_id}/stats.json"
            f" (runs there: {runs}{', ...' if len(stats) > 5 else ''})"
        )
    run_id = run_id or (manifest or {}).get("run", {}).get("run_id")
    if run_id not in stats:
        if not stats or run_id:
            return None
        run_id = max(stats, key=lambda r: stats[r].mtime)
    return plan.dataset / stats[run_id].key


def _load_stats(loc: Location | None) -> RunStats:
    """The stats file's model (none: no stage reads); StatsError naming the file."""
    if loc is None:
        return RunStats()
    try:
        return parse_stats(loc.read_bytes())
    except StatsError as e:
        raise StatsError(f"{loc.uri}: {e}") from None


def training_per_epoch(
    manifest: dict | None, reader: dict | None, range_bytes: int
) -> tuple[float, dict[str, float], str]:
    """(bytes, requests, how) of one epoch of training reads."""
    if reader is not None:
        io = reader.get("io", reader)
        if "bytes_read" not in io and "bytes" in io:  # reader_fetch.FetchStats: range GETs
            io = {"bytes_read": io["bytes"], "get_requests": io.get("requests", 0)}
        epochs = float(reader.get("epochs", 1)) or 1.0
        requests = {k: n / epochs for k, n in cost.requests_from_io(io).items()}
        return float(io.get("bytes_read", 0)) / epochs, requests, "reader counters"
    if manifest is None:
        return 0.0, {}, "no committed version"
    shards = manifest["shards"]
    gets = sum(math.ceil(s["bin_bytes"] / range_bytes) + 1 for s in shards)
    size = sum(s["bin_bytes"] + s["idx_bytes"] for s in shards)
    return float(size), {"get": float(gets)}, f"estimated: {range_bytes} B ranges per shard"


def build_report(
    cfg: Config,
    plan: Plan | None = None,
    *,
    run_id: str | None = None,
    stats_uri: str | None = None,
    runs_per_month: float = 1.0,
    reader_stats_uri: str | None = None,
    epochs_per_month: float = 1.0,
    range_bytes: int = RANGE_BYTES,
) -> dict[str, Any]:
    plan = plan if plan is not None else plan_retention(cfg)
    prices = cfg.prices
    manifest = _newest_manifest(plan)
    stats_loc = (
        Location.from_uri(stats_uri, cfg.storage)
        if stats_uri
        else _find_stats(plan, manifest, run_id)
    )
    stats = _load_stats(stats_loc)
    streams = pipeline_streams(stats, runs_per_month)
    reader = _reader_counters(reader_stats_uri, cfg) if reader_stats_uri else None
    epoch_bytes, epoch_requests, how = training_per_epoch(manifest, reader, range_bytes)
    if epochs_per_month and epoch_bytes:
        streams.append(_training_stream(epoch_bytes, epoch_requests, epochs_per_month))
    before_rows = cost.retained_rows(plan.decisions, after=False)
    after_rows = cost.retained_rows(plan.decisions, after=True)
    before = cost.monthly(before_rows, streams, prices)
    after = cost.monthly(after_rows, streams, prices)
    once = cost.apply_once(plan.decisions, plan.now, prices)
    report: dict[str, Any] = {
        "format": "pipeline.report.cost-report/1",
        "dataset": plan.dataset.uri,
        "generated_at": dt.datetime.fromtimestamp(plan.now, dt.timezone.utc).isoformat(),
        "assumptions": {
            "runs_per_month": runs_per_month,
            "stats": stats_loc.uri if stats_loc else None,
            "epochs_per_month": epochs_per_month,
            "training_reads": how,
            "bytes_per_gb": prices.bytes_per_gb,
            "prices": prices.model_dump(mode="json"),
        },
        "before": before,
        "after": after,
        "savings_usd_per_month": before["total_usd"] - after["total_usd"],
        "apply_once": once,
        "by_class": cost.by_class(before_rows, after_rows, streams),
        "requests": cost.request_table(streams, once),
        "napkin": None,
    }
    report["sources"] = source_rows(manifest) if manifest is not None else []
    report["data"] = data_quality(manifest) if manifest is not None else None
    if manifest is not None:
        report["napkin"] = _napkin(manifest, epoch_bytes, epoch_requests, prices)
    return report


def source_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Bytes and tokens per source of a version: raw input bytes listed, shard bytes and tokens
    per split, and what one epoch of the training mixture reads (weight x its training shards).
    A version from before named sources has no `sources`: no rows."""
    rows = []
    shards = manifest["shards"] + (manifest.get("splits") or {}).get("valid", [])
    for name, entry in (manifest.get("sources") or {}).items():
        mine = [s for s in shards if s.get("source") == name]

        def size(split: str, mine=mine) -> int:
            return sum(s["bin_bytes"] + s["idx_bytes"] for s in mine if s.get("split") == split)

        weight = float(entry.get("weight", 1.0))
        rows.append(
            {
                "source": name,
                "weight": weight,
                "input_bytes": entry.get("input_bytes", 0),
                "docs_in": entry["docs_in"],
                "docs_out": entry["docs_out"],
                "train_bytes": size("train"),
                "train_tokens": entry.get("train_tokens", entry["tokens"]),
                "valid_bytes": size("valid"),
                "valid_tokens": entry.get("valid_tokens", 0),
                "epoch_tokens": weight * entry.get("train_tokens", entry["tokens"]),
                "epoch_bytes": weight * size("train"),
            }
        )
    return rows


def data_quality(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the newest version kept and why: per source its dedup removals, quarantine and
    documents, tokens and shard bytes per split; the quarantine's documents per reason; what
    each curation rule removed or rewrote (curate/). A
    version from before named sources is one source named like the dataset."""
    counts = manifest["counts"]
    entries = manifest.get("sources") or {
        manifest["name"]: {**counts, "train_documents": counts["docs_out"]}
    }
    shards = manifest["shards"] + (manifest.get("splits") or {}).get("valid", [])
    rows = []
    for name, e in entries.items():
        splits = {}
        for split in ("train", "valid"):
            mine = [s for s in shards if s.get("source", name) == name]
            mine = [s for s in mine if s.get("split", "train") == split]
            splits[split] = {
                "documents": e.get(f"{split}_documents", 0),
                "tokens": e.get(f"{split}_tokens", e["tokens"] if split == "train" else 0),
                "bytes": sum(s["bin_bytes"] + s["idx_bytes"] for s in mine),
            }
        rows.append(
            {
                "source": name,
                **{k: e[k] for k in ("docs_in", "docs_out", "removed_exact", "removed_near")},
                "quarantined": e["quarantined"],
                "in_favour_of": e.get("removed_in_favour_of", {}),
                "splits": splits,
            }
        )
    return {
        "version": manifest.get("version"),
        "sources": rows,
        "quarantine": dict(counts.get("quarantined_by_reason", {})),
        "docs_in": counts["docs_in"],
        "filtered": dict(counts.get("removed_filtered") or {}),
        "curated": dict(counts.get("curated") or {}),
    }


def _training_stream(
    epoch_bytes: float, epoch_requests: dict[str, float], epochs_per_month: float
) -> cost.ReadStream:
    return cost.ReadStream(
        "training",
        "versions",
        epoch_bytes * epochs_per_month,
        {k: n * epochs_per_month for k, n in epoch_requests.items()},
    )


def _napkin(manifest: dict, epoch_bytes: float, epoch_requests: dict, prices) -> dict[str, Any]:
    """One epoch of training reads from one object per document vs from the shards."""
    return {
        "version": manifest.get("version"),
        **cost.layout_napkin(
            manifest["counts"]["docs_out"],
            int(epoch_bytes),
            len(manifest["shards"]),
            epoch_requests.get("get", 0.0),
            prices,
        ),
    }


def write_report(report: dict[str, Any], dataset: Location) -> list[Location]:
    """Store the report as _reports/cost-<time>.{json,md,html} (each an atomic write)."""
    from pipeline.report.html import format_html
    from pipeline.report.markdown import format_markdown

    stamp = utc_stamp()
    out = []
    for ext, text in (
        ("json", json.dumps(report, indent=1, sort_keys=True)),
        ("md", format_markdown(report)),
        ("html", format_html(report)),
    ):
        loc = dataset / f"{REPORTS_DIR}/cost-{stamp}.{ext}"
        loc.write_bytes(text.encode())
        out.append(loc)
    return out

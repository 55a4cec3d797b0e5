"""`curate-preview`: what a config's curation chains would do, on a sample of each source,
without writing anything.

Per source, it reads work units in listing order (the run's own listing and readers, in this
process, without Ray) until it holds `sample` documents, runs the source's chain on them
(curate/chain.py) and prints, per step, how many documents it saw and removed (or changed,
for a transform) and a few of them with the reason; for a step that scores documents
(fasttext_classifier) the score's quantiles on the documents it saw, i.e. the `min_score` that
keeps 50 %, 25 %, 10 %, 5 % and 1 % of them. Nothing is written; only the units it samples are
read. The chains' files and functions are checked when the config loads (exit 2); a `python`
step that raises or returns what it may not stops the preview with one line naming the step
and the source (RunError, exit 3).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config.model import Config
from pipeline.core.storage import Location
from pipeline.curate import chain
from pipeline.curate.classifier import QUANTILES
from pipeline.curate.user import HookError
from pipeline.exchange.sections import concat
from pipeline.ingest.records import docs_schema
from pipeline.run.read_tasks import list_units, read_pieces
from pipeline.run.results import RunError

EXAMPLES = 3  # documents shown per step
TEXT_SHOWN = 100  # characters of each example's text


def preview_lines(cfg: Config, sample: int) -> list[str]:
    listed = list_units(Location.from_uri(cfg.sources[0].uri, cfg.storage), cfg)
    lines = [f"curate-preview of {cfg.name}: up to {sample:,} documents a source; nothing is"
             " written"]  # fmt: skip
    for src in cfg.sources:
        raw = cfg.chain_of(src)
        lines += ["", f"source {src.name}: {len(raw)} step(s)"]
        if not raw:
            lines.append("  no curation chain: every document is kept")
            continue
        docs = _sample_docs(cfg, src, listed.units, sample)
        steps = chain.build(chain.parse(raw), read=_reader(cfg))
        try:
            lines += _step_lines(steps, docs)
        except HookError as e:
            raise RunError(f"{e} (on the sample of source {src.name})") from None
    return lines


def _sample_docs(cfg: Config, src, units: pa.Table, sample: int) -> pa.Table:
    mine = units.filter(pc.equal(units["origin"], src.name)).to_pylist()
    root = Location.from_uri(src.uri, cfg.storage)
    parts, held = [], 0
    for unit_id in dict.fromkeys(p["unit_id"] for p in mine):
        docs, _ = read_pieces(root, [p for p in mine if p["unit_id"] == unit_id], cfg, src)
        parts.append(docs)
        held += docs.num_rows
        if held >= sample:
            break
    return concat(parts, docs_schema(tuple(src.keep_fields))).slice(0, sample)


def _step_lines(steps: list[chain.Step], docs: pa.Table) -> list[str]:
    lines = [f"  documents  {docs.num_rows:,} read"]
    for step in steps:
        seen = docs.num_rows
        outcome = chain.apply([step], docs)
        if step.kind == "transform":
            lines.append(f"  {step.name:<18} transform: {outcome.changed_by_rule[step.name]:,}"
                         f" of {seen:,} changed; spans {dict(outcome.spans) or {}}")  # fmt: skip
        else:
            if hasattr(step, "scores") and seen:
                lines.append(_quantile_line(step.scores(docs["text"]).astype(np.float64)))
            removed = outcome.removed.num_rows
            share = removed / seen if seen else 0.0
            lines.append(f"  {step.name:<18} filter: removes {removed:,} of {seen:,}"
                         f" ({share:.1%})")  # fmt: skip
            texts = dict(zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist(), strict=True))
            for row in outcome.removed.slice(0, EXAMPLES).to_pylist():
                text = " ".join(texts[row["doc_id"]].split())[:TEXT_SHOWN]
                lines.append(f"    {row['doc_id']}: {row['detail']}")
                lines.append(f"      {text!r}")
        docs = outcome.kept
    lines.append(f"  kept       {docs.num_rows:,}")
    return lines


def _quantile_line(scores: np.ndarray) -> str:
    """The score that keeps each share of the documents (a min_score keeps those at or above it)."""
    cuts = "  ".join(f"top {1 - q:.0%} >= {np.quantile(scores, q, method='lower'):.4f}"
                     for q in QUANTILES)  # fmt: skip
    return f"    score quantiles ({len(scores):,} documents): {cuts}"


def _reader(cfg: Config):
    def read(uri: str) -> bytes:
        return Location.from_uri(uri, cfg.storage).read_bytes()

    return read

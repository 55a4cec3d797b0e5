"""The documents a run read, with their text, read again from its inputs: the read task keeps
no text (it tokenizes while it reads), so a test that needs a unit's texts reads its pieces."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.ingest.readers import read_piece


def unit_documents(
    cfg: Config, layout: RunLayout, unit: str, units: pa.Table | None = None
) -> list[dict]:
    """The unit's documents as the read task kept them: doc_id (prefixed with the source's name
    where sources are named), source, row, text; records it quarantined (the tokenizer's too)
    left out. `units`: the run's units.parquet, when the caller has it already."""
    units = layout.units.read_parquet() if units is None else units
    pieces = units.filter(pc.equal(units["unit_id"], unit)).to_pylist()
    bad = {(r["source"], r["row"]) for r in layout.read_quarantine(unit).read_parquet().to_pylist()}
    out = []
    for piece in pieces:
        _, src = cfg.source_rank(piece.get("origin"))
        root = Location.from_uri(src.uri, cfg.storage)
        for docs, _ in read_piece(
            root, piece, src.text_field, src.id_field, max_doc_bytes=int(cfg.ingest.max_doc_bytes)
        ):
            for d in docs.select(["doc_id", "source", "row", "text"]).to_pylist():
                if (d["source"], d["row"]) in bad:
                    continue
                if cfg.named_sources:
                    d["doc_id"] = f"{src.name}/{d['doc_id']}"
                out.append(d)
    return out


def run_documents(cfg: Config, layout: RunLayout) -> list[dict]:
    """Every unit's documents (unit_documents), units in sorted order."""
    units = layout.units.read_parquet()
    ids = sorted(set(units["unit_id"].to_pylist()))
    return [d for u in ids for d in unit_documents(cfg, layout, u, units)]

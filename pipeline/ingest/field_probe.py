"""A wrong `text_field` or `id_field` is a config error before any task reads: the first record
of each source's first file of each format is probed (JSONL: the first line, read in a range
of a few KiB; Parquet: the schema in the footer; text files have no fields).

`text_field` must be a key of that record (a column of that schema). `id_field` may be absent
from a record (its document gets a derived id: ingest/records.py; the shipped sample's forum
files have none), so an id_field missing from a first record is a warning, not an error. A first
record that is not a JSON object, or
a first line longer than PROBE_LINE_BYTES, proves nothing: those files are left to the readers,
whose quarantine says what is wrong with each record.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.config.errors import ConfigError
from pipeline.core.storage import Location
from pipeline.ingest.first_record import UNREADABLE, first_line, first_object

PROBE_LINE_BYTES = 1 << 20  # a longer first line is not probed


class FieldError(ConfigError):
    """A configured field is not in a source's first record (exit 2, like any config error)."""


def probe_fields(cfg: Any, inputs: pa.Table, roots: dict[str, Location]) -> list[str]:
    """FieldError naming the source, the text field, the file and the columns found; returns
    a warning for each first record without the id field."""
    probed = inputs.filter(pc.not_equal(inputs["format"], "text"))
    first = probed.group_by(["origin", "format"], use_threads=False).aggregate(
        [("path", "first"), ("compression", "first")]
    )  # in listing order: each source's first file of each format
    firsts: dict[tuple[str, str], dict[str, Any]] = {
        (row["origin"], row["format"]): {
            "path": row["path_first"],
            "format": row["format"],
            "compression": row["compression_first"],
        }
        for row in first.to_pylist()
    }
    warnings = []
    for rank, src in enumerate(cfg.sources):
        for fmt in ("jsonl", "parquet"):
            row = firsts.get((src.name, fmt))
            if row is None:
                continue
            loc = roots[src.name] / row["path"]
            columns = _first_columns(loc, row["format"], row["compression"])
            if columns is None:
                continue
            label = f"inputs[{rank}] ({src.name})" if cfg.named_sources else "input"
            where = f"the {'schema' if fmt == 'parquet' else 'first record'} of {loc.uri}"
            if src.text_field not in columns:
                raise FieldError(
                    f"{label}: text_field {src.text_field!r} not in {where};"
                    f" columns: {sorted(columns)}"
                )
            if src.id_field and src.id_field not in columns:
                warnings.append(
                    f"{label}: id_field {src.id_field!r} not in {where} (columns:"
                    f" {sorted(columns)}); records without it get derived ids"
                )
    return warnings


def _first_columns(loc: Location, fmt: str, compression: str) -> list[str] | None:
    """The keys of the first record (JSONL) or the column names (Parquet); None: unknown."""
    try:
        if fmt == "parquet":
            with loc.open_read(block_size=1 << 16) as f:
                return list(pq.ParquetFile(f).schema_arrow.names)
        line = first_line(loc, compression, PROBE_LINE_BYTES)
    except (*UNREADABLE, pa.ArrowInvalid):
        # gone, truncated, not what its name says (a `.gz` that is not gzip: BadGzipFile is an
        # OSError) or not Parquet: the readers quarantine that file with its reason
        return None
    record = None if line is None else first_object(line)
    return list(record) if isinstance(record, dict) else None

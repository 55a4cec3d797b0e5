"""tokenize's engine probe reads the first documents of a unit, not the unit: the documents file
starts with a small row group (read_dedup_tasks.write_docs)."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.layout import RunLayout
from pipeline.core.storage import IO, Location
from pipeline.ingest.records import DOCS_SCHEMA
from pipeline.run.read_dedup_tasks import PROBE_ROWS, write_docs
from pipeline.run.tokenize_tasks import _first_documents


def test_the_probe_reads_the_first_row_group_only(tmp_path):
    rng = random.Random(7)
    texts = [" ".join(f"{rng.random():.12f}" for _ in range(300)) for _ in range(600)]
    docs = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(600)],
            "source": ["a.jsonl"] * 600,
            "row": list(range(600)),
            "text": texts,
        },
        schema=DOCS_SCHEMA,
    )
    layout = RunLayout(Location.from_uri(str(tmp_path)), "r", "read", "tok")
    loc = layout.read_docs("u0")
    write_docs(loc, docs)
    groups = pq.ParquetFile(loc.path).metadata
    assert groups.num_row_groups == 2 and groups.row_group(0).num_rows == PROBE_ROWS
    assert pq.read_table(loc.path).equals(docs)  # every document, in order
    before = IO.snapshot()
    first = _first_documents(layout, "u0", 20_000)
    read = IO.delta(IO.snapshot(), before)["bytes_read"]
    assert first == list(zip(docs["doc_id"].to_pylist(), texts, strict=True))[: len(first)]
    assert 2 <= len(first) < PROBE_ROWS
    assert read < loc.size() / 4, (read, loc.size())


def test_an_empty_unit_reads_back_empty(tmp_path):
    loc = Location.from_uri(str(tmp_path / "u.docs.parquet"))
    docs = DOCS_SCHEMA.empty_table()
    write_docs(loc, docs)
    assert pq.read_table(loc.path).num_rows == 0

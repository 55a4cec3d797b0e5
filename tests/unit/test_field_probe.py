"""The field probe (ingest/field_probe.py): a wrong text_field or id_field is a config error
naming the source, the field, the file and the columns, from the first record alone."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from support import SOURCES_CONFIG, TOKENIZER

from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.core.io_counters import IO
from pipeline.core.storage import Location
from pipeline.ingest.field_probe import FieldError, probe_fields
from pipeline.ingest.listing import list_inputs, with_origin

ROWS = [{"content": f"text {i} " * 50, "doc_id": str(i), "url": f"u{i}"} for i in range(20_000)]


def config(tmp: Path, data: Path, **fields):
    raw = yaml.safe_load(SOURCES_CONFIG.read_text())
    raw["inputs"] = [{"name": "web", "uri": str(data), **fields}]
    raw["tokenize"]["tokenizer"] = str(TOKENIZER)
    (tmp / "c.yaml").write_text(yaml.safe_dump(raw))
    return load_config(tmp / "c.yaml", output_uri=str(tmp / "out"))


def probe(cfg) -> list[str]:
    src = cfg.sources[0]
    root = Location.from_uri(src.uri)
    inputs, _ = list_inputs(root, src.include, src.exclude)
    return probe_fields(cfg, with_origin(inputs, src.name, root.uri), {src.name: root})


@pytest.fixture
def data(tmp_path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("\n" + "\n".join(json.dumps(r) for r in ROWS) + "\n")
    return folder


def test_a_wrong_text_field_names_the_columns_after_reading_a_few_kib(tmp_path, data):
    assert (data / "a.jsonl").stat().st_size > 5_000_000
    cfg = config(tmp_path, data, text_field="body")
    before = IO.snapshot()
    with pytest.raises(FieldError) as e:
        probe(cfg)
    assert str(e.value) == (
        f"inputs[0] (web): text_field 'body' not in the first record of {data}/a.jsonl;"
        " columns: ['content', 'doc_id', 'url']"
    )
    assert isinstance(e.value, ConfigError) and e.value.exit_code == 2
    assert IO.delta(IO.snapshot(), before).get("bytes_read", 0) <= 16 * 1024
    assert probe(config(tmp_path, data, text_field="content", id_field="doc_id")) == []


def test_an_id_field_missing_from_the_first_record_is_a_warning(tmp_path, data):
    [warning] = probe(config(tmp_path, data, text_field="content", id_field="uid"))
    assert warning == (
        f"inputs[0] (web): id_field 'uid' not in the first record of {data}/a.jsonl (columns:"
        " ['content', 'doc_id', 'url']); records without it get derived ids"
    )
    assert probe(config(tmp_path, data, text_field="content", id_field="doc_id")) == []
    assert probe(config(tmp_path, data, text_field="content", id_field=None)) == []


def test_parquet_schema_and_compressed_jsonl(tmp_path, data):
    (data / "a.jsonl").unlink()
    pq.write_table(pa.Table.from_pylist(ROWS[:100]), data / "b.parquet")
    with gzip.open(data / "c.jsonl.gz", "wt") as f:
        f.write(json.dumps({"body": "x", "id": 1}) + "\n")
    with pytest.raises(FieldError, match=r"text_field 'body' not in the schema of .*b.parquet"):
        probe(config(tmp_path, data, text_field="body"))
    with pytest.raises(FieldError, match=r"'content' not in the first record .*c.jsonl.gz"):
        probe(config(tmp_path, data, text_field="content"))


def test_a_first_record_that_proves_nothing_is_left_to_the_readers(tmp_path, data):
    (data / "a.jsonl").write_text('not json\n{"content": "x"}\n')
    # malformed: no error and no warning here; the reader quarantines the line
    assert probe(config(tmp_path, data, text_field="body")) == []

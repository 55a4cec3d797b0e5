"""`inputs[].keep_fields`: chosen input fields carried into documents.parquet, through `find`
and a takedown (real JSONL and Parquet files, real Ray; `find` as a command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from support import REPO, SAMPLE, TOKENIZER, own_ray_env

from pipeline.cli.main import main
from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import resolve_version
from pipeline.run.driver import run_pipeline

pytestmark = pytest.mark.slow  # runs the pipeline, and its commands (conftest.py)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
        env=own_ray_env(),
    )


def _texts(n: int) -> list[str]:
    """Distinct real paragraphs of the shipped sample's books (no two near copies)."""
    seen, out = set(), []
    for path in sorted((SAMPLE / "books").glob("*.txt")):
        for para in path.read_text().split("\n\n"):
            words = para.split()
            key = " ".join(words[:12])
            if len(words) > 40 and key not in seen:
                seen.add(key)
                out.append(para)
    assert len(out) >= n
    return out[:n]


def _config(tmp: Path, keep_web: list[str], keep_books: list[str]) -> Path:
    raw = {
        "name": "kept",
        "inputs": [
            {"name": "web", "uri": str(tmp / "in"), "include": ["web/**"],
             "keep_fields": keep_web},
            {"name": "books", "uri": str(tmp / "in"), "include": ["books/**"],
             "keep_fields": keep_books},
        ],
        "output": {"uri": str(tmp / "out")},
        "ingest": {"max_error_rate": 0.2},
        "dedup": {"near": {"enabled": False}},
        "tokenize": {"tokenizer": str(TOKENIZER), "eos": "<|endoftext|>"},
    }
    path = tmp / f"kept-{len(keep_web)}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def kept(ray_local, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kept")
    texts = _texts(30)
    web = []
    for i, text in enumerate(texts[:20]):
        record = {"id": f"w{i}", "text": text, "url": f"https://example.org/{i}", "score": i / 4}
        if i == 3:
            del record["url"]  # a missing field: null
        if i == 5:
            record["score"] = None
        if i == 7:
            record["url"] = {"href": "x"}  # not a scalar: quarantined non_scalar_field
        web.append(record)
    (tmp / "in" / "web").mkdir(parents=True)
    (tmp / "in" / "web" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in web))
    (tmp / "in" / "books").mkdir()
    pq.write_table(
        pa.table({"id": [f"b{i}" for i in range(10)], "text": texts[20:],
                  "url": [f"file:///b/{i}" for i in range(10)], "pages": list(range(10))}),
        tmp / "in" / "books" / "b.parquet",
    )
    result = run_pipeline(load_config(_config(tmp, ["url", "score"], ["url"])), show_progress=False)
    return tmp, Path(result.version.path)


def test_kept_fields_are_index_columns_missing_is_null_non_scalar_quarantined(kept) -> None:
    _, version = kept
    manifest = verify_version(Location.from_uri(str(version)))
    assert manifest["counts"]["quarantined_by_reason"] == {"non_scalar_field": 1}
    index = pq.read_table(version / "documents.parquet")
    assert index.column_names[-2:] == ["url", "score"]
    assert index.schema.field("url").type == pa.string()
    rows = {r["doc_id"]: r for r in index.to_pylist()}
    assert "web/w7" not in rows
    assert rows["web/w2"]["url"] == "https://example.org/2" and rows["web/w2"]["score"] == "0.5"
    assert rows["web/w3"]["url"] is None and rows["web/w5"]["score"] is None
    assert rows["books/b4"]["url"] == "file:///b/4" and rows["books/b4"]["score"] is None


def test_find_prints_the_kept_fields(kept) -> None:
    _, version = kept
    found = _cli("find", str(version), "--id", "web/w9")
    assert found.returncode == 0, found.stderr
    assert f"{'url':>12} https://example.org/9" in found.stdout
    assert f"{'score':>12} 2.25" in found.stdout


def test_a_takedown_keeps_the_fields_of_the_rest(kept) -> None:
    tmp, version = kept
    (tmp / "ids").write_text("web/w2\nbooks/b1\n")
    assert main(["remove", str(version), "--ids", str(tmp / "ids")]) == 0  # on the shared Ray
    child = Path(resolve_version(Location.from_uri(str(version.parent))).path)
    verify_version(Location.from_uri(str(child)))
    old = pq.read_table(version / "documents.parquet").to_pylist()
    new = pq.read_table(child / "documents.parquet").to_pylist()
    assert [(r["doc_id"], r["url"], r["score"]) for r in new] == [
        (r["doc_id"], r["url"], r["score"])
        for r in old
        if r["doc_id"] not in ("web/w2", "books/b1")
    ]


def test_keep_fields_is_part_of_the_read_key_not_the_token_key(kept) -> None:
    tmp, _ = kept
    with_fields = load_config(_config(tmp, ["url", "score"], ["url"]))
    without = load_config(_config(tmp, [], []))
    assert with_fields.read_key() != without.read_key()
    assert with_fields.output_hash() != without.output_hash()
    assert with_fields.token_key() == without.token_key()


def test_a_kept_field_named_like_an_index_column_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(ConfigError, match="shard"):
        load_config(_config(tmp_path, ["url", "shard"], []))

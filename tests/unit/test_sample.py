"""The shipped sample corpus and tokenizer hold what the rest of the test suite relies on."""

import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import SAMPLE, TOKENIZER
from tokenizers import Tokenizer

from pipeline.core.text import derived_id, normalize
from pipeline.tools.sample_io import Malformed, iter_records, list_data_files, usable_text


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((SAMPLE / "_planted.json").read_text())


@pytest.fixture(scope="module")
def records() -> dict[tuple[str, int], object]:
    """Every record of the sample keyed by (source, row)."""
    found = {}
    for path in list_data_files(SAMPLE):
        source = path.relative_to(SAMPLE).as_posix()
        for row, record in iter_records(path):
            found[(source, row)] = record
    return found


def test_sample_has_every_format_in_nested_folders():
    names = [p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob("*") if p.is_file()]
    for suffix in (".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson", ".parquet"):
        assert any(n.endswith(suffix) for n in names), suffix
    assert sum(n.startswith("books/") and n.endswith(".txt") for n in names) >= 24
    assert any(n.count("/") >= 3 for n in names)  # e.g. web/2024/05/part-0002.jsonl
    assert (SAMPLE / "web/part-0006.jsonl").stat().st_size == 0
    assert {".DS_Store", "_SUCCESS"} <= {Path(n).name for n in names}
    listed = {p.name for p in list_data_files(SAMPLE)}
    assert not {".DS_Store", "_SUCCESS", "README.md", "_planted.json"} & listed


def test_parquet_has_metadata_column_and_ndjson_has_no_ids(records):
    (parquet,) = SAMPLE.glob("licenses/*.parquet")
    assert set(pq.read_schema(parquet).names) >= {"id", "text", "package"}
    ndjson = [r for (source, _), r in records.items() if source.endswith(".ndjson")]
    assert len(ndjson) > 50
    assert not any("id" in r for r in ndjson if isinstance(r, dict))


def test_exact_duplicates_are_exactly_the_planted_ones(records, truth):
    groups = defaultdict(list)
    for location, record in records.items():
        if (text := usable_text(record)) is not None:
            groups[normalize(text)].append(location)
    duplicated = {loc for group in groups.values() if len(group) > 1 for loc in group}
    planted = {
        tuple(item[key][:2]) for item in truth["exact_duplicates"] for key in ("copy", "original")
    }
    assert duplicated == planted
    assert len(truth["exact_duplicates"]) >= 0.03 * len(groups)
    for variant in ("unicode_form", "whitespace", "crlf"):  # raw text differs, normalised equal
        item = next(i for i in truth["exact_duplicates"] if i["variant"] == variant)
        copy, original = (records[tuple(item[k][:2])]["text"] for k in ("copy", "original"))
        assert copy != original and normalize(copy) == normalize(original)


def test_near_duplicates_match_their_recorded_similarity(records, truth):
    def shingles(text):
        words = normalize(text).lower().split(" ")
        return {" ".join(words[i : i + 5]) for i in range(len(words) - 4)}

    near = truth["near_duplicates"]
    assert len(near) >= 0.04 * len(truth["documents"])
    assert any(item["parent_is_planted"] for item in near)  # chains A -> A' -> A''
    for item in near[:10]:
        copy, parent = (shingles(records[tuple(item[k][:2])]["text"]) for k in ("copy", "parent"))
        score = len(copy & parent) / len(copy | parent)
        assert score == pytest.approx(item["jaccard_to_parent"], abs=1e-4)
        assert 0.5 < score < 1.0


def test_bad_records_are_few_and_of_each_kind(records, truth):
    bad = {}
    for location, record in records.items():
        if isinstance(record, Malformed):
            bad[location] = "malformed_json"
        elif "text" not in record:
            bad[location] = "missing_text"
        elif not isinstance(record["text"], str):
            bad[location] = "numeric_text"
        elif not record["text"].strip():
            bad[location] = "whitespace_text"
    assert bad == {(b["source"], b["row"]): b["kind"] for b in truth["bad_records"]}
    assert len(set(bad.values())) == 4
    assert len(bad) < 0.01 * len(records)


def test_document_ids_follow_the_convention_and_are_unique(records, truth):
    ids = []
    for source, row, doc_id, _role, _origin in truth["documents"]:
        record = records[(source, row)]
        if "id" in record:
            assert doc_id == str(record["id"])
        else:
            assert doc_id == derived_id(source, row)
        ids.append(doc_id)
    assert len(ids) == len(set(ids)) == sum(usable_text(r) is not None for r in records.values())


def test_tokenizer_round_trips_and_has_end_of_text():
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    assert tokenizer.get_vocab_size() < 65500
    assert tokenizer.token_to_id("<|endoftext|>") == 0
    assert any(
        t.content == "<|endoftext|>" and t.special
        for t in tokenizer.get_added_tokens_decoder().values()
    )
    assert tokenizer.encode("<|endoftext|>").ids == [0]
    for text in (
        "Grüße, naïve café — Ελληνικά, 日本語 🙂\ttabs\r\n",
        "e\u0301 versus \u00e9",
        (SAMPLE / "web/2024/05/part-0002.jsonl").read_text(encoding="utf-8")[:5000],
    ):
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text

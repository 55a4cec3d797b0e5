"""The pure parts of takedown and kept fields (issue 23): PackPlan.without, ids_digest,
kept_fields, Batches with kept fields, documents.with_fields."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from pipeline.formats import documents
from pipeline.ingest.records import NON_SCALAR_FIELD, Batches, Rejected, kept_fields
from pipeline.tokens.pack import PackPlan, ids_digest


def test_ids_digest_is_sha256_of_the_sorted_lines() -> None:
    assert ids_digest(["b", "a"]) == hashlib.sha256(b"a\nb\n").hexdigest() == ids_digest({"a", "b"})


def test_without_adds_to_what_a_plan_already_leaves_out() -> None:
    plan = PackPlan(4, 2, 1, prefix="train-web", split="train", valid_fraction=0.05)
    first = plan.without(["x"])
    both = first.without(["y"])
    assert both.excluded == frozenset({"x", "y"}) and both.removal == ids_digest(["x", "y"])
    assert (both.shards, both.buckets, both.groups, both.prefix) == (4, 2, 1, "train-web")
    assert len({plan.name, first.name, both.name}) == 3  # their exchange objects never mix
    assert plan.excluded == frozenset() and plan.removal == ""


def test_kept_fields_strings_and_numbers_kept_others_rejected() -> None:
    names = ("url", "score", "n", "gone")
    assert kept_fields(["u", 0.5, 3, None], names) == ("u", "0.5", "3", None)
    for bad in (True, {"a": 1}, [1]):
        with pytest.raises(Rejected) as e:
            kept_fields(["u", bad, 1, None], names)
        assert e.value.reason == NON_SCALAR_FIELD and "'score'" in e.value.detail


def test_batches_write_one_column_per_kept_field() -> None:
    out = Batches("a.jsonl", 10, keep=("url",))
    out.doc("1", 0, "text", ("u1",))
    out.doc(None, 5, "text")  # a format without fields: null
    docs, _ = out.take()
    assert docs.column_names == ["doc_id", "source", "row", "text", "keep.url"]
    assert docs["keep.url"].to_pylist() == ["u1", None]
    assert Batches("a", 10).take()[0].column_names == ["doc_id", "source", "row", "text"]


def test_with_fields_keeps_the_index_order_and_nulls_the_unmatched() -> None:
    docs = pa.table({"doc_id": ["c", "a", "b"], "source": ["f", "f", "g"], "row": [9, 1, 4],
                     "length": [3, 2, 5]})
    index = documents.shard_rows(docs, "web", "train", "train-web-00000")
    fields = pa.table({"source": ["web", "web"], "input_path": ["f", "f"], "row": [1, 9],
                       "url": ["ua", "uc"]})
    joined = documents.with_fields(index, fields)
    assert joined.column_names == [*documents.INDEX_SCHEMA.names, "url"]
    assert joined["doc_id"].to_pylist() == ["c", "a", "b"]
    assert joined["first_token"].to_pylist() == [0, 3, 5]
    assert joined["url"].to_pylist() == ["uc", "ua", None]


def test_the_index_splits_a_readers_row_into_byte_offset_and_row() -> None:
    docs = pa.table({"doc_id": ["a", "b", "c"], "source": ["x.jsonl.zst", "y.parquet", "z.txt"],
                     "row": [605232, 7, 0], "length": [3, 2, 5]})
    index = documents.shard_rows(docs, "web", "train", "train-web-00000")
    assert index["input_offset"].to_pylist() == [605232, None, 0]
    assert index["input_row"].to_pylist() == [None, 7, None]
    assert documents.fields_of(index, [])["row"].to_pylist() == [605232, 7, 0]


def test_the_index_splits_the_row_of_each_document_of_a_repeated_path() -> None:
    paths = ["y.parquet", "x.jsonl", "y.parquet", "z.PARQUET", "x.jsonl", "x.jsonl"]
    docs = pa.table({"doc_id": list("abcdef"), "source": paths, "row": [1, 20, 3, 4, 50, 60],
                     "length": [1] * 6})
    index = documents.shard_rows(docs, "web", "train", "train-web-00000")
    assert index["input_offset"].to_pylist() == [None, 20, None, None, 50, 60]
    assert index["input_row"].to_pylist() == [1, None, 3, 4, None, None]


def test_a_format_1_index_reads_as_format_2(tmp_path) -> None:
    """Versions written before the split hold one input_row column: read as format 2."""
    import pyarrow.parquet as pq

    from pipeline.core.storage import Location

    old = pa.table({"doc_id": ["a", "b"], "source": ["web", "web"], "split": ["train"] * 2,
                    "shard": ["s", "s"], "first_token": [0, 3], "tokens": [3, 2],
                    "input_path": ["x.jsonl", "y.parquet"], "input_row": [120, 4],
                    "url": ["ua", "ub"]})
    pq.write_table(old, tmp_path / documents.INDEX_FILE)
    index = documents.read_index(Location.from_uri(str(tmp_path)))
    assert index.column_names == [*documents.INDEX_SCHEMA.names, "url"]
    assert index["input_offset"].to_pylist() == [120, None]
    assert index["input_row"].to_pylist() == [None, 4]

"""Pure cores of named sources: the keep rules' source priority, the validation split, the
blend line and the reader's weighted segments."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline.dedup import exact
from pipeline.dedup.components import keep_rule
from pipeline.formats.data_path import blend_line, data_path_line
from pipeline.formats.manifest import ManifestError, parse_blend
from pipeline.tokens.split import in_valid, split_mask


def _hash_rows(rows):
    docs = pa.table(
        {
            "doc_id": [r[0] for r in rows],
            "source": ["f.jsonl"] * len(rows),
            "row": list(range(len(rows))),
            "text": [r[1] for r in rows],
        }
    )
    parts = [
        exact.hash_rows(docs.slice(i, 1), f"u{i}", rows[i][2], rows[i][3]) for i in range(len(rows))
    ]
    return pa.concat_tables(parts)


def test_exact_keeps_the_first_listed_source_then_the_smallest_id():
    rows = _hash_rows(
        [
            ("alpha/1", "same text", "alpha", 1),  # smaller id, later source
            ("zeta/9", "same text", "zeta", 0),
            ("zeta/3", "same text", "zeta", 0),
            ("alpha/2", "other", "alpha", 1),
            ("alpha/0", "other", "alpha", 1),
        ]
    )
    removed = {r["doc_id"]: r for r in exact.exact_removals(rows).to_pylist()}
    assert set(removed) == {"alpha/1", "zeta/9", "alpha/2"}
    assert removed["alpha/1"]["kept_id"] == "zeta/3"
    assert (removed["alpha/1"]["origin"], removed["alpha/1"]["kept_origin"]) == ("alpha", "zeta")
    assert removed["alpha/2"]["kept_id"] == "alpha/0"  # one source: today's rule


def test_near_keep_rule_puts_source_rank_before_length():
    sigs = np.tile(np.arange(16, dtype=np.uint32), (3, 1))  # identical signatures
    ids = ["b-long", "a-short", "c-mid"]
    lengths = np.array([900, 100, 500])
    labels = np.zeros(3, dtype=np.int64)
    without = keep_rule(ids, lengths, sigs, labels, 0.8).to_pylist()
    assert {r["kept_id"] for r in without} == {"b-long"}
    ranked = keep_rule(ids, lengths, sigs, labels, 0.8, np.array([1, 0, 1])).to_pylist()
    assert {r["kept_id"] for r in ranked} == {"a-short"}
    assert {r["doc_id"] for r in ranked} == {"b-long", "c-mid"}


def test_validation_split_is_a_property_of_the_id():
    ids = [f"src/{i}" for i in range(20_000)]
    valid = in_valid(ids, 0.05)
    assert 0.045 < valid.mean() < 0.055
    assert np.array_equal(valid, in_valid(pa.array(ids), 0.05))  # any container, same answer
    assert np.array_equal(valid[::-1], in_valid(ids[::-1], 0.05))  # order does not matter
    assert not in_valid(ids, 0.0).any()
    train = split_mask(ids, "train", 0.05)
    assert not (train & valid).any() and (train | valid).all()
    # a larger fraction only adds documents to the validation set
    assert (in_valid(ids, 0.1) >= valid).all()


def _shard(name, source, tokens):
    return {"bin": f"{name}.bin", "idx": f"{name}.idx", "source": source, "tokens": tokens}


def test_blend_line_weights_by_source_weight_times_tokens():
    shards = [_shard("train-a-00000", "a", 300), _shard("train-a-00001", "a", 100),
              _shard("train-b-00000", "b", 400), _shard("train-b-00001", "b", 0)]
    line = blend_line(shards, {"a": 2.0, "b": 1.0})
    pairs = parse_blend(line)
    assert [p for _, p in pairs] == ["train-a-00000", "train-a-00001", "train-b-00000"]
    assert [w for w, _ in pairs] == pytest.approx([600 / 1200, 200 / 1200, 400 / 1200])
    rooted = parse_blend(data_path_line("file:///data/v1/", line))
    assert [p for _, p in rooted] == ["/data/v1/" + p for _, p in pairs]
    assert [w for w, _ in rooted] == [w for w, _ in pairs]
    with pytest.raises(ManifestError):
        parse_blend("0.5 a 0.5")


def test_skipped_files_are_counted_once_per_root():
    from pipeline.ingest.listing import skipped_once

    def paths(*ps):
        return pa.table({"path": list(ps), "reason": ["excluded"] * len(ps)})

    # two sources on one root with different globs, a third on a root of its own
    roots = ["/data", "/data", "/other"]
    listed = [paths("docs/a.txt"), paths("web/b.txt"), paths("x.txt")]
    skipped = [
        paths("README.md", "web/b.txt"),  # web/b.txt is read by the second source
        paths("README.md", "docs/a.txt"),  # README.md already reported by the first
        paths("README.md"),  # another root's README.md is another file
    ]
    out = skipped_once(roots, listed, skipped)
    assert out["path"].to_pylist() == ["README.md", "README.md"]

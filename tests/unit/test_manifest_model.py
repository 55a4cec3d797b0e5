"""The manifest is a typed model validated on read: what the model rejects is one
ManifestError line naming the field (verify prints it as `verify FAILED: ...`)."""

from __future__ import annotations

import copy
import re

import pytest
from support import setter

from pipeline.formats.manifest import FORMAT, ManifestError, check_structure

COUNTS = dict(docs_in=3, docs_out=2, removed_exact=1, removed_near=0, quarantined=0, tokens=9)
SHARD = dict(
    bin="train-00000.bin",
    idx="train-00000.idx",
    bin_bytes=18,
    idx_bytes=60,
    tokens=9,
    documents=2,
    bin_xxh3_128="0" * 32,
    idx_xxh3_128="f" * 32,
    source="web",
    split="train",
)
VALID = {
    "format": FORMAT,
    "name": "ds",
    "version": "20260101T000000.000000Z-0000000000000000",
    "counts": COUNTS,
    "tokenizer": {"vocab_size": 1000, "dtype": "uint16", "eos_id": 0},
    "shards": [SHARD],
    "splits": {"train": ["train-00000.bin"], "valid": []},
    "sources": {"web": {**COUNTS, "weight": 1.0}},
    "future_key": {"kept": True},  # a field this version does not know passes through
}


def edited(path: tuple, value=None, delete=False) -> dict:
    m = copy.deepcopy(VALID)
    setter(*path, value=value, delete=delete)(m)
    return m


def test_a_valid_manifest_passes():
    check_structure(copy.deepcopy(VALID))
    old = {k: v for k, v in VALID.items() if k not in ("splits", "sources")}  # before splits
    old["shards"] = [{k: v for k, v in SHARD.items() if k not in ("source", "split")}]
    check_structure(old)


@pytest.mark.parametrize(
    "manifest, message",
    [
        (edited(("format",), "x"), "format is not pipeline.dataset/1"),
        (edited(("counts", "tokens"), -1), "counts.tokens: -1 must be a non-negative integer"),
        (edited(("counts", "docs_in"), True), "counts.docs_in: True must be a non-negative"),
        (edited(("tokenizer",), delete=True), "tokenizer is missing"),
        (edited(("tokenizer", "dtype"), "int32"), "tokenizer: dtype 'int32' is not 'uint16'"),
        (edited(("tokenizer", "eos_id"), 1000), "eos_id 1000 is not an id below 1000"),
        (edited(("shards",), {}), "shards must be a list"),
        (edited(("shards", 0), "x"), "shards.0 is not an object"),
        (edited(("shards", 0, "bin"), "../x.bin"), "shards.0.bin: '../x.bin' is not a file name"),
        (edited(("shards", 0, "idx"), "train-00000.bin"), "already named by shard 0"),
        (edited(("shards", 0, "bin_xxh3_128"), "xyz"), "is not an xxh3-128 hex digest"),
        (edited(("shards", 0, "tokens"), "12"), "'12' must be a non-negative integer"),
        (edited(("splits", "train"), []), "splits.train does not name the shards list"),
        (edited(("splits", "test"), []), "splits.test"),
        (edited(("sources", "web", "docs_out"), None), "sources.web.docs_out"),
    ],
)
def test_what_the_model_rejects_is_one_line_naming_the_field(manifest, message):
    with pytest.raises(ManifestError, match=message) as err:
        check_structure(manifest, where="m.json")
    assert str(err.value).startswith("m.json: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("blend",), "0.5 train-00000", "blend is not an object"),
        (("blend", "train"), 7, "blend.train: 7 is not a blend line"),
        (("blend", "train"), "nan train-00000", "weight 'nan' is not a number above 0"),
        (("blend", "train"), "1 train-00000 0.5", "odd number of words"),
        (("counts", "quarantined_by_reason"), [1], "counts.quarantined_by_reason is not an"),
        (("counts", "quarantined_by_reason", "bad_json"), -2, "must be a non-negative integer"),
        (("documents",), {"bytes": 5, "xxh3_128": "0" * 32}, "documents.rows is missing"),
        (("documents",), [], "documents is not an object"),
        (("sources", "web", "weight"), "7", "sources.web.weight: '7' is not a number"),
        (("sources", "web", "weight"), None, "sources.web.weight: None is not a number"),
        (("shards", 0, "tokens"), 10**30, "below 2**63"),
        (("tokenizer", "bos_id"), 1000, "bos_id 1000 is not an id below 1000"),
        (("version",), None, "version: Input should be a valid string"),
    ],
)
def test_every_field_a_command_reads_is_typed(path, value, message):
    m = copy.deepcopy(VALID)
    m["blend"] = {"train": "1 train-00000", "valid": ""}
    m["counts"] = {**COUNTS, "quarantined_by_reason": {"bad_json": 0}}
    setter(*path, value=value)(m)
    with pytest.raises(ManifestError, match=re.escape(message)):
        check_structure(m)

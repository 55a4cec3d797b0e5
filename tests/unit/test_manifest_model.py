"""The manifest is a typed model validated on read: what the model rejects is one
ManifestError line naming the field (verify prints it as `verify FAILED: ...`)."""

from __future__ import annotations

import copy
import re

import pytest
from support import setter

from pipeline.config.sections import SourceConfig
from pipeline.formats.claims import check_claims
from pipeline.formats.manifest import (
    FORMAT,
    FORMAT_V1,
    MAX_WEIGHT,
    ManifestError,
    WeightError,
    check_structure,
)

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
    bin_block_bytes=8,
    bin_blocks_xxh3_64=["0" * 16, "1" * 16, "2" * 16],  # 18 bytes: blocks of 8, 8 and 2
)
VALID = {
    "format": FORMAT,
    "name": "ds",
    "version": "20260101T000000.000000Z-0000000000000000",
    "counts": COUNTS,
    "tokenizer": {
        "vocab_size": 1000,
        "dtype": "uint16",
        "eos_id": 0,
        "special_tokens_in_text": "text",
    },
    "shards": [SHARD],
    "splits": {"train": ["train-00000.bin"], "valid": []},
    "sources": {"web": {**COUNTS, "weight": 1.0}},
    "blend": {"train": "1 train-00000", "valid": ""},
    "documents": {
        "file": "documents.parquet",
        "format": 2,
        "bytes": 5,
        "xxh3_128": "0" * 32,
        "rows": 2,
    },
    "lineage": {
        "input_manifest": "_work/runs/r/inputs.parquet",
        "input_manifest_xxh3_128": "0" * 32,
        "removed": "_work/runs/r/removed.parquet",
        "quarantine": "_work/runs/r/quarantine.parquet",
    },
    "future_key": {"kept": True},  # a field this version does not know passes through
}


def edited(path: tuple, value=None, delete=False) -> dict:
    m = copy.deepcopy(VALID)
    setter(*path, value=value, delete=delete)(m)
    return m


def without_blocks() -> dict:
    """A format-2 manifest whose shard has no block checksums at all."""
    m = edited(("shards", 0, "bin_blocks_xxh3_64"), delete=True)
    del m["shards"][0]["bin_block_bytes"]
    return m


def v1(m: dict, **tokenizer) -> dict:
    """As format 1, without block checksums, its tokenizer entry with `tokenizer` added."""
    m = without_blocks() | {k: v for k, v in m.items() if k not in ("shards", "format")}
    m["format"] = FORMAT_V1
    m["tokenizer"] = {**m["tokenizer"], **tokenizer}
    return m


def with_config(m: dict) -> dict:
    m["config"] = {"tokenize": {"special_tokens_in_text": "text"}}
    return m


def test_a_valid_manifest_passes():
    check_structure(copy.deepcopy(VALID))
    before = ("splits", "sources", "blend", "documents")
    old = {k: v for k, v in VALID.items() if k not in before}  # before splits and the index
    old["format"] = FORMAT_V1
    old["shards"] = [{k: v for k, v in SHARD.items() if k not in ("source", "split")}]
    del old["shards"][0]["bin_block_bytes"], old["shards"][0]["bin_blocks_xxh3_64"]
    old["tokenizer"] = {"vocab_size": 1000, "dtype": "uint16", "eos_id": 0}  # before specials
    check_structure(old)


def test_the_dtype_follows_max_id_where_the_manifest_records_it():
    """A tokenizer of 300 entries whose ids reach 70,000 stores int32; a version
    from before max_id is read by its vocab_size."""
    sparse = {"vocab_size": 300, "max_id": 70_000, "dtype": "int32", "eos_id": 65_537,
              "bos_id": 70_000, "special_tokens_in_text": "text"}  # fmt: skip
    check_structure(edited(("tokenizer",), sparse))
    check_structure(edited(("tokenizer", "max_id"), 999))
    with pytest.raises(ManifestError, match="dtype 'int32' is not 'uint16'"):
        check_structure(edited(("tokenizer",), {**sparse, "max_id": None}))


@pytest.mark.parametrize(
    "manifest, message",
    [
        (edited(("format",), "x"), "format is not one of pipeline.dataset/1, pipeline.data"),
        (edited(("counts", "tokens"), -1), "counts.tokens: -1 must be a non-negative integer"),
        (edited(("counts", "docs_in"), True), "counts.docs_in: True must be a non-negative"),
        (edited(("tokenizer",), delete=True), "tokenizer is missing"),
        (edited(("tokenizer", "dtype"), "int32"), "tokenizer: dtype 'int32' is not 'uint16'"),
        (edited(("tokenizer", "eos_id"), 1000), "eos_id 1000 is not an id below 1000"),
        (edited(("tokenizer", "max_id"), 70_000), "dtype 'uint16' is not 'int32', the dtype of"
         " ids 0 .. 70000"),
        (edited(("tokenizer", "bos_id"), 1000), "bos_id 1000 is not an id below 1000"),
        (edited(("shards",), {}), "shards must be a list"),
        (edited(("shards", 0), "x"), "shards.0 is not an object"),
        (edited(("shards", 0, "bin"), "../x.bin"), "shards.0.bin: '../x.bin' is not a file name"),
        (edited(("shards", 0, "idx"), "train-00000.bin"), "already named by shard 0"),
        (edited(("shards", 0, "bin_xxh3_128"), "xyz"), "is not an xxh3-128 hex digest"),
        (edited(("shards", 0, "tokens"), "12"), "'12' must be a non-negative integer"),
        (edited(("splits", "train"), []), "splits.train does not name the shards list"),
        (edited(("splits", "test"), []), "splits.test"),
        (edited(("sources", "web", "docs_out"), None), "sources.web.docs_out"),
        (edited(("shards", 0, "bin_blocks_xxh3_64"), delete=True), "go together"),
        (edited(("shards", 0, "bin_blocks_xxh3_64"), ["0" * 16]), "has 1 digests, 18 bytes"),
        (edited(("shards", 0, "bin_blocks_xxh3_64", 1), "0" * 32), "not an xxh3-64 hex"),
        (edited(("shards", 0, "bin_block_bytes"), 0), "go together"),
        (without_blocks(), "shard 0 \\(train-00000.bin\\) has no bin_blocks_xxh3_64"),
        (edited(("tokenizer", "special_tokens_in_text"), delete=True),
         "tokenizer.special_tokens_in_text is missing"),
        (edited(("tokenizer", "special_tokens_in_text"), "tex"), "'tex' is not 'text'"),
        (edited(("tokenizer", "eos_id"), delete=True), "tokenizer.eos_id is missing"),
        (v1(edited(("tokenizer", "special_tokens_in_text"), delete=True), bos_id=None),
         "tokenizer.special_tokens_in_text is missing"),
        (v1(edited(("tokenizer", "special_tokens_in_text"), delete=True), engine="fastokens"),
         "tokenizer.special_tokens_in_text is missing"),
        (with_config(edited(("tokenizer", "special_tokens_in_text"), "special")),
         "'special' is not config.tokenize.special_tokens_in_text 'text'"),
    ],
)
def test_what_the_model_rejects_is_one_line_naming_the_field(manifest, message):
    with pytest.raises(ManifestError, match=message) as err:
        check_structure(manifest, where="m.json")
    assert str(err.value).startswith("m.json: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("weight", [-1, 0, 1e300, float("nan"), float("inf"), 1e6 + 1])
def test_a_weight_that_is_not_a_number_in_range_is_refused(weight):
    """The reader would drop a source of weight <= 0 and grow without bound on a huge one:
    each is a WeightError (a ValueError) naming the field."""
    with pytest.raises(WeightError, match=r"^m.json: sources.web.weight: .* is not a number in"):
        check_structure(edited(("sources", "web", "weight"), weight), where="m.json")
    assert issubclass(WeightError, ValueError)


@pytest.mark.parametrize("weight", ["7", True])
def test_a_weight_that_is_not_a_number_is_refused_by_its_type(weight):
    """The reader would multiply by a string or a boolean: the field's type refuses it."""
    with pytest.raises(ManifestError, match=r"^m.json: sources.web.weight: .* is not a number"):
        check_structure(edited(("sources", "web", "weight"), weight), where="m.json")


@pytest.mark.parametrize("weight", [1e-9, 1, 2.5, 1e6])
def test_a_weight_in_range_passes(weight):
    check_structure(edited(("sources", "web", "weight"), weight))


def test_the_largest_weight_is_the_configs():
    """A weight the config accepts is one every reader of the manifest accepts."""
    bounds = SourceConfig.model_fields["weight"].metadata
    assert any(getattr(b, "le", None) == MAX_WEIGHT for b in bounds)
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
        (("documents", "file"), None, "documents.file: None is not 'documents.parquet'"),
        (("documents",), [], "documents is not an object"),
        (("sources", "web", "weight"), "7", "sources.web.weight: '7' is not a number"),
        (("sources", "web", "weight"), None, "sources.web.weight: None is not a number"),
        (("shards", 0, "tokens"), 10**30, "below 2**63"),
        (("tokenizer", "bos_id"), 1000, "bos_id 1000 is not an id below 1000"),
        (("version",), None, "version: None is not a version id"),
    ],
)
def test_every_field_a_command_reads_is_typed(path, value, message):
    m = copy.deepcopy(VALID)
    m["blend"] = {"train": "1 train-00000", "valid": ""}
    m["counts"] = {**COUNTS, "quarantined_by_reason": {"bad_json": 0}}
    setter(*path, value=value)(m)
    with pytest.raises(ManifestError, match=re.escape(message)):
        check_structure(m)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("name",), "", "name: '' is not a dataset name"),
        (("name",), "..", "name: '..' is not a dataset name"),
        (("name",), "a/b", "name: 'a/b' is not a dataset name"),
        (("version",), "", "version: '' is not a version id"),
        (("version",), "../x", "version: '../x' is not a version id"),
        (("version",), "a/20260101T000000Z-0", "is not a version id"),
        (("shards", 0, "split"), "test", "shards.0.split: 'test' is not a split (train or valid)"),
        (("documents", "file"), "/etc/passwd", "documents.file: '/etc/passwd' is not"),
        (("documents", "file"), "../documents.parquet", "documents.file: '../documents.parquet'"),
        (("sources",), {}, "sources is empty"),
    ],
)
def test_names_splits_and_the_index_file_stay_in_the_version_folder(path, value, message):
    """Issue 43, item 4: the names a command joins into a path are one path part by the
    layout's rules; a shard's split is one the pipeline writes; the index is the version
    folder's documents.parquet, the file the writer writes."""
    with pytest.raises(ManifestError, match=re.escape(message)):
        check_structure(edited(path, value))


@pytest.mark.parametrize("key", ["sources", "splits", "blend", "documents"])
@pytest.mark.parametrize("delete", [True, False])
def test_format_2_has_what_its_writers_always_write(key, delete):
    """Deleting a field (or making it null) must not switch off the checks on it; a format-1
    version from before sources and the index still reads (test_a_valid_manifest_passes)."""
    with pytest.raises(ManifestError, match=f"{key} is missing or null"):
        check_structure(edited((key,), None, delete=delete))


def _format_1_without_sources() -> dict:
    """A format-1 manifest whose `sources` is deleted while its shard still names one."""
    m = v1(copy.deepcopy(VALID))
    del m["sources"]
    return m


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (edited(("shards", 0, "source"), None), "shard train-00000.bin: source None is not one"
         " of sources (web)"),
        (edited(("shards", 0, "source"), "nope"), "source 'nope' is not one of sources (web)"),
        (_format_1_without_sources(), "sources is missing or null, yet shard train-00000.bin"
         " names source 'web'"),
        (edited(("shards", 0, "split"), None), "shards.0.split: None is not 'train'"),
        (edited(("shards", 0, "split"), "valid"), "shards.0.split: 'valid' is not 'train'"),
        (edited(("counts", "tokens"), 10), "shards hold 9 tokens / 2 documents"),
        (edited(("sources", "web", "removed_exact"), 0), "source web: docs_in 3 != out"),
        (edited(("blend", "train"), "1 other-00000"), "blend.train does not name the train"),
        (edited(("blend", "train"), "0.5 train-00000"), "blend.train weighs train-00000 0.5,"),
        (edited(("counts", "quarantined_by_reason"), {"bad_json": 1}),
         "counts.quarantined_by_reason {'bad_json': 1} adds up to 1, counts.quarantined says 0"),
        (edited(("lineage",), delete=True), "lineage must name input_manifest"),
        (edited(("lineage", "input_manifest_xxh3_128"), ""), "lineage.input_manifest_xxh3_128"),
        (edited(("lineage", "removed"), None), "lineage must name input_manifest"),
        (edited(("lineage", "removed"), "../../etc/x.parquet"), "lineage.removed: '../../etc"),
        (edited(("lineage", "quarantine"), ""), "lineage.quarantine: '' is not a path inside"),
        (edited(("lineage", "removed_ids"), "/abs/ids.parquet"), "lineage.removed_ids: '/abs"),
    ],
)
def test_the_judge_refuses_claims_the_fields_contradict(manifest, message):
    """formats/claims.py, which `verify`, `find`, `blend` and StreamReader all apply: the
    model accepts each manifest, its claims do not hold. One line naming the field."""
    check_structure(manifest)
    with pytest.raises(ManifestError, match=re.escape(message)) as err:
        check_claims(manifest, "m.json")
    assert str(err.value).startswith("m.json: ") and "\n" not in str(err.value)


def test_the_judge_passes_a_valid_manifest_and_one_from_before_sources():
    check_claims(copy.deepcopy(VALID), "m.json")
    old = _format_1_without_sources()
    for shard in old["shards"]:
        del shard["source"], shard["split"]
    del old["splits"], old["blend"], old["documents"]
    check_claims(old, "m.json")

"""The reader checks what it reads (issue 31, items 4 and 7), on a version of the shipped sample
(configs/sample.yaml: sources docs and web, weights 2:1, so the reader reads a weighted mixture
that cuts shards into pieces): a flipped byte is found in a piece, a weight `verify` and the
reader both refuse, the fields the EOS check needs cannot be deleted, and a format-1 version
(no block checksums) still reads."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support import SOURCES_CONFIG, setter

from pipeline.cli.main import main
from pipeline.config.loader import load_config
from pipeline.core.layout import MANIFEST
from pipeline.core.storage import Location
from pipeline.formats.manifest import (
    FORMAT_V1,
    ManifestError,
    WeightError,
    parse_blend,
)
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.run.driver import run_pipeline
from pipeline.stream.reader import StreamReader

L = 64  # seq_len: many windows from a small version


@pytest.fixture(scope="module")
def sample(ray_local, tmp_path_factory) -> Path:
    """The committed version of configs/sample.yaml (built once for the module)."""
    out = tmp_path_factory.mktemp("checks") / "out"
    result = run_pipeline(load_config(SOURCES_CONFIG, output_uri=str(out)), show_progress=False)
    return Path(result.version.path)


@pytest.fixture
def version(sample, tmp_path) -> Path:
    """A copy of the sample's dataset folder (the version and its run's records) for one test
    to change; the copy's version folder."""
    shutil.copytree(sample.parent, tmp_path / "sample")
    return tmp_path / "sample" / sample.name


def edit_manifest(version: Path, edit) -> None:
    path = version / MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def read_all(version: Path, **kw) -> int:
    with StreamReader(str(version), L, **kw) as reader:
        return sum(1 for _ in reader)


def verify_cli(version: Path, capsys) -> tuple[int, list[str]]:
    code = main(["verify", str(version)])
    return code, capsys.readouterr().err.splitlines()


def test_a_flipped_byte_in_a_mixture_piece_is_an_error(version):
    with StreamReader(str(version), L, verify_checksums=True) as reader:
        assert reader.layout == 2  # a weighted mixture: shards cut into pieces
        pieces = [seg for seg in reader.epoch_layout() if seg[1] == "train-docs-00000.bin"]
        assert pieces and all(n < 2**20 for *_, n in pieces)
        windows = sum(1 for _ in reader)
    path = version / "train-docs-00000.bin"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert read_all(version) == windows  # not verifying: read as it is
    with pytest.raises(VerifyError, match=r"train-docs-00000\.bin: block 0 \(bytes 0-"):
        read_all(version, verify_checksums=True)
    with pytest.raises(VerifyError, match=r"train-docs-00000\.bin checksum"):
        verify_version(Location.from_uri(str(version)))


@pytest.mark.parametrize("weight", [-1, 0, 1e300, "7", float("nan"), True])
def test_a_bad_weight_fails_verify_in_one_line_and_the_reader_refuses_it(
    version, weight, capsys
):
    edit_manifest(version, lambda m: m["sources"]["web"].update(weight=weight))
    code, lines = verify_cli(version, capsys)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith("verify FAILED: ") and "sources.web.weight: " in lines[0]
    # a WeightError for a number out of range; a string or a boolean fails the field's type
    expected = ManifestError if isinstance(weight, (str, bool)) else WeightError
    with pytest.raises(expected, match=r"sources\.web\.weight: .* is not a number"):
        StreamReader(str(version), L)


@pytest.mark.parametrize("field", ["special_tokens_in_text", "eos_id"])
def test_deleting_a_field_the_eos_check_needs_fails_verify(version, field, capsys):
    edit_manifest(version, lambda m: m["tokenizer"].pop(field))
    code, lines = verify_cli(version, capsys)
    assert code == 1 and len(lines) == 1 and f"tokenizer.{field} is missing" in lines[0]


def test_a_version_without_block_checksums_still_reads(version, capsys):
    """Format 1 (before block checksums): verify passes, the reader reads the same windows,
    checking whole shards only."""
    with StreamReader(str(version), L, verify_checksums=True) as reader:
        expected = [w.tobytes() for w in reader]

    def to_format_1(m):
        m["format"] = FORMAT_V1
        for shard in m["shards"] + m["splits"]["valid"]:
            del shard["bin_block_bytes"], shard["bin_blocks_xxh3_64"]

    edit_manifest(version, to_format_1)
    code, _ = verify_cli(version, capsys)
    assert code == 0
    with StreamReader(str(version), L, verify_checksums=True) as reader:
        assert [w.tobytes() for w in reader] == expected


def _drop(key):
    return lambda m: m.pop(key)


def _equal_blend(m):
    """blend.train weighing every shard alike, while the sources still say 2:1."""
    prefixes = [p for _, p in parse_blend(m["blend"]["train"])]
    m["blend"]["train"] = " ".join(f"{1 / len(prefixes):.12g} {p}" for p in prefixes)


def _set(*path, value):
    return setter(*path, value=value)


# issue 43, item 4: what verify and the reader refuse alike (the manifest judge,
# formats/claims.py), each edit with the field the one line names
JUDGED = {
    "shard source null": (_set("shards", 0, "source", value=None), "source None is not one of"),
    "shard source unknown": (_set("shards", 0, "source", value="nope"), "source 'nope' is not"),
    "valid shard source unknown": (
        _set("splits", "valid", 0, "source", value="nope"),
        "source 'nope' is not",
    ),
    "sources deleted": (_drop("sources"), "sources is missing or null"),
    "sources null": (_set("sources", value=None), "sources is missing or null"),
    "sources empty": (_set("sources", value={}), "sources is empty"),
    "splits null": (_set("splits", value=None), "splits is missing or null"),
    "version empty": (_set("version", value=""), "version: '' is not a version id"),
    "version leaves the folder": (_set("version", value="../x"), "version: '../x' is not"),
    "name empty": (_set("name", value=""), "name: '' is not a dataset name"),
    "name a path": (_set("name", value="a/b"), "name: 'a/b' is not a dataset name"),
    "shard split null": (_set("shards", 0, "split", value=None), r"shards\.0\.split: None"),
    "shard split test": (_set("shards", 0, "split", value="test"), r"shards\.0\.split: 'test'"),
    "valid shard in train": (
        _set("splits", "valid", 0, "split", value="train"),
        r"splits\.valid\.0\.split: 'train' is not 'valid'",
    ),
    "documents file outside": (
        _set("documents", "file", value="/etc/passwd"),
        r"documents\.file: '/etc/passwd' is not 'documents.parquet'",
    ),
    "documents deleted": (_drop("documents"), "documents is missing or null"),
    "blend weights of another mixture": (_equal_blend, r"blend\.train weighs"),
    "lineage deleted": (_drop("lineage"), "lineage must name input_manifest"),
    "lineage leaves the dataset": (
        _set("lineage", "removed", value="../../elsewhere.parquet"),
        r"lineage\.removed: '\.\./\.\./elsewhere\.parquet' is not a path inside",
    ),
    "quarantine reasons do not add up": (
        _set("counts", "quarantined_by_reason", value={}),
        r"counts\.quarantined_by_reason \{\} adds up to 0",
    ),
}


@pytest.mark.parametrize("case", sorted(JUDGED))
def test_verify_and_the_reader_refuse_the_same_manifest(version, case, capsys):
    """`verify` fails in one line naming the field, and StreamReader refuses the version when
    it is made, before reading a window, with or without verify_checksums."""
    edit, message = JUDGED[case]
    edit_manifest(version, edit)
    code, lines = verify_cli(version, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("verify FAILED: ") and re.search(message, lines[0]), lines[0]
    for checked in (True, False):
        with pytest.raises(ManifestError, match=message):
            StreamReader(str(version), L, verify_checksums=checked)


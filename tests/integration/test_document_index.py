"""The document index of a version (formats/documents.py), `find` and `blend`, on a real run of
the shipped sample (real files, real Ray; the commands in a child process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import REPO, own_ray_env

from pipeline.core.storage import Location
from pipeline.formats.megatron import decode_index, read_shard
from pipeline.formats.verify import VerifyError, verify_version

pytestmark = pytest.mark.slow  # every test runs the pipeline (conftest.py)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
        env=own_ray_env(),
    )


@pytest.fixture(scope="module")
def version(sources_sample_run) -> Path:
    return Path(sources_sample_run.version.path)


def test_index_matches_the_shards_as_the_mmididx_reader_reads_them(version: Path) -> None:
    manifest = json.loads((version / "manifest.json").read_text())
    index = pq.read_table(version / "documents.parquet")
    assert manifest["documents"]["rows"] == index.num_rows == manifest["counts"]["docs_out"]
    assert len(set(index["doc_id"].to_pylist())) == index.num_rows
    shards = manifest["shards"] + manifest["splits"]["valid"]
    eos = manifest["tokenizer"]["eos_id"]
    for shard in shards:
        name = shard["bin"].removesuffix(".bin")
        rows = index.filter(np.array(index["shard"].to_pylist()) == name)
        assert set(rows["split"].to_pylist()) == {shard["split"]}
        assert set(rows["source"].to_pylist()) == {shard["source"]}
        bin_buf = (version / shard["bin"]).read_bytes()
        idx = decode_index((version / shard["idx"]).read_bytes())
        docs = read_shard(bin_buf, (version / shard["idx"]).read_bytes())
        tokens = np.frombuffer(bin_buf, idx.dtype)
        assert rows.num_rows == len(docs)
        for i, (first, n) in enumerate(
            zip(rows["first_token"].to_pylist(), rows["tokens"].to_pylist(), strict=True)
        ):
            assert np.array_equal(tokens[first : first + n], docs[i])
            assert docs[i][-1] == eos


def test_find_prints_where_a_document_is_and_exit_1_when_absent(version: Path) -> None:
    row = pq.read_table(version / "documents.parquet").slice(7, 1).to_pylist()[0]
    found = _cli("find", str(version.parent), "--id", row["doc_id"])
    assert found.returncode == 0, found.stderr
    parquet = row["input_path"].endswith(".parquet")
    assert (row["input_offset"] is None) == parquet and (row["input_row"] is None) != parquet
    for key in ("shard", "first_token", "tokens", "input_path", "input_offset", "input_row"):
        assert f"{key:>12} {row[key]}" in found.stdout
    missing = _cli("find", str(version), "--id", "docs/no-such-document")
    assert missing.returncode == 7 and "not found" in missing.stderr


def test_blend_prints_absolute_prefixes_of_existing_shards(version: Path) -> None:
    for split in ("train", "valid"):
        line = _cli("blend", str(version), "--split", split)
        assert line.returncode == 0, line.stderr
        words = line.stdout.split()
        weights, prefixes = [float(w) for w in words[::2]], words[1::2]
        assert abs(sum(weights) - 1) < 1e-9
        assert all(Path(p + ".bin").is_file() and Path(p).is_absolute() for p in prefixes)
        assert all(Path(p).name.startswith(split) for p in prefixes)


def test_verify_fails_on_an_index_that_disagrees_with_the_idx(version: Path, tmp_path) -> None:
    copy = tmp_path / version.name
    subprocess.run(["cp", "-r", str(version), str(copy)], check=True)
    index = pq.read_table(copy / "documents.parquet")
    first = index["first_token"].to_numpy().copy()
    first[3] += 1
    bad = index.set_column(index.schema.get_field_index("first_token"), "first_token",
                           [first.tolist()])
    from pipeline.formats import documents

    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["documents"] = documents.write_index(Location.from_uri(str(copy)), [bad])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(VerifyError, match="first_token"):
        verify_version(Location.from_uri(str(copy)))

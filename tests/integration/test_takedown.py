"""`python -m pipeline remove` (run/takedown.py) on a real run of the shipped sample: real files,
real Ray in child processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import REPO, SAMPLE_CONFIG, SOURCES_CONFIG, own_ray_env

from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.formats import documents
from pipeline.formats.manifest import load_manifest
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import committed_versions, resolve_version
from pipeline.run.driver import run_pipeline
from pipeline.run.takedown import remove_documents
from pipeline.tokens.pack import ids_digest

pytestmark = pytest.mark.slow  # runs the pipeline as a command (conftest.py)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
        env=own_ray_env(),
    )


def _ids_file(folder: Path, name: str, ids: list[str]) -> Path:
    path = folder / name
    path.write_text("".join(f"{i}\n" for i in ids))
    return path


def _doc_tokens(version: Path, index) -> dict[str, np.ndarray]:
    """doc_id -> its tokens, read from the shards at the index's offsets."""
    dtype = json.loads((version / "manifest.json").read_text())["tokenizer"]["dtype"]
    shards: dict[str, np.ndarray] = {}
    out = {}
    for row in index.to_pylist():
        if row["shard"] not in shards:
            shards[row["shard"]] = np.fromfile(version / f"{row['shard']}.bin", dtype=dtype)
        first = row["first_token"]
        out[row["doc_id"]] = shards[row["shard"]][first : first + row["tokens"]]
    return out


@pytest.fixture(scope="module")
def taken(sources_sample_run, tmp_path_factory):
    """The sample's version, 1 % of its ids (+ 2 unknown ones), and the takedown's result."""
    out = tmp_path_factory.mktemp("out")  # a copy of the session's run: the takedown adds to it
    shutil.copytree(Path(sources_sample_run.version.path).parent, out / "sample")
    parent = Path(resolve_version(Location.from_uri(str(out / "sample"))).path)
    index = pq.read_table(parent / "documents.parquet")
    ids = index["doc_id"].to_pylist()[3::97]  # 1 % of the documents, every source and split
    assert len(ids) == -(-(index.num_rows - 3) // 97) >= 10
    listed = _ids_file(out, "ids.txt", [*ids, "docs/not-a-document", "web/nor-this"])
    done = _cli("remove", str(parent), "--ids", str(listed))
    assert done.returncode == 0, done.stderr
    return parent, ids, listed, done


def test_takedown_writes_a_verified_version_without_exactly_those_documents(taken) -> None:
    parent, ids, _, done = taken
    child = Path(resolve_version(Location.from_uri(str(parent.parent))).path)
    assert child != parent and f"committed         {child}" in done.stdout
    assert "2 of " in done.stderr and "not in the version" in done.stderr
    manifest = verify_version(Location.from_uri(str(child)))
    before = json.loads((parent / "manifest.json").read_text())
    assert manifest["counts"]["docs_out"] == before["counts"]["docs_out"] - len(ids)
    assert manifest["counts"]["removed_takedown"] == len(ids)
    assert manifest["removal"] == {
        "parent": before["version"],
        "documents": len(ids),
        "ids_sha256": ids_digest(ids),
        "unknown_ids": 2,
    }
    assert sum(e["removed_takedown"] for e in manifest["sources"].values()) == len(ids)
    assert manifest["config_hash"] == before["config_hash"]
    gone = pq.read_table(parent.parent / manifest["lineage"]["removed_ids"])
    assert sorted(gone["doc_id"].to_pylist()) == sorted(ids)


def test_the_rest_keep_the_parents_shards_order_and_tokens(taken) -> None:
    """What holds: every remaining document is in the parent's shard, in the parent's order
    with the removed documents cut out, with the same tokens (the same seed, the same plan)."""
    parent, ids, _, _ = taken
    child = Path(resolve_version(Location.from_uri(str(parent.parent))).path)
    old = pq.read_table(parent / "documents.parquet")
    new = pq.read_table(child / "documents.parquet")
    removed = set(ids)
    kept = [(r["doc_id"], r["shard"]) for r in old.to_pylist() if r["doc_id"] not in removed]
    assert [(r["doc_id"], r["shard"]) for r in new.to_pylist()] == kept
    old_tokens, new_tokens = _doc_tokens(parent, old), _doc_tokens(child, new)
    for doc_id, tokens in new_tokens.items():
        assert np.array_equal(tokens, old_tokens[doc_id])
    # each shard is exactly the parent's shard's tokens with the removed documents cut out
    for shard in sorted(set(new["shard"].to_pylist())):
        dtype = json.loads((child / "manifest.json").read_text())["tokenizer"]["dtype"]
        rows = [r for r in old.to_pylist() if r["shard"] == shard and r["doc_id"] not in removed]
        expected = np.concatenate([old_tokens[r["doc_id"]] for r in rows])
        assert np.array_equal(np.fromfile(child / f"{shard}.bin", dtype=dtype), expected)


def test_rerun_is_idempotent_and_strict_refuses_unknown_ids(taken) -> None:
    parent, _, listed, _ = taken
    dataset = Location.from_uri(str(parent.parent))
    versions = committed_versions(dataset)
    again = _cli("remove", str(parent), "--ids", str(listed))
    assert again.returncode == 0, again.stderr
    assert "already committed" in again.stdout
    strict = _cli("remove", str(parent), "--ids", str(listed), "--strict")
    assert strict.returncode == 2
    assert strict.stderr.strip().splitlines() == [
        f"error: 2 of {len(listed.read_text().split())} ids are not in version {parent.name}"
        " (e.g. 'docs/not-a-document', 'web/nor-this'); --strict: nothing was committed"
    ]
    none = _ids_file(parent.parent, "none", ["x"])
    nothing = _cli("remove", str(parent.parent), "--ids", str(none))  # the newest version
    assert nothing.returncode == 0 and "nothing to remove" in nothing.stdout
    # the parent still holds the list's ids: leaving them out is the version committed already
    older = _cli("remove", str(parent), "--ids", str(none))
    assert older.returncode == 0 and f"already committed {parent.parent / versions[-1]}" in (
        older.stdout
    )
    assert committed_versions(dataset) == versions


def test_a_takedown_of_a_takedown_removes_both_lists(taken, tmp_path: Path) -> None:
    parent, ids, _, _ = taken
    child = Path(resolve_version(Location.from_uri(str(parent.parent))).path)
    more = pq.read_table(child / "documents.parquet")["doc_id"].to_pylist()[:2]
    done = _cli("remove", str(child), "--ids", str(_ids_file(tmp_path, "more", more)))
    assert done.returncode == 0, done.stderr
    grandchild = Path(resolve_version(Location.from_uri(str(parent.parent))).path)
    manifest = verify_version(Location.from_uri(str(grandchild)))
    assert manifest["removal"]["parent"] == child.name
    assert manifest["counts"]["removed_takedown"] == len(ids) + 2
    left = set(pq.read_table(grandchild / "documents.parquet")["doc_id"].to_pylist())
    assert not left & (set(ids) | set(more))


def test_token_files_retention_deleted_are_one_line_exit_3(taken, tmp_path: Path) -> None:
    parent, _, _, _ = taken
    copy = tmp_path / "sample"
    shutil.copytree(parent.parent, copy)
    retain = _cli(
        "retain", "--config", str(SOURCES_CONFIG), "--output", str(tmp_path), "--apply",
        "--set", "retention.rules.token_parts.delete_after_days=0",
    )
    assert retain.returncode == 0, retain.stderr
    assert not list((copy / "_work" / "tokens").rglob("*.bin"))  # retention deleted them
    first = pq.read_table(parent / "documents.parquet")["doc_id"].to_pylist()[0]
    listed = _ids_file(tmp_path, "ids", [first, "web/unknown"])
    done = _cli("remove", str(copy / parent.name), "--ids", str(listed), "--strict")
    assert done.returncode == 2  # --strict is answered first: nothing is read past the index
    done = _cli("remove", str(copy / parent.name), "--ids", str(listed))
    assert done.returncode == 3
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "token files" in error[0] and "are gone" in error[0]
    assert "nothing was committed" in error[0]
    assert committed_versions(Location.from_uri(str(copy))) == committed_versions(
        Location.from_uri(str(parent.parent))
    )


def test_takedown_of_a_single_input_version_on_s3(ray_local, s3_bucket, s3_storage) -> None:
    """The S3 test server, a single `input:` (shards named shard-*), in this process's Ray."""
    cfg = load_config(
        SAMPLE_CONFIG,
        output_uri=f"s3://{s3_bucket}/out",
        overrides=[f"storage.endpoint_url={s3_storage.endpoint_url}"],
    )
    parent = run_pipeline(cfg, show_progress=False).version
    index = documents.read_index(parent)
    ids = index["doc_id"].to_pylist()[1::50]
    done = remove_documents(parent, sorted(ids))
    assert done.removed == len(ids) and not done.unknown
    child = resolve_version(Location.from_uri(f"s3://{s3_bucket}/out/sample", s3_storage))
    assert child.uri == done.result.version.uri != parent.uri
    manifest = verify_version(child)
    assert manifest["removal"]["documents"] == len(ids)
    assert [s["bin"] for s in manifest["shards"]] == [
        s["bin"] for s in load_manifest(parent)["shards"]
    ]
    kept = [d for d in index["doc_id"].to_pylist() if d not in set(ids)]
    assert documents.read_index(child)["doc_id"].to_pylist() == kept
    assert remove_documents(parent, sorted(ids)).result.already_committed

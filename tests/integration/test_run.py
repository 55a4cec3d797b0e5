"""End to end on the shipped sample: run, verify, decode back, determinism, manifest-last, S3."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import xxhash
from support import REPO, SAMPLE_CONFIG, own_ray_env, run_command, run_documents
from tokenizers import Tokenizer

from pipeline.config.errors import ConfigError
from pipeline.config.loader import load_config
from pipeline.core.layout import MANIFEST, RunLayout
from pipeline.core.storage import Location
from pipeline.formats.megatron import read_shard
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.formats.versions import committed_versions, comparable, resolve_version
from pipeline.run import commit_stage as run_module
from pipeline.run.driver import run_pipeline
from pipeline.run.results import RunError


def sample_config(tmp_path: Path, *sets: str, **kwargs):
    return load_config(
        SAMPLE_CONFIG, output_uri=str(tmp_path / "out"), overrides=list(sets), **kwargs
    )


def shard_bytes(version: Location, manifest: dict) -> list[bytes]:
    return [(version / s[k]).read_bytes() for s in manifest["shards"] for k in ("bin", "idx")]


@pytest.fixture(scope="module")
def sample_run(ray_local, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sample")
    cfg = sample_config(tmp)
    result = run_pipeline(cfg, show_progress=False)
    result.layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    result.cfg = cfg
    return result


def test_sample_run_verifies_and_balances(sample_run):
    manifest = verify_version(sample_run.version)
    c = manifest["counts"]
    assert c["docs_in"] == c["docs_out"] + c["removed_exact"] + c["removed_near"] + c["quarantined"]
    assert c["removed_exact"] > 0 and c["quarantined"] > 0 and c["docs_out"] > 1000
    assert sum(c["quarantined_by_reason"].values()) == c["quarantined"]
    assert len(manifest["shards"]) >= 2


def test_token_stream_decodes_to_kept_documents(sample_run):
    manifest, layout = sample_run.manifest, sample_run.layout
    dataset = layout.dataset
    removed_loc = dataset / manifest["lineage"]["removed"]
    removed = {(r["source"], r["row"]) for r in removed_loc.read_parquet().to_pylist()}
    kept = Counter()
    for d in run_documents(sample_run.cfg, layout):  # the inputs read again: no text is kept
        if (d["source"], d["row"]) not in removed:
            kept[d["text"]] += 1
    tokenizer = Tokenizer.from_file(str(REPO / "configs" / "tokenizer.json"))
    eos = manifest["tokenizer"]["eos_id"]
    decoded = Counter()
    for shard in manifest["shards"]:
        docs = read_shard(
            (sample_run.version / shard["bin"]).read_bytes(),
            (sample_run.version / shard["idx"]).read_bytes(),
        )
        for tokens in docs:
            assert tokens[-1] == eos and eos not in tokens[:-1]
            decoded[tokenizer.decode(tokens[:-1].tolist(), skip_special_tokens=False)] += 1
    assert decoded == kept


def test_exact_duplicates_keep_smallest_id(sample_run):
    dataset = Location(sample_run.version.fs, sample_run.version.path.rsplit("/", 1)[0])
    removed = (dataset / sample_run.manifest["lineage"]["removed"]).read_parquet().to_pylist()
    exact = [r for r in removed if r["rule"] == "exact"]
    assert exact and all(
        (r["kept_id"], r["kept_source"], r["kept_row"]) < (r["doc_id"], r["source"], r["row"])
        for r in exact
    )
    # duplicates across different files were found (not only within one file)
    assert any(r["source"] != r["kept_source"] for r in exact)


def test_same_bytes_whatever_units_partitions_and_workers(sample_run, tmp_path):
    other = run_pipeline(
        sample_config(tmp_path, "ingest.unit_bytes=64MiB", "dedup.partitions=1"),
        show_progress=False,
    )
    assert shard_bytes(other.version, other.manifest) == shard_bytes(
        sample_run.version, sample_run.manifest
    )
    for key in ("counts", "shards", "tokenizer"):
        assert other.manifest[key] == sample_run.manifest[key]
    # a separate process with a one-CPU Ray: the same bytes again
    out = tmp_path / "one-worker"
    subprocess.run(
        run_command(SAMPLE_CONFIG, out, "ray.num_cpus=1"),
        check=True,
        env=own_ray_env(),
        cwd=REPO,
        capture_output=True,
    )
    single = resolve_version(Location.from_uri(str(out / "sample")))
    manifest = json.loads((single / MANIFEST).read_bytes())
    assert shard_bytes(single, manifest) == shard_bytes(sample_run.version, sample_run.manifest)
    assert comparable(manifest) == comparable(sample_run.manifest)


def test_crash_before_manifest_leaves_previous_version(sample_run, tmp_path, monkeypatch):
    cfg = sample_config(tmp_path)
    first = run_pipeline(cfg, show_progress=False)
    dataset = Location.from_uri(str(tmp_path / "out" / "sample"))

    def crash(version, manifest):
        raise KeyboardInterrupt("killed before the manifest")

    monkeypatch.setattr(run_module, "commit_manifest", crash)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(sample_config(tmp_path, "pack.seed=7"), show_progress=False)
    folders = [n for n in dataset.ls_names() if not n.startswith("_")]
    assert len(folders) == 2  # the crashed version's shards exist ...
    assert committed_versions(dataset) == [first.version.name]  # ... but it is not a version
    assert resolve_version(dataset).name == first.version.name
    assert verify_version(dataset)["version"] == first.version.name


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "idx"])
def test_verify_catches_damage(sample_run, tmp_path, damage):
    copy = tmp_path / "copy"
    shutil.copytree(sample_run.version.path, copy)
    shard = sample_run.manifest["shards"][1]
    target = copy / (shard["idx"] if damage == "idx" else shard["bin"])
    data = bytearray(target.read_bytes())
    if damage in ("flip", "idx"):
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(bytes(data[:-2]))
    else:
        target.unlink()
    with pytest.raises(VerifyError, match=r"shard 1"):
        verify_version(Location.from_uri(str(copy)))
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", str(copy)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 1 and "shard 1" in result.stderr


def test_s3_input_and_output_give_identical_bytes(sample_run, s3_sample_run):
    result = s3_sample_run  # configs/single-sample.yaml from and to S3
    assert result.version.uri.startswith("s3://")
    verify_version(result.version)
    assert shard_bytes(result.version, result.manifest) == shard_bytes(
        sample_run.version, sample_run.manifest
    )
    assert comparable(result.manifest) == comparable(sample_run.manifest)
    text = json.dumps(result.manifest)
    assert "testing" not in text  # the dummy credentials never reach an output


def test_input_override_points_at_another_folder(ray_local, tmp_path):
    data = tmp_path / "mine" / "nested"
    data.mkdir(parents=True)
    (data / "a.jsonl").write_text('{"text": "first document here"}\n{"text": "second one"}\n')
    (data / "b.txt").write_text("a plain text document")
    (data / "c.jsonl").write_text('{"text": "first document here"}\n')
    result = run_pipeline(
        load_config(
            SAMPLE_CONFIG, input_uri=f"file://{tmp_path}/mine", output_uri=f"file://{tmp_path}/out"
        ),
        show_progress=False,
    )
    c = result.manifest["counts"]
    assert (c["docs_in"], c["docs_out"], c["removed_exact"]) == (4, 3, 1)
    verify_version(result.version)


def test_bad_inputs_are_quarantined_and_accounted(ray_local, tmp_path):
    import gzip

    data = tmp_path / "bad"
    data.mkdir()
    good = [json.dumps({"text": f"good document number {i}"}) for i in range(20)]
    lines = good + ['{"text": broken', '{"text": "   "}', '{"title": "no text"}', '{"text": 5}']
    (data / "a.jsonl").write_text("\n".join(lines) + "\n")
    (data / "bytes.jsonl").write_bytes(b'{"text": "caf\xe9"}\n{"text": "ok utf8 doc"}\n')
    (data / "zero.jsonl").write_bytes(b"")
    blob = gzip.compress(b'{"text": "compressed doc one"}\n{"text": "compressed doc two"}\n')
    (data / "cut.jsonl.gz").write_bytes(blob[: len(blob) - 12])
    cfg = load_config(
        SAMPLE_CONFIG,
        input_uri=str(data),
        output_uri=str(tmp_path / "out"),
        overrides=["ingest.max_error_rate=0.5"],
    )
    result = run_pipeline(cfg, show_progress=False)
    c = result.manifest["counts"]
    assert c["docs_in"] == c["docs_out"] + c["removed_exact"] + c["removed_near"] + c["quarantined"]
    reasons = set(c["quarantined_by_reason"])
    assert {
        "malformed_json",
        "empty_text",
        "missing_text",
        "non_string_text",
        "invalid_utf8",
        "empty_file",
        "truncated_file",
    } <= reasons
    dataset = Location.from_uri(str(tmp_path / "out" / "sample"))
    listing = (dataset / result.manifest["lineage"]["quarantine"]).read_parquet().to_pylist()
    assert len(listing) == c["quarantined"]
    assert all(q["source"] and q["reason"] for q in listing)


def test_error_rate_stops_the_run(ray_local, tmp_path):
    data = tmp_path / "mostly-bad"
    data.mkdir()
    (data / "a.jsonl").write_text('{"text": "fine"}\n' + "not json\n" * 5)
    cfg = load_config(SAMPLE_CONFIG, input_uri=str(data), output_uri=str(tmp_path / "out"))
    with pytest.raises(RunError, match="max_error_rate"):
        run_pipeline(cfg, show_progress=False)
    assert committed_versions(Location.from_uri(str(tmp_path / "out" / "sample"))) == []


@pytest.mark.slow  # runs the pipeline
@pytest.mark.parametrize(
    "yaml_text, key",
    [
        (
            "name: x\ninput: {uri: .}\noutput: {uri: o}\ntokenize: {tokenizer: t.json}\nbogus: 1\n",
            "bogus",
        ),
        (
            "name: x\ninput: {uri: .}\noutput: {uri: o}\ntokenize: {tokenizer: t.json}\n"
            "pack: {shard_bytes: lots}\n",
            "pack.shard_bytes",
        ),
        (
            "name: x\ninput: {uri: ./nowhere}\noutput: {uri: o}\ntokenize: {tokenizer: t.json}\n",
            "input.uri",
        ),
        (
            "name: x\ninput: {uri: .}\noutput: {uri: o}\ntokenize: {tokenizer: missing.json}\n",
            "tokenize.tokenizer",
        ),
        ("name: x\ninput: {uri: .}\noutput: {uri: o}\n", "tokenize"),
    ],
)
def test_config_errors_name_key_and_file(tmp_path, yaml_text, key):
    shutil.copy(REPO / "configs" / "tokenizer.json", tmp_path / "t.json")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert key in str(err.value) and str(path) in str(err.value)
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2 and key in result.stderr
    assert not (tmp_path / "o").exists()


def test_set_override_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match="pack.shard_size"):
        sample_config(tmp_path, "pack.shard_size=1MiB")


def test_idx_checksums_match_manifest(sample_run):
    for shard in sample_run.manifest["shards"]:
        data = (sample_run.version / shard["idx"]).read_bytes()
        assert xxhash.xxh3_128_hexdigest(data) == shard["idx_xxh3_128"]
        lengths = np.frombuffer(data, dtype="<i4", count=shard["documents"], offset=34)
        assert int(lengths.sum()) == shard["tokens"]
    assert pq.ParquetFile  # pyarrow import used by other checks stays available

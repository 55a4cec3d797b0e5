"""Curation files on S3: a step that reads only local files refuses an s3:// one when the
config loads (exit 2, one line, before Ray starts); decontamination's remote benchmarks count
in the read key by the object's ETag, so replacing one in place reads the units again; a
missing one is one line before Ray starts."""

from __future__ import annotations

from pathlib import Path

from support import chain_config
from support.cli import call

from pipeline.config.loader import load_config

BENCH = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat today"


def config(tmp_path: Path, chain: list, endpoint: str) -> Path:
    return chain_config(tmp_path, chain, storage={"endpoint_url": endpoint})


def test_a_step_that_reads_local_files_refuses_an_s3_one_at_load(s3_upload, s3_storage, tmp_path):
    root = s3_upload({"domains.txt": b"example.com\n"})
    chain = [{"block_list": {"field": "url", "domains_file": f"{root.uri}/domains.txt"}}]
    code, _, err = call(["run", "--config", str(config(tmp_path, chain, s3_storage.endpoint_url))])
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{root.uri}/domains.txt" in err and "local files only" in err
    assert not (tmp_path / "out").exists()


def test_a_remote_benchmark_counts_in_the_read_key_by_its_etag(s3_upload, s3_storage, tmp_path):
    root = s3_upload({"bench.txt": BENCH.encode()})
    chain = [{"decontaminate": {"benchmarks": [f"{root.uri}/bench.txt"]}}]
    path = config(tmp_path, chain, s3_storage.endpoint_url)
    before = load_config(path).read_key()
    s3_upload({"bench.txt": BENCH.encode()})  # the same bytes again: the same ETag
    assert load_config(path).read_key() == before
    s3_upload({"bench.txt": (BENCH + " and more words").encode()})  # replaced in place
    assert load_config(path).read_key() != before


def test_a_missing_remote_benchmark_is_one_line_before_ray(s3_upload, s3_storage, tmp_path):
    root = s3_upload({"other.txt": b"x"})
    chain = [{"decontaminate": {"benchmarks": [f"{root.uri}/missing.txt"]}}]
    code, _, err = call(["run", "--config", str(config(tmp_path, chain, s3_storage.endpoint_url))])
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{root.uri}/missing.txt" in err
    assert not (tmp_path / "out").exists()

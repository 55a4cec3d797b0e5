"""Cases 3-5 of "nothing wrong committed": a whole rejected file counts by its records (else its
bytes), text columns of any string-like Parquet type and JSON arrays are read; symlinks follow a
documented policy; a file name that is not UTF-8 is skipped with its escaped name. Local input,
and the SeaweedFS S3 server (case 3) with 403s from the fault proxy."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import support
from support import REPO, SAMPLE_CONFIG

from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.formats.megatron import decode_index
from pipeline.formats.verify import verify_version
from pipeline.run.driver import run_pipeline
from pipeline.run.results import RunError
from pipeline.testing.fault_proxy import FaultPlan, FaultProxy, PermanentFault
from pipeline.tokens.encode import load_tokenizer

jsonl = partial(support.jsonl, words="document")


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def rejected_corpus() -> dict[str, bytes]:
    """700 good records, a 300-line JSONL named .gz that is not gzip, and a 300-row Parquet
    whose text column is an integer: 600 records rejected in two whole files."""
    ints = pa.table({"id": [f"n-{i}" for i in range(300)], "text": list(range(300))})
    return {
        "good.jsonl": jsonl("good", 700),
        "fake.jsonl.gz": jsonl("fake", 300),
        "ints.parquet": parquet_bytes(ints),
    }


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def run(input_uri: str, output_uri: str, *sets: str):
    cfg = load_config(
        SAMPLE_CONFIG, input_uri=input_uri, output_uri=output_uri, overrides=list(sets)
    )
    return run_pipeline(cfg, show_progress=False)


def shard_text(result, storage=None) -> str:
    version = Location.from_uri(result.version.uri, storage)
    tokenizer, _ = load_tokenizer(str(REPO / "configs" / "tokenizer.json"), "<|endoftext|>")
    out = []
    for shard in result.manifest["shards"]:
        idx = decode_index((version / shard["idx"]).read_bytes())
        tokens = np.frombuffer((version / shard["bin"]).read_bytes(), idx.dtype)
        out.append(tokenizer.decode(tokens.tolist()))
    return "\n".join(out)


# -- case 3 ----------------------------------------------------------------------------------
def test_whole_rejected_files_count_by_their_records_local(ray_local, tmp_path):
    data = write_tree(tmp_path / "in", rejected_corpus())
    with pytest.raises(RunError, match=r"600 of 1300 records \(46\.15%\)"):
        run(str(data), str(tmp_path / "out"))
    # with a tolerant limit it commits, and the listing says which files stood for how many
    result = run(str(data), str(tmp_path / "out2"), "ingest.max_error_rate=0.5")
    counts = result.manifest["counts"]
    assert counts["quarantined_by_reason"] == {"non_string_text": 300, "unreadable": 300}
    assert counts["docs_in"] == 1300 and counts["quarantined"] == 600
    verify_version(result.version)


def test_string_like_text_columns_and_json_arrays_are_records(ray_local, tmp_path):
    texts = [f"parquet text {i} " * 10 for i in range(100)]
    binary = pa.array([t.encode() for t in texts[:99]] + [b"\xff\xfe bad"], pa.binary())
    files = {
        "bin.parquet": parquet_bytes(pa.table({"text": binary})),
        "large.parquet": parquet_bytes(pa.table({"text": pa.array(texts, pa.large_string())})),
        "dict.parquet": parquet_bytes(
            pa.table(
                {
                    "text": pa.array(
                        [f"dict value {i % 7} " * 9 for i in range(70)]
                    ).dictionary_encode()
                }
            )
        ),
        "array.json": (
            json.dumps([{"id": f"arr-{i}", "text": f"array record {i} " * 8} for i in range(1000)])
            + "\n"
        ).encode(),
    }
    result = run(str(write_tree(tmp_path / "in", files)), str(tmp_path / "out"))
    counts = result.manifest["counts"]
    # 100 + 100 + 70 (7 distinct: 63 exact duplicates) + 1000 records, one binary value not UTF-8
    assert counts["docs_in"] == 1270
    assert counts["quarantined_by_reason"] == {"invalid_utf8": 1}
    assert counts["removed_exact"] >= 63 + 99  # large.parquet repeats bin.parquet's texts
    text = shard_text(result)
    assert "array record 999" in text and "dict value 6" in text and "parquet text 42" in text
    verify_version(result.version)


def test_whole_rejected_files_count_on_s3_and_forbidden_files_by_bytes(
    ray_local, s3_server, s3_bucket, s3_storage, s3_upload
):
    s3_upload({f"raw/{k}": v for k, v in rejected_corpus().items()})
    sets = [f"storage.endpoint_url={s3_server}"]
    with pytest.raises(RunError, match=r"600 of 1300 records"):
        run(f"s3://{s3_bucket}/raw", f"s3://{s3_bucket}/out", *sets)
    # forbidden (403) files: their records cannot be counted, so their bytes are
    s3_upload({f"big/part-{i}.jsonl": jsonl(f"p{i}", 400) for i in range(12)})
    denied = PermanentFault(r"/big/part-(3|7)\.jsonl$")
    with FaultProxy(s3_server, FaultPlan(permanent=(denied,))) as proxy:
        with pytest.raises(RunError, match=r"listed bytes \(16\.\d\d%\)"):
            run(
                f"s3://{s3_bucket}/big",
                f"s3://{s3_bucket}/out3",
                f"storage.endpoint_url={proxy.endpoint}",
            )
        assert proxy.snapshot()["permanent"] >= 2


# -- case 4 ----------------------------------------------------------------------------------
def test_symlink_policy(ray_local, tmp_path):
    data = write_tree(tmp_path / "in", {"a.jsonl": jsonl("a", 20)})
    write_tree(data / "store", {f"f{i}.jsonl": jsonl(f"s{i}", 2) for i in range(25)})
    outside = write_tree(tmp_path / "outside", {"docs.jsonl": jsonl("outside", 5)})
    (tmp_path / "secret_creds").write_text("aws_secret_access_key = AKIASECRETSECRET\n")
    (data / "secret.txt").symlink_to("../secret_creds")
    (data / "outdir").symlink_to(outside)
    (data / "linked").symlink_to("store")  # inside: followed (exact duplicates of store/)
    (data / "dangling.jsonl").symlink_to("missing.jsonl")
    (data / "store" / "loop").symlink_to("..")
    result = run(str(data), str(tmp_path / "out"))
    dataset = Location.from_uri(str(tmp_path / "out")) / "sample"
    skipped = (dataset / result.manifest["lineage"]["skipped"]).read_parquet().to_pylist()
    reasons = {r["path"]: r["reason"] for r in skipped}
    assert reasons == {
        "secret.txt": "symlink_outside_input",
        "outdir": "symlink_outside_input",
        "dangling.jsonl": "dangling_symlink",
        "store/loop": "symlink_loop",
        "linked/loop": "symlink_loop",
    }
    inputs = (dataset / result.manifest["lineage"]["input_manifest"]).read_parquet()
    paths = inputs["path"].to_pylist()
    assert sum(p.startswith("linked/") for p in paths) == 25
    counts = result.manifest["counts"]
    assert counts["docs_in"] == 20 + 50 + 50 and counts["removed_exact"] == 50
    text = shard_text(result)
    assert "aws_secret_access_key" not in text and "AKIASECRET" not in text
    assert "outside document" not in text and "s24 document 1" in text


# -- case 5 ----------------------------------------------------------------------------------
def test_non_utf8_file_name_is_skipped_with_its_escaped_name(ray_local, tmp_path):
    data = write_tree(tmp_path / "in", {"a.jsonl": jsonl("a", 10)})
    with open(os.path.join(os.fsencode(data), b"caf\xe9.txt"), "wb") as f:
        f.write(b"a file whose name is Latin-1\n")
    os.mkdir(os.path.join(os.fsencode(data), b"d\xff"))
    with open(os.path.join(os.fsencode(data), b"d\xff", b"inner.jsonl"), "wb") as f:
        f.write(jsonl("inner", 3))
    result = run(str(data), str(tmp_path / "out"))
    dataset = Location.from_uri(str(tmp_path / "out")) / "sample"
    skipped = (dataset / result.manifest["lineage"]["skipped"]).read_parquet().to_pylist()
    assert {(r["path"], r["reason"]) for r in skipped} == {
        ("caf\\xe9.txt", "non_utf8_name"),
        ("d\\xff/inner.jsonl", "non_utf8_name"),
    }
    assert result.manifest["run"]["skipped_files"] == {"non_utf8_name": 2}
    assert result.manifest["counts"]["docs_out"] == 10

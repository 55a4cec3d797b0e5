"""Whole runs over web archives: the same shards whatever the unit size and worker count, the
record kinds in the manifest and the summary, `find` naming the record's gzip member, and WARC
files read from the S3 server."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest
from support import REPO, SAMPLE_CONFIG, own_ray_env, run_command
from support.warc import page, per_record_gzip, uncompressed, whole_stream_gzip, write_corpus

from pipeline.config.loader import load_config
from pipeline.core.layout import MANIFEST
from pipeline.core.storage import Location
from pipeline.formats import documents
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import resolve_version
from pipeline.ingest.listing import cut_units, list_inputs
from pipeline.ingest.readers import read_piece
from pipeline.run.driver import run_pipeline
from pipeline.run.summary import format_summary

KEEP = "input.keep_fields=[url,date]"


def crawl_config(corpus: Path, out: Path, *sets: str):
    return load_config(
        SAMPLE_CONFIG, input_uri=str(corpus), output_uri=str(out), overrides=[KEEP, *sets]
    )


def shard_bytes(version: Location, manifest: dict) -> list[bytes]:
    return [(version / s[k]).read_bytes() for s in manifest["shards"] for k in ("bin", "idx")]


@pytest.fixture(scope="module")
def crawl(ray_local, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crawl")
    records = write_corpus(tmp / "corpus", files=3, pages=250)  # two files over 1 MiB
    result = run_pipeline(
        crawl_config(tmp / "corpus", tmp / "out", "ingest.unit_bytes=1MiB"), show_progress=False
    )
    return tmp, records, result


def test_records_are_accounted_in_the_manifest_and_summary(crawl):
    _, records, result = crawl
    manifest = verify_version(result.version)
    kinds = Counter(r.kind for r in records)
    expected = {"documents": 750, "request": kinds["request"], "warcinfo": 3,
                "status_4xx": 3, "not_html": 3, "quarantined": 3}  # fmt: skip
    assert manifest["counts"]["records"] == expected
    assert manifest["sources"]["sample"]["records"] == expected
    assert manifest["counts"]["docs_in"] == 753
    assert manifest["counts"]["quarantined_by_reason"] == {"undecodable_payload": 3}
    summary = format_summary(result)
    assert "web archive records" in summary and "  status_4xx" in summary


@pytest.mark.parametrize("unit_bytes", ["256KiB", "8MiB", "1GiB"])
def test_same_shards_whatever_the_unit_size(crawl, tmp_path, unit_bytes):
    corpus, _, base = crawl[0] / "corpus", crawl[1], crawl[2]
    other = run_pipeline(
        crawl_config(corpus, tmp_path / "out", f"ingest.unit_bytes={unit_bytes}"),
        show_progress=False,
    )
    assert shard_bytes(other.version, other.manifest) == shard_bytes(base.version, base.manifest)
    for key in ("counts", "shards", "sources"):
        assert other.manifest[key] == base.manifest[key]


def test_same_shards_with_one_worker(crawl, tmp_path):
    tmp, _, base = crawl
    out = tmp_path / "one"
    argv = run_command(SAMPLE_CONFIG, out, KEEP, "ingest.unit_bytes=1MiB", "ray.num_cpus=1")
    subprocess.run(argv + ["--input", str(tmp / "corpus")], check=True, env=own_ray_env(),
                   cwd=REPO, capture_output=True)  # fmt: skip
    single = resolve_version(Location.from_uri(str(out / "sample")))
    manifest = json.loads((single / MANIFEST).read_bytes())
    assert shard_bytes(single, manifest) == shard_bytes(base.version, base.manifest)


def test_find_names_the_gzip_member_of_a_record(crawl):
    tmp, records, result = crawl
    index = documents.read_index(result.version, result.manifest["documents"])
    per_record = index.filter(
        pc.equal(index["input_path"], "crawl-0.warc.gz")
    )  # Common Crawl's layout
    doc_id = per_record["doc_id"][7].as_py()
    (row,) = documents.find(index, doc_id)
    assert row["url"] == next(r.url for r in records if r.record_id == doc_id)
    with open(tmp / "corpus" / row["input_path"], "rb") as f:  # one range read from the offset
        f.seek(row["input_offset"])
        record = zlib.decompressobj(wbits=31).decompress(f.read(1 << 20))
    assert f"WARC-Record-ID: {doc_id}".encode() in record.split(b"\r\n\r\n")[0]


def test_warc_files_read_from_s3(s3_upload):
    pages = [page(i, words=200) for i in range(30)]
    root = s3_upload(
        {"crawl/a.warc.gz": per_record_gzip(pages[:20]),
         "crawl/b.warc.gz": whole_stream_gzip(pages[20:])}
    )  # fmt: skip
    inputs, _ = list_inputs(root / "crawl", ["**"], [])
    units = cut_units(inputs, 4096)  # a.warc.gz in several pieces
    assert units.num_rows > 3
    ids, records = [], Counter()
    for piece in units.to_pylist():
        for docs, bad in read_piece(root / "crawl", piece, "text", None, records=records):
            ids += docs["doc_id"].to_pylist()
            assert bad.num_rows == 0
    assert sorted(ids) == sorted(r.record_id for r in pages)
    assert records == {"documents": 30}


READ_IN_CHILD = """
import resource, sys
from collections import Counter
from pipeline.core.storage import Location
from pipeline.ingest.listing import cut_units, list_inputs
from pipeline.ingest.readers import read_piece

root = Location.from_uri(sys.argv[1])
units = cut_units(list_inputs(root, ["**"], [])[0], 64 << 20).to_pylist()
read_piece(root, units[0], "text", None).__next__  # imports done before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
reasons, records = [], Counter()
for piece in units:
    for docs, bad in read_piece(root, piece, "text", None, records=records):
        reasons += bad["reason"].to_pylist()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(reasons, records["documents"], (after - before) // 1024)
"""


@pytest.mark.parametrize("name", ["big.warc.gz", "big.warc"])
def test_a_100_mb_record_is_quarantined_within_the_memory_bound(tmp_path, name):
    """A 100 MB page (over ingest.max_doc_bytes, 16 MiB) is skipped in buffers: the reading
    process's peak memory grows by far less than the record (measured, not timed)."""
    big = page(0)
    big.body = b"<html><body><p>" + b"all work and no play " * 5_000_000 + b"</p></body></html>"
    records = [big, page(1)]
    data = per_record_gzip(records) if name.endswith(".gz") else uncompressed(records)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(data)
    del big, records, data
    out = subprocess.run(
        [sys.executable, "-c", READ_IN_CHILD, str(tmp_path / "in")],
        check=True, capture_output=True, text=True, cwd=REPO,
    ).stdout.split("\n")[-2]  # fmt: skip
    reasons, documents, grown_mb = out.rsplit(" ", 2)
    assert reasons == "['too_large']" and documents == "1"
    assert int(grown_mb) < 40, f"peak memory grew by {grown_mb} MB for a 105 MB record"


@pytest.mark.parametrize(
    ("where", "kind", "delta"),
    [("counts", "request", 1), ("source", "not_html", -1), ("both", "documents", 1000)],
)
def test_verify_checks_the_record_kinds(crawl, where, kind, delta):
    from pipeline.formats.verify import VerifyError, verify_claims

    _, _, result = crawl
    manifest = copy.deepcopy(result.manifest)
    entries = {"counts": [manifest["counts"]], "source": [manifest["sources"]["sample"]]}
    entries["both"] = entries["counts"] + entries["source"]
    for entry in entries[where]:
        entry["records"][kind] += delta
    with pytest.raises(VerifyError, match="records|web archive records"):
        verify_claims(result.version, manifest)

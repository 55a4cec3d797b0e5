"""Issue 22, items 1 and 4: every byte a run moves through storage is counted (tasks and the
driver), as bytes moved per input byte in stats.json and the summary; shards are checked as they
are written, not read back, and a byte flipped on the way is still caught: by the store's
checksum on the PUT (S3), or by `verify` (a byte flipped on disk after the write)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import s3fs
from support import REPO, SAMPLE_CONFIG

from pipeline.config.loader import load_config
from pipeline.core.storage import Location
from pipeline.core.storage_options import storage_options
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.run import commit_stage as run_module
from pipeline.run.driver import run_pipeline
from pipeline.run.summary import format_summary

# written after stats.json (not in it): the manifest, the committed marker, the lease, reports
NOT_IN_STATS = ("manifest.json", "committed.json", "stats.json", "lease")


def test_stats_and_summary_count_every_byte_the_run_moves(ray_local, tmp_path):
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path / "out"))
    result = run_pipeline(cfg, show_progress=False)
    dataset = tmp_path / "out" / "sample"
    [run] = (dataset / "_work" / "runs").iterdir()
    stats = json.loads((run / "stats.json").read_text())
    listed = sum(pq.read_table(run / "inputs.parquet")["size"].to_pylist())
    assert stats["input_bytes"] == listed
    read = sum(s["io"].get("bytes_read", 0) for s in stats["stages"])
    written = sum(s["io"].get("bytes_written", 0) for s in stats["stages"])
    assert (stats["bytes_read"], stats["bytes_written"]) == (read, written)
    moved = stats["bytes_moved_per_input_byte"]
    assert moved["total"] == round((read + written) / listed, 4)
    assert abs(sum(v for k, v in moved.items() if k != "total") - moved["total"]) < 1e-3
    by_name = {s["stage"]: s for s in stats["stages"]}
    # the driver's own records: the listing under list; document index and checks under commit
    assert by_name["list"]["driver_io"]["bytes_written"] > 0
    commit = by_name["commit"]["driver_io"]
    index = result.version.path + "/documents.parquet"
    assert commit["bytes_written"] >= Path(index).stat().st_size and commit["bytes_read"] > 0
    # every file the run leaves, but those written after stats.json, was counted as written
    on_disk = sum(
        p.stat().st_size
        for p in dataset.rglob("*")
        if p.is_file() and "_reports" not in p.parts and not p.name.startswith(NOT_IN_STATS)
    )
    assert 0 < on_disk <= written
    # pack checks each shard without reading it back: a HEAD per .bin and .idx
    shards = len(result.manifest["shards"]) + len(result.manifest["splits"]["valid"])
    assert by_name["pack"]["io"]["head_requests"] >= 2 * shards
    line = next(ln for ln in format_summary(result).splitlines() if ln.startswith("bytes moved"))
    assert f"{moved['total']:.2f} x input" in line and "pack " in line and "commit " in line


def test_a_byte_flipped_after_the_write_is_caught_by_verify(ray_local, tmp_path, monkeypatch):
    """Local path: pack no longer reads its shards back, so a byte flipped on disk between
    the write and the commit is not seen by the run; `verify` (the full independent check)
    reads every byte and fails on the shard's checksum (exit 1)."""
    real_commit = run_module.commit_manifest

    def flip_then_commit(version, manifest):
        target = Path(version.path) / manifest["shards"][0]["bin"]
        data = bytearray(target.read_bytes())
        data[len(data) // 3] ^= 0x04
        target.write_bytes(bytes(data))
        real_commit(version, manifest)

    monkeypatch.setattr(run_module, "commit_manifest", flip_then_commit)
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path / "out"))
    result = run_pipeline(cfg, show_progress=False)
    with pytest.raises(VerifyError, match=r"shard 0: .*\.bin checksum"):
        verify_version(result.version)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", result.version.path],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 1 and "checksum" in done.stderr


def _flip_bodies(request, **_):
    """botocore before-send: flip one byte of a request body after its checksum was computed
    (what a faulty NIC, proxy or buffer would do to the bytes on their way to the store)."""
    body = request.body
    data = body.getvalue() if hasattr(body, "getvalue") else body
    if isinstance(data, (bytes, bytearray)) and len(data) > 1000:
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x01
        request.body = bytes(flipped)


def _writer_without_sdk_checksums(uri: str, storage) -> Location:
    """A Location whose botocore sends checksums only when an operation requires one (as users
    of stores that reject the SDK's default CRC32 configure it): what remains is ours."""
    kwargs = storage_options(uri, storage.model_copy(update={"retries": 1}))  # fail at once
    kwargs["config_kwargs"]["request_checksum_calculation"] = "when_required"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **kwargs)
    fs.s3.meta.events.register("before-send.s3", _flip_bodies, unique_id="flip-bodies")
    return Location(fs, uri.removeprefix("s3://"))


@pytest.mark.parametrize("multipart", [False, True])
def test_a_corrupted_upload_is_refused_by_the_store(s3_bucket, s3_storage, multipart):
    """S3 path: every PUT and multipart part carries the SHA-256 of its bytes
    (storage.upload_checksum); a body corrupted on its way fails the store's check (BadDigest)
    and nothing is stored. With the checksum off, the same corruption is stored silently."""
    data = bytes(range(256)) * (24 * 1024 if multipart else 64)  # 6 MiB or 16 KiB
    loc = _writer_without_sdk_checksums(f"s3://{s3_bucket}/shard.bin", s3_storage)
    with pytest.raises(OSError, match="did not match"):
        if multipart:  # one part per 5 MiB block: UploadPart, then CompleteMultipartUpload
            with loc.fs.open(loc.path, "wb", block_size=5 * 2**20) as f:
                f.write(data)
        else:
            loc.write_bytes(data)
    assert not loc.fs.exists(loc.path)
    off = s3_storage.model_copy(update={"upload_checksum": "none"})
    config = storage_options(loc.uri, off)["config_kwargs"]
    assert config["request_checksum_calculation"] == "when_required"  # no SDK CRC32 either
    unchecked = _writer_without_sdk_checksums(f"s3://{s3_bucket}/unchecked.bin", off)
    unchecked.write_bytes(data)
    assert unchecked.read_bytes() != data  # stored corrupt: only `verify` would catch it now


def test_plan_prints_bytes_moved_and_pack_reads_no_shard_back(capsys):
    from pipeline.cli.main import main
    from pipeline.report import dry_run
    from pipeline.report.dry_run_assumptions import TOKEN_STORED_RATIO
    from pipeline.report.dry_run_printout import bytes_moved_per_input_byte
    from pipeline.tokens.framed import FRAME_BYTES

    cut, stages = dry_run.dry_run(10**13)
    pack = next(s for s in stages if s.name == "pack")
    # pass 1 and pass 2 of the compressed tokens (pass 1's ranges read up to a frame more); no
    # read back of the shards, which are written raw
    stored = cut["token_bytes"] * TOKEN_STORED_RATIO
    frame_extra = cut["units"] * cut["pack_buckets"] * FRAME_BYTES * TOKEN_STORED_RATIO
    assert 2 * stored < pack.bytes_read <= 2 * stored + frame_extra
    assert pack.bytes_written == pytest.approx(stored + cut["token_bytes"])
    assert pack.requests["head"] >= 2 * cut["shards"]  # the stored sizes instead
    moved = bytes_moved_per_input_byte(cut, stages)
    assert moved == sum(s.bytes_read + s.bytes_written for s in stages) / 10**13
    assert main(["plan", "--corpus-bytes", "10TB"]) == 0
    assert f"bytes moved {moved:.2f} x input" in capsys.readouterr().out


def test_the_checks_on_written_bytes_name_the_shard_document_and_stored_size(tmp_path):
    """What pack checks instead of a read back: boundaries batch by batch (document numbers
    count from the shard's start), the .idx in memory, and the sizes storage holds."""
    import dataclasses

    import numpy as np

    from pipeline.formats.megatron import ShardWriter
    from pipeline.formats.verify import WrittenBoundaries, check_written

    tok = {"dtype": "uint16", "eos_id": 0, "bos_id": None, "special_tokens_in_text": "text"}
    docs = np.array([5, 6, 0, 7, 0], np.uint16), np.array([3, 2])
    boundaries = WrittenBoundaries("s.bin", tok, "v: shard s")
    boundaries.add(*docs)
    with pytest.raises(VerifyError, match=r"s.bin: EOS id 0 inside document 3 \(token 0\)"):
        boundaries.add(np.array([4, 0, 0, 1, 0], np.uint16), np.array([2, 3]))
    version = Location.from_uri(str(tmp_path))
    with (version / "s.bin").atomic_writer() as b, (version / "s.idx").atomic_writer() as i:
        writer = ShardWriter(b, i, np.uint16)
        writer.add(*docs)
        info = writer.close()
    entry = {"bin": "s.bin", "idx": "s.idx", **dataclasses.asdict(info)}
    assert check_written(version, entry, writer.index, tok, "v").tokens == 5
    with pytest.raises(VerifyError, match="idx as written does not have"):
        check_written(version, entry, writer.index[:-8] + bytes(8), tok, "v")
    (tmp_path / "s.bin").write_bytes(b"\0" * 4)  # what storage holds is not what was written
    with pytest.raises(VerifyError, match="s.bin has 4 bytes, manifest says 10"):
        check_written(version, entry, writer.index, tok, "v")
    (tmp_path / "s.bin").unlink()
    with pytest.raises(VerifyError, match="s.bin is missing"):
        check_written(version, entry, writer.index, tok, "v")

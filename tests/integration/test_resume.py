"""Resume, already-committed, incremental reuse and the single-writer lease, on the sample."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, SAMPLE_CONFIG, own_ray_env, run_command

from pipeline.config.loader import load_config
from pipeline.core.layout import RunLayout
from pipeline.core.lease import LeaseHeld
from pipeline.core.storage import Location
from pipeline.formats.versions import committed_versions, resolve_version
from pipeline.run import near_signing
from pipeline.run.driver import run_pipeline


def files_under(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def shards(version: Location) -> dict[str, bytes]:
    return {n: (version / n).read_bytes() for n in version.ls_names() if n.startswith("shard")}


def test_rerun_of_a_committed_run_writes_nothing(ray_local, tmp_path):
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path))
    first = run_pipeline(cfg, show_progress=False)
    before = files_under(tmp_path)
    again = run_pipeline(cfg, show_progress=False)
    assert again.already_committed and again.version.name == first.version.name
    assert files_under(tmp_path) == before


@pytest.mark.parametrize(
    "marker", ["missing", "cut short", "signatures deleted", "band object deleted"]
)
def test_unfinished_unit_is_redone_and_others_reused(ray_local, tmp_path, marker):
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path))
    first = run_pipeline(cfg, show_progress=False)
    layout = RunLayout.for_config(cfg, first.manifest["run"]["run_id"])
    units = sorted({u["unit_id"] for u in layout.units.read_parquet().to_pylist()})
    # a crash mid-unit: no completion marker (or one that does not validate: run/markers.py),
    # a half-written temp file, no committed version
    if marker == "missing":
        layout.read_done(units[0]).remove()
    elif marker == "signatures deleted":  # e.g. by retention: no text is kept to sign again
        layout.read_sigs(units[0], near_signing.signature_key(cfg)).remove()
    elif marker == "band object deleted":
        layout.read_bands(units[0], near_signing.band_key(cfg)).remove()
    else:
        layout.read_done(units[0]).write_bytes(b'{"unit": "')
    Path(layout.read_docs(units[0]).path + ".tmp-deadbeef").write_bytes(b"partial")
    layout.committed.remove()
    (first.version / "manifest.json").remove()
    second = run_pipeline(cfg, show_progress=False)
    read = next(s for s in second.stages if s.name == "read+hash")
    probe = 0 if cfg.tokenize.engine == "tokenizers" else 1  # the engine probe's task
    assert (read.tasks, read.reused) == (len(units) + probe, len(units) - 1)
    assert shards(second.version) == shards(first.version)


# `python -m pipeline run` whose driver, once every unit has been read (their done markers
# written) and before exact dedup, says "paused" and blocks on stdin until the test kills it:
# the kill lands at that point of the run however fast or slow the machine is.
PAUSED_RUN = """
import sys
from pipeline.run import driver
from pipeline.cli.main import exit_cleanly, main

def paused(*args, **kwargs):
    print("paused", flush=True)
    sys.stdin.read()

driver.exact_dedup = paused
exit_cleanly(main(sys.argv[1:]))
"""


def test_driver_killed_mid_run_then_rerun_is_byte_identical(ray_local, tmp_path):
    reference = run_pipeline(
        load_config(SAMPLE_CONFIG, output_uri=str(tmp_path / "ref")), show_progress=False
    )
    out = tmp_path / "crash"
    argv = run_command(SAMPLE_CONFIG, out)[3:]  # after `python -m pipeline`
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED_RUN, *argv],
        cwd=REPO,
        env=own_ray_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        said = proc.stdout.readline()  # blocks until the driver pauses (or exits: b"")
        assert said == b"paused\n", f"the run ended before the pause: {said!r}"
        assert list(out.glob("sample/_work/units/*/*.done.json"))  # the read stage's markers
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray, mid-run
        proc.wait()
    dataset = Location.from_uri(str(out / "sample"))
    assert committed_versions(dataset) == []
    assert (out / "sample/_work/lease.json").exists()  # left behind by the dead driver
    result = run_pipeline(load_config(SAMPLE_CONFIG, output_uri=str(out)), show_progress=False)
    assert shards(result.version) == shards(reference.version)
    assert resolve_version(dataset).name == result.version.name


def test_concurrent_run_is_refused(ray_local, tmp_path):
    lease = tmp_path / "sample" / "_work" / "lease.json"
    lease.parent.mkdir(parents=True)
    holder = {
        "run_id": "other",
        "host": "another-host",
        "pid": 1,
        "acquired_at": time.time(),
        "expires_at": time.time() + 600,
    }
    lease.write_text(json.dumps(holder))
    with pytest.raises(LeaseHeld, match="refusing a concurrent run"):
        run_pipeline(load_config(SAMPLE_CONFIG, output_uri=str(tmp_path)), show_progress=False)
    assert json.loads(lease.read_text()) == holder  # the holder's lease is untouched
    holder["expires_at"] = time.time() - 61  # expired, past the clock-skew margin: taken over
    lease.write_text(json.dumps(holder))
    result = run_pipeline(load_config(SAMPLE_CONFIG, output_uri=str(tmp_path)), show_progress=False)
    assert result.version.exists() and not lease.exists()


def test_added_file_reuses_unchanged_units(ray_local, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(12):
        lines = [
            json.dumps({"id": f"{i}-{j}", "text": f"file {i} document {j} " + "x " * 40})
            for j in range(50)
        ]
        (data / f"part-{i}.jsonl").write_text("\n".join(lines) + "\n")
    sets = ["ingest.unit_bytes=4KiB"]
    cfg = load_config(
        SAMPLE_CONFIG, input_uri=str(data), output_uri=str(tmp_path / "out"), overrides=sets
    )
    first = run_pipeline(cfg, show_progress=False)
    # a file lands in the middle of the path order: only the units next to it are cut anew
    (data / "part-3a.jsonl").write_text(json.dumps({"id": "new", "text": "a new document"}) + "\n")
    second = run_pipeline(cfg, show_progress=False)
    read = next(s for s in second.stages if s.name == "read+hash")
    first_read = next(s for s in first.stages if s.name == "read+hash")
    assert first_read.tasks >= 6
    assert read.tasks - read.reused <= 2 and read.reused >= first_read.tasks - 2
    assert second.manifest["counts"]["docs_out"] == first.manifest["counts"]["docs_out"] + 1
    # a changed object (new mtime and content) is read again
    (data / "part-7.jsonl").write_text(json.dumps({"id": "7-x", "text": "changed"}) + "\n")
    third = run_pipeline(cfg, show_progress=False)
    read = next(s for s in third.stages if s.name == "read+hash")
    assert 1 <= read.tasks - read.reused <= 2


def test_lease_is_renewed_before_it_expires(tmp_path):
    from pipeline.core.lease import Lease

    path = tmp_path / "lease.json"
    lease = Lease(Location.from_uri(str(path)), "run", ttl_s=60)
    lease.acquire()
    first, inode = json.loads(path.read_text())["expires_at"], path.stat().st_ino
    lease.renew_if_due()  # too early (20 s of 60 have not passed): nothing written
    assert path.stat().st_ino == inode
    assert json.loads(path.read_text())["expires_at"] == first
    lease.renewed_at -= 21  # as if a third of the expiry had passed since (no sleep)
    lease.renew_if_due()
    assert path.stat().st_ino != inode  # written anew (temp file + rename)
    assert json.loads(path.read_text())["expires_at"] >= first
    lease.release()
    assert not (tmp_path / "lease.json").exists()

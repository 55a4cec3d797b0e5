"""Case 8 of "nothing wrong committed": the lease is fenced (a holder whose lease was taken over
cannot renew or commit), expiry allows for clock skew, and a pid is judged only in the same boot
and pid namespace. Local files and the SeaweedFS S3 server (conditional PUT on the ETag)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from pipeline.core import lease as lease_mod
from pipeline.core.lease import CLOCK_SKEW_S, Lease, LeaseHeld, LeaseLost, process_identity
from pipeline.core.storage import Location


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _fenced(loc: Location, monkeypatch) -> None:
    # a lease that expired a second ago: its driver was paused past its expiry (no sleep)...
    paused = Lease(loc, "paused-run", ttl_s=-1.0)
    paused.acquire()
    monkeypatch.setattr(lease_mod, "CLOCK_SKEW_S", 0.0)  # (no skew margin, to keep it short)
    newer = Lease(loc, "newer-run", ttl_s=60)
    newer.acquire()  # ...and another run takes the dataset over
    with pytest.raises(LeaseLost, match="taken over"):
        paused.renew()  # it must neither renew over the newer holder...
    with pytest.raises(LeaseLost):
        paused.check()  # ...nor pass the check before a commit
    paused.release()  # and its release leaves the newer lease alone
    assert json.loads(loc.read_bytes())["run_id"] == "newer-run"
    newer.renew()  # the holder itself renews as before
    newer.check()
    newer.release()
    assert not loc.exists()


def test_lease_is_fenced_local(tmp_path, monkeypatch):
    _fenced(Location.from_uri(str(tmp_path / "lease.json")), monkeypatch)


def test_lease_is_fenced_s3(s3_bucket, s3_storage, monkeypatch):
    _fenced(Location.from_uri(f"s3://{s3_bucket}/ds/_work/lease.json", s3_storage), monkeypatch)


def test_an_edited_lease_file_is_not_ours_any_more(tmp_path):
    loc = Location.from_uri(str(tmp_path / "lease.json"))
    held = Lease(loc, "run", ttl_s=60)
    held.acquire()
    body = json.loads(loc.read_bytes())
    body["token"] = "someone-else"
    (tmp_path / "lease.json").write_text(json.dumps(body))  # same inode, other bytes
    with pytest.raises(LeaseLost):
        held.renew()


def holder(**fields) -> dict:
    return {
        "run_id": "other",
        "token": "t",
        **process_identity(),
        "pid": 1,
        "acquired_at": time.time() - 1000,
        "expires_at": time.time() + 600,
        **fields,
    }


def test_expiry_allows_for_clock_skew(tmp_path):
    path = tmp_path / "lease.json"
    loc = Location.from_uri(str(path))
    # the holder's clock runs behind ours: by our clock its lease ended a little while ago
    path.write_text(json.dumps(holder(host="other-host", expires_at=time.time() - 30)))
    with pytest.raises(LeaseHeld, match="clock-skew margin"):
        Lease(loc, "mine").acquire()
    path.write_text(
        json.dumps(holder(host="other-host", expires_at=time.time() - CLOCK_SKEW_S - 1))
    )
    mine = Lease(loc, "mine")
    mine.acquire()  # past the margin: taken over
    assert json.loads(path.read_text())["run_id"] == "mine"


def test_pid_liveness_only_in_the_same_boot_and_pid_namespace(tmp_path):
    path = tmp_path / "lease.json"
    loc = Location.from_uri(str(path))
    pid = dead_pid()
    assert process_identity()["boot_id"] and process_identity()["pidns"]
    for other in (
        {"pidns": "pid:[4026531836-other]"},
        {"boot_id": "another-boot"},
        {"pidns": None},
    ):
        # same host name (a container sharing the UTS namespace), a pid that is dead *here*
        path.write_text(json.dumps(holder(pid=pid, **other)))
        with pytest.raises(LeaseHeld, match="refusing a concurrent run"):
            Lease(loc, "mine").acquire()
    path.write_text(json.dumps(holder(pid=pid)))  # provably our pid space, and dead
    Lease(loc, "mine").acquire()
    assert json.loads(path.read_text())["run_id"] == "mine"


def test_a_waiting_holder_gets_the_lease_once_it_is_released(tmp_path) -> None:
    """`remove` waits (held(wait_s=...)); a run refuses at once (wait_s=0)."""
    loc = Location.from_uri(str(tmp_path / "lease.json"))
    first = Lease(loc, "first-run", ttl_s=60)
    first.acquire()
    with pytest.raises(LeaseHeld, match="refusing a concurrent run"), lease_mod.held(loc, "x"):
        pass
    waits = []

    def on_wait(e: LeaseHeld) -> None:
        waits.append(e.holder)
        first.release()  # the holder finishes while the other waits

    with lease_mod.held(loc, "waiting", wait_s=60, on_wait=on_wait) as second:
        assert json.loads(loc.read_bytes())["token"] == second.token
    assert len(waits) == 1 and "dataset is being written by run first-run" in waits[0]
    assert "refusing" not in waits[0]

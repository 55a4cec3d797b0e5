"""One run at a time per dataset: a lease object created exclusively, with an expiry, fenced.

`OUTPUT/<name>/_work/lease.json` = {"run_id", "token", "host", "boot_id", "pidns", "pid",
"acquired_at", "expires_at"}. It is created with an exclusive create (S3: PUT with
If-None-Match: *, via s3fs mode="create"; local: a hard link of a finished temp file, which
fails if the name exists), so two drivers can never both create it.

Fencing: a holder remembers what it stored (S3: the object's ETag; local: the file's inode and
bytes). Every renewal, and the one just before a commit (run/commit_stage.py), first checks that the
stored lease is still that one — on S3 atomically, as a PUT with If-Match: <ETag>; locally by
comparing inode and bytes, then replacing the file by rename — and raises LeaseLost otherwise.
So a driver paused past its expiry, whose lease another run took over, stops instead of
renewing over the newer holder or committing beside it.

Takeover: a lease is taken over when it expired more than CLOCK_SKEW_S ago by this host's clock
(the holder wrote `expires_at` by its own clock: hosts writing one dataset must keep their
clocks within CLOCK_SKEW_S of each other, which NTP does by orders of magnitude), or when its
holder is a dead process that provably shares this pid space: same host name, same boot id
(/proc/sys/kernel/random/boot_id) and same pid namespace (/proc/self/ns/pid). A container with
the host's name but its own pid namespace, or a holder whose boot id or namespace is unknown,
is never judged dead by pid; its lease is waited out.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

from pipeline.cli import exit_codes
from pipeline.core.io_counters import IO
from pipeline.core.storage import Location, precondition_failed

CLOCK_SKEW_S = 60.0


class LeaseHeld(Exception):
    """Another live run holds the dataset."""

    exit_code = exit_codes.LEASE_HELD
    holder: str | None = None  # who holds it, till when (without "refusing ...")


class LeaseLost(LeaseHeld):
    """The stored lease is no longer this holder's: another run took it over."""


def _read_id(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _pidns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_identity() -> dict[str, str | None]:
    """What says two pids are in the same pid space: host name, boot id and pid namespace."""
    return {
        "host": socket.gethostname(),
        "boot_id": _read_id("/proc/sys/kernel/random/boot_id"),
        "pidns": _pidns(),
    }


def _holder_is_dead(holder: dict) -> bool:
    mine = process_identity()
    if any(not mine[k] or holder.get(k) != mine[k] for k in ("host", "boot_id", "pidns")):
        return False  # another pid space, or one we cannot tell is ours: a pid says nothing
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, KeyError, TypeError):
        return False
    return False


def _expired(holder: dict, now: float) -> bool:
    expires = holder.get("expires_at")
    return not isinstance(expires, (int, float)) or expires + CLOCK_SKEW_S < now


class Lease:
    def __init__(self, loc: Location, run_id: str, ttl_s: float = 900.0) -> None:
        self.loc, self.run_id, self.ttl_s = loc, run_id, ttl_s
        self.token = uuid.uuid4().hex  # this holder, whatever its run id or pid
        self.renewed_at = time.monotonic()
        self._stored: bytes | None = None  # what we last wrote
        self._etag: str | None = None  # S3: its ETag
        self._inode: int | None = None  # local: its inode

    def _body(self) -> bytes:
        now = time.time()
        return json.dumps(
            {
                "run_id": self.run_id,
                "token": self.token,
                **process_identity(),
                "pid": os.getpid(),
                "acquired_at": now,
                "expires_at": now + self.ttl_s,
            }
        ).encode()

    def _remember(self, body: bytes, etag: str | None) -> None:
        self._stored, self._etag = body, etag
        if self.loc.is_local:
            self._inode = os.stat(self.loc.path).st_ino
        elif etag is None:
            self._etag = self.loc.fs.info(self.loc.path, refresh=True).get("ETag")

    def acquire(self) -> None:
        for _ in range(3):
            body = self._body()
            self.renewed_at = time.monotonic()
            created, etag = self.loc.create_exclusive(body)
            if created:
                self._remember(body, etag)
                return
            try:
                holder = json.loads(self.loc.read_bytes())
            except (FileNotFoundError, ValueError):
                continue  # released or half-visible meanwhile: try the create again
            if holder == json.loads(body):
                self._remember(body, None)  # our create landed, its answer was lost (412 retry)
                return
            if not _expired(holder, time.time()) and not _holder_is_dead(holder):
                until = holder.get("expires_at")
                when = (
                    time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(until))
                    if isinstance(until, (int, float))
                    else "?"
                )
                who = (
                    f"{self.loc.uri}: dataset is being written by run {holder.get('run_id')}"
                    f" (host {holder.get('host')}, pid {holder.get('pid')}) until {when} UTC"
                    f" (+{CLOCK_SKEW_S:g} s clock-skew margin)"
                )
                refused = LeaseHeld(f"{who}; refusing a concurrent run")
                refused.holder = who  # for a line that waits instead of refusing
                raise refused
            self.loc.remove()  # expired or its process is gone: take it over
        raise LeaseHeld(f"{self.loc.uri}: could not acquire the lease")

    def check(self) -> None:
        """Raise LeaseLost unless the stored lease is still the one this holder wrote."""
        lost = LeaseLost(
            f"{self.loc.uri}: the lease of run {self.run_id} was taken over by another run;"
            " stopping without committing"
        )
        if self._stored is None:
            raise lost
        try:
            if self.loc.is_local:
                if os.stat(self.loc.path).st_ino != self._inode:
                    raise lost
            elif self.loc.fs.info(self.loc.path, refresh=True).get("ETag") != self._etag:
                raise lost
            if self.loc.read_bytes() != self._stored:
                raise lost
        except FileNotFoundError:
            raise lost from None

    def renew(self) -> None:
        """Extend the lease, fenced: only if the stored lease is still ours (LeaseLost else)."""
        body = self._body()
        if self.loc.is_local:
            self.check()
            self.loc.write_bytes(body)  # temp file + rename: a new inode
            self._remember(body, None)
        else:
            IO.add(bytes_written=len(body))  # the request hook counts the PUT
            try:
                out = self.loc.fs.pipe_file(self.loc.path, body, IfMatch=self._etag or "")
            except (FileNotFoundError, FileExistsError):
                self.check()  # raises LeaseLost: the lease is gone or not ours
                raise
            except OSError as e:
                if e.errno == errno.EINVAL or precondition_failed(e):
                    raise LeaseLost(
                        f"{self.loc.uri}: the lease of run {self.run_id} was taken over by"
                        " another run (conditional renewal refused); stopping without committing"
                    ) from None
                raise
            self._remember(body, (out or {}).get("ETag"))
        self.renewed_at = time.monotonic()

    def renew_if_due(self) -> None:
        """Renew once a third of the expiry has passed, so a long stage never lets it lapse."""
        if time.monotonic() - self.renewed_at > self.ttl_s / 3:
            self.renew()

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            holder = json.loads(self.loc.read_bytes())
            if holder.get("token") == self.token:
                self.loc.remove()


WAIT_POLL_S = 1.0  # how often a waiting holder tries again
REMOVE_WAIT_S = 600.0  # how long `remove` waits for another run's or removal's lease (--wait)


@contextlib.contextmanager
def held(
    loc: Location, run_id: str, ttl_s: float = 900.0, wait_s: float = 0.0, on_wait=None
) -> Iterator[Lease]:
    """The lease, held while the block runs. wait_s: while another live holder has it, try
    again for up to that long (on_wait(LeaseHeld) is called once, when the wait begins) before
    raising LeaseHeld; 0 refuses at once (a run)."""
    lease = Lease(loc, run_id, ttl_s)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lease.acquire()
            break
        except LeaseHeld as e:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if on_wait is not None:
                on_wait(e)
                on_wait = None
            time.sleep(min(WAIT_POLL_S, left))
    try:
        yield lease
    finally:
        lease.release()

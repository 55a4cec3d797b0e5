"""One run at a time per dataset: a lease object created exclusively, with an expiry.

`OUTPUT/<name>/_work/lease.json` = {"run_id", "host", "pid", "acquired_at", "expires_at"}.
It is created with an exclusive create (S3: PUT with If-None-Match: *, via s3fs mode="create";
local: a hard link of a finished temp file, which fails if the name exists), so two drivers can
never both hold it. A holder renews it between stages. A lease is taken over only when it has
expired, or when its holder is a dead process on this same host (a driver killed with SIGKILL
must not lock its own rerun out for the whole expiry).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

from pipeline.storage import IO, Location


class LeaseHeld(Exception):
    """Another live run holds the dataset."""

    exit_code = 4


def _create_exclusive(loc: Location, data: bytes) -> bool:
    IO.add(bytes_written=len(data))  # on S3 the storage layer's request hook counts the PUT
    if loc.is_local:
        IO.add(put_requests=1)
        os.makedirs(os.path.dirname(loc.path), exist_ok=True)
        tmp = f"{loc.path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, loc.path)
            return True
        except FileExistsError:
            return False
        finally:
            os.remove(tmp)
    try:
        loc.fs.pipe_file(loc.path, data, mode="create")
        return True
    except FileExistsError:
        return False


def _holder_is_dead(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, KeyError):
        return False
    return False


class Lease:
    def __init__(self, loc: Location, run_id: str, ttl_s: float = 900.0) -> None:
        self.loc, self.run_id, self.ttl_s = loc, run_id, ttl_s
        self.renewed_at = time.monotonic()

    def _body(self) -> bytes:
        now = time.time()
        return json.dumps(
            {
                "run_id": self.run_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "acquired_at": now,
                "expires_at": now + self.ttl_s,
            }
        ).encode()

    def acquire(self) -> None:
        for _ in range(3):
            body = self._body()
            self.renewed_at = time.monotonic()
            if _create_exclusive(self.loc, body):
                return
            try:
                holder = json.loads(self.loc.read_bytes())
            except (FileNotFoundError, ValueError):
                continue  # released or half-visible meanwhile: try the create again
            if holder == json.loads(body):
                return  # our own create landed, but its answer was lost and the retry got 412
            if holder.get("expires_at", 0) > time.time() and not _holder_is_dead(holder):
                raise LeaseHeld(
                    f"{self.loc.uri}: dataset is being written by run {holder.get('run_id')}"
                    f" (host {holder.get('host')}, pid {holder.get('pid')}) until"
                    f" {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(holder['expires_at']))}"
                    " UTC; refusing a concurrent run"
                )
            self.loc.remove()  # expired or its process is gone: take it over
        raise LeaseHeld(f"{self.loc.uri}: could not acquire the lease")

    def renew(self) -> None:
        self.loc.write_bytes(self._body())
        self.renewed_at = time.monotonic()

    def renew_if_due(self) -> None:
        """Renew once a third of the expiry has passed, so a long stage never lets it lapse."""
        if time.monotonic() - self.renewed_at > self.ttl_s / 3:
            self.renew()

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            holder = json.loads(self.loc.read_bytes())
            if holder.get("pid") == os.getpid() and holder.get("run_id") == self.run_id:
                self.loc.remove()


@contextlib.contextmanager
def held(loc: Location, run_id: str, ttl_s: float = 900.0) -> Iterator[Lease]:
    lease = Lease(loc, run_id, ttl_s)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()

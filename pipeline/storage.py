"""The one storage layer: fsspec locations (local or s3://), atomic commits, I/O counters.

Every stage reads and writes through `Location`, so that
- a commit is atomic everywhere: locally a temp file in the same folder and `os.replace`; on S3 one
  PUT (or one multipart upload, which becomes visible only on CompleteMultipartUpload), aborted on error;
- bytes and requests are counted in one place (`IO`), for the run summary and the cost report.

A Location pickles as (uri, storage options), so Ray tasks on any node rebuild it from storage,
never from the driver's disk or memory.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem


class IOCounters:
    """Per-process counts of bytes and requests made through this module (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, **amounts: int) -> None:
        with self._lock:
            self._counts.update(amounts)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @staticmethod
    def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
        return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


IO = IOCounters()


def storage_options(uri: str, options: Any | None) -> dict[str, Any]:
    """s3fs keyword arguments from a StorageConfig (credentials stay in the environment)."""
    if options is None or not uri.startswith("s3://"):
        return {}
    kwargs: dict[str, Any] = {"config_kwargs": {"max_pool_connections": options.max_pool_connections}}
    client: dict[str, Any] = {}
    if options.endpoint_url:
        client["endpoint_url"] = options.endpoint_url
    if options.region:
        client["region_name"] = options.region
    if client:
        kwargs["client_kwargs"] = client
    if options.profile:
        kwargs["profile"] = options.profile
    if options.anon:
        kwargs["anon"] = True
    return kwargs


@dataclass(frozen=True)
class Location:
    fs: fsspec.AbstractFileSystem
    path: str

    @classmethod
    def from_uri(cls, uri: str, options: Any | None = None) -> Location:
        fs, path = fsspec.core.url_to_fs(uri, **storage_options(uri, options))
        return cls(fs, path.rstrip("/") or "/")

    def __truediv__(self, name: str) -> Location:
        return Location(self.fs, f"{self.path.rstrip('/')}/{name.lstrip('/')}")

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    @property
    def uri(self) -> str:
        return self.path if self.is_local else self.fs.unstrip_protocol(self.path)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def relative_to(self, root: Location) -> str:
        return self.path[len(root.path.rstrip("/")) + 1:]

    # -- reads -------------------------------------------------------------------------------
    def exists(self) -> bool:
        IO.add(head_requests=1)
        return self.fs.exists(self.path)

    def read_bytes(self, start: int | None = None, end: int | None = None) -> bytes:
        data = self.fs.cat_file(self.path, start=start, end=end)
        IO.add(get_requests=1, bytes_read=len(data))
        return data

    @contextlib.contextmanager
    def open_read(self, block_size: int | None = None) -> Iterator[io.BufferedIOBase]:
        kwargs = {"block_size": block_size} if block_size and not self.is_local else {}
        with self.fs.open(self.path, "rb", **kwargs) as f:
            counted = _CountingReader(f)
            yield counted
        IO.add(get_requests=1, bytes_read=counted.bytes)

    def read_parquet(self, columns: list[str] | None = None) -> pa.Table:
        with self.open_read() as f:
            return pq.read_table(f, columns=columns)

    def find(self, detail: bool = True) -> dict[str, dict[str, Any]]:
        """Recursive listing (metadata only: one LIST per page on S3, no object reads)."""
        IO.add(list_requests=1)
        return self.fs.find(self.path, detail=detail, withdirs=False)

    def ls_names(self) -> list[str]:
        IO.add(list_requests=1)
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.path, detail=False))
        except FileNotFoundError:
            return []

    # -- writes ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic_writer(self) -> Iterator[io.BufferedIOBase]:
        """Write a whole object so that readers see all of it or nothing."""
        if self.is_local:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.tmp-{uuid.uuid4().hex}"
            try:
                with open(tmp, "wb") as f:
                    counted = _CountingWriter(f)
                    yield counted
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
                raise
        else:
            f = self.fs.open(self.path, "wb")
            counted = _CountingWriter(f)
            try:
                yield counted
            except BaseException:
                with contextlib.suppress(Exception):
                    f.discard()
                raise
            f.close()
        IO.add(put_requests=1, bytes_written=counted.bytes)

    def write_bytes(self, data: bytes) -> None:
        with self.atomic_writer() as f:
            f.write(data)

    def write_parquet(self, table: pa.Table, **kwargs: Any) -> None:
        with self.atomic_writer() as f:
            pq.write_table(table, f, **kwargs)

    def remove(self, recursive: bool = False) -> None:
        IO.add(delete_requests=1)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path, recursive=recursive)

    def __reduce__(self):
        return (Location, (self.fs, self.path))


class _CountingReader(io.RawIOBase):
    """Counts the bytes a consumer (pyarrow, json reader, ...) actually pulls."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.bytes = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.bytes += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()


class _CountingWriter(io.RawIOBase):
    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = self._raw.write(data)
        n = len(memoryview(data)) if n is None else n
        self.bytes += n
        return n

    def tell(self) -> int:
        return self.bytes

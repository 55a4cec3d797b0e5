"""The one storage layer: fsspec locations (local or s3://) and atomic commits.

Every stage reads and writes through `Location`, so that
- a commit is atomic everywhere: locally a temp file in the same folder and `os.replace`; on S3
  one PUT (or one multipart upload, which becomes visible only on CompleteMultipartUpload),
  aborted on error;
- bytes and requests are counted in one place (`IO`, core/io_counters.py), for the run summary
  and the cost report;
- a store's refusal names the URI (core/storage_errors.py).

Beside it: the s3fs options from the config (core/storage_options.py) and the endpoint check
commands and the reader make before their first request (core/reachability.py).

A Location pickles as (uri, storage options), so Ray tasks on any node rebuild it from storage,
never from the driver's disk or memory.
"""
from __future__ import annotations

import contextlib
import io
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from pipeline.core.io_counters import IO, watch_requests
from pipeline.core.storage_errors import refusals_named
from pipeline.core.storage_options import storage_options


def is_remote(uri: str) -> bool:
    """Whether `uri` names an object store (s3://...), not a local path or file://."""
    return "://" in uri and not uri.startswith("file://")


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
        return self.path[len(root.path.rstrip("/")) + 1 :]

    # -- reads -------------------------------------------------------------------------------
    def _count_requests(self, **requests: int) -> None:
        """Count a call's requests here unless the S3 hook counts the real ones (call it first)."""
        if not watch_requests(self.fs):
            IO.add(**requests)

    def exists(self) -> bool:
        self._count_requests(head_requests=1)
        with refusals_named(self.uri):
            return self.fs.exists(self.path)

    def size(self) -> int:
        """The stored object's size now (one HEAD on S3, no listing cache)."""
        self._count_requests(head_requests=1)
        if self.is_local:
            return os.path.getsize(self.path)
        return int(self.fs.info(self.path, refresh=True)["size"])

    def read_bytes(self, start: int | None = None, end: int | None = None) -> bytes:
        self._count_requests(get_requests=1)
        data = self.fs.cat_file(self.path, start=start, end=end)
        IO.add(bytes_read=len(data))
        return data

    @contextlib.contextmanager
    def open_read(self, block_size: int | None = None) -> Iterator[io.BufferedIOBase]:
        kwargs = {"block_size": block_size} if block_size and not self.is_local else {}
        self._count_requests(get_requests=1)
        with self.fs.open(self.path, "rb", **kwargs) as f:
            counted = _CountingReader(f)
            yield counted
        IO.add(bytes_read=counted.bytes)

    def read_parquet(self, columns: list[str] | None = None) -> pa.Table:
        with self.open_read() as f:
            return pq.read_table(f, columns=columns)

    def find(self, detail: bool = True) -> dict[str, dict[str, Any]]:
        """Recursive listing (metadata only: one LIST per page on S3, no object reads)."""
        self._count_requests(list_requests=1)
        with refusals_named(self.uri):
            return self.fs.find(self.path, detail=detail, withdirs=False)

    def ls_names(self) -> list[str]:
        self._count_requests(list_requests=1)
        try:
            with refusals_named(self.uri):  # a missing bucket is not an empty folder
                names = self.fs.ls(self.path, detail=False)
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in names)
        except FileNotFoundError:
            return []

    # -- writes ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic_writer(self) -> Iterator[io.BufferedIOBase]:
        """Write a whole object so that readers see all of it or nothing."""
        self._count_requests(put_requests=1)
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
                f.close()  # the PUT (or CompleteMultipartUpload) that makes the object visible
            except BaseException as e:
                with contextlib.suppress(Exception):
                    f.discard()
                if isinstance(e, OSError) and hasattr(e, "add_note"):  # s3fs's do not name it
                    e.add_note(f"writing {self.uri} failed; nothing was committed there")
                raise
        IO.add(bytes_written=counted.bytes)

    def create_exclusive(self, data: bytes) -> tuple[bool, str | None]:
        """Create the object only if its key is free (S3: PUT with If-None-Match: *, s3fs
        mode="create"; local: a hard link of a finished temp file): (created, S3 ETag of what
        was created). Two writers can never both create it."""
        IO.add(bytes_written=len(data))  # on S3 the storage layer's request hook counts the PUT
        if self.is_local:
            IO.add(put_requests=1)
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = f"{self.path}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, self.path)
                return True, None
            except FileExistsError:
                return False, None
            finally:
                os.remove(tmp)
        try:
            out = self.fs.pipe_file(self.path, data, mode="create")
            return True, (out or {}).get("ETag")
        except FileExistsError:
            return False, None
        except OSError as e:
            if precondition_failed(e):  # the key exists: If-None-Match: * refused
                return False, None
            raise

    def write_bytes(self, data: bytes) -> None:
        with self.atomic_writer() as f:
            f.write(data)

    def write_parquet(self, table: pa.Table, **kwargs: Any) -> None:
        with self.atomic_writer() as f:
            pq.write_table(table, f, **kwargs)

    def remove(self, recursive: bool = False) -> None:
        self._count_requests(delete_requests=1)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path, recursive=recursive)

    def copy_in_place(self, **s3_args: Any) -> None:
        """Rewrite an S3 object onto itself with new attributes, e.g. StorageClass="STANDARD_IA"
        (one COPY; S3 sets a new LastModified). Local storage has no such attributes."""
        if self.is_local:
            raise ValueError(f"{self.uri}: copy_in_place needs an object store")
        self._count_requests(copy_requests=1)
        self.fs.copy(self.path, self.path, **s3_args)

    # -- object tags (S3 only) -----------------------------------------------------------------
    def get_tags(self) -> dict[str, str]:
        self._count_requests(get_requests=1)
        return self.fs.get_tags(self.path)

    def put_tags(self, tags: dict[str, str]) -> None:
        """Replace the object's whole tag set (S3 PutObjectTagging; the object is not rewritten)."""
        self._count_requests(put_requests=1)
        self.fs.put_tags(self.path, tags, mode="o")

    def etag(self) -> str | None:
        """The object's ETag now (a fresh HEAD, no listing cache), without quotes."""
        self._count_requests(head_requests=1)
        etag = self.fs.info(self.path, refresh=True).get("ETag")
        return str(etag).strip('"') if etag else None

    def __reduce__(self):
        return (Location, (self.fs, self.path))


def precondition_failed(e: OSError) -> bool:
    """A 412 answer. s3fs raises FileExistsError for a refused create only when the error names
    its condition (AWS, moto); SeaweedFS leaves <Condition> out, and s3fs raises EINVAL."""
    if "Precondition" in str(e) or "412" in str(e):
        return True
    response = getattr(e.__cause__, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412


class _CountingReader(io.RawIOBase):
    """Counts the bytes a consumer (pyarrow, json reader, ...) actually pulls."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.bytes = 0

    def readable(self) -> bool:
        return True

    @property
    def details(self) -> dict[str, Any] | None:
        """The store's metadata of the open object (s3fs: from its open), where it keeps any."""
        return getattr(self._raw, "details", None)

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

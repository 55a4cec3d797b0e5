"""The one storage layer: fsspec locations (local or s3://), atomic commits, I/O counters.

Every stage reads and writes through `Location`, so that
- a commit is atomic everywhere: locally a temp file in the same folder and `os.replace`; on S3
  one PUT (or one multipart upload, which becomes visible only on CompleteMultipartUpload),
  aborted on error;
- bytes and requests are counted in one place (`IO`), for the run summary and the cost report.
  On S3 every HTTP request botocore sends (retries included) is counted by operation type through
  a `before-send` event hook on the s3fs client (`_watch_requests`): LIST, GET, HEAD, PUT (incl.
  multipart parts), COPY, DELETE; anything else is `other_requests`. On local storage, where no
  request is sent, each Location call counts the one request it stands for.

A Location pickles as (uri, storage options), so Ray tasks on any node rebuild it from storage,
never from the driver's disk or memory.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from pipeline.cli import exit_codes


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

_HOOK_ID = "pipeline.core.storage.count-requests"
# S3 operation name -> IO counter; the names follow the price table's request kinds.
_S3_REQUEST_KINDS = {
    "ListObjectsV2": "list_requests",
    "ListObjects": "list_requests",
    "ListObjectVersions": "list_requests",
    "ListMultipartUploads": "list_requests",
    "GetObject": "get_requests",
    "HeadObject": "head_requests",
    "HeadBucket": "head_requests",
    "PutObject": "put_requests",
    "CreateMultipartUpload": "put_requests",
    "UploadPart": "put_requests",
    "CompleteMultipartUpload": "put_requests",
    "CopyObject": "copy_requests",
    "UploadPartCopy": "copy_requests",
    "DeleteObject": "delete_requests",
    "DeleteObjects": "delete_requests",
    "AbortMultipartUpload": "delete_requests",
}


def _count_s3_request(event_name: str, **_: Any) -> None:
    # Must return None: a before-send handler that returns a value replaces the HTTP response.
    IO.add(**{_S3_REQUEST_KINDS.get(event_name.rsplit(".", 1)[-1], "other_requests"): 1})


def _watch_requests(fs: fsspec.AbstractFileSystem) -> bool:
    """Hook request counting into an s3fs filesystem's client; False for other filesystems.

    Registered on the client and on its session (clients made later inherit it); the unique id
    makes repeated calls, and filesystems rebuilt from a pickle in a Ray worker, count once.
    """
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol
    if "s3" not in protocols:
        return False
    fs.s3.meta.events.register("before-send.s3", _count_s3_request, unique_id=_HOOK_ID)
    if fs.session is not None:
        fs.session.register("before-send.s3", _count_s3_request, unique_id=_HOOK_ID)
    return True


def storage_options(uri: str, options: Any | None) -> dict[str, Any]:
    """s3fs keyword arguments from a StorageConfig (credentials stay in the environment).

    Every PUT and multipart part carries the SHA-256 of its bytes (`upload_checksum`, the default
    also without a config), which the store checks before it accepts them: a body corrupted on
    its way is refused (BadDigest), not stored. s3fs passes `s3_additional_kwargs` to each call
    that takes the parameter (PutObject, UploadPart, CreateMultipartUpload, DeleteObjects...)
    and carries each part's ChecksumSHA256 into CompleteMultipartUpload. "none" (a store that
    rejects checksum headers) also stops botocore's own default CRC32 (when_required)."""
    if not uri.startswith("s3://"):
        return {}
    checksum = getattr(options, "upload_checksum", "SHA256")
    upload = {"s3_additional_kwargs": {"ChecksumAlgorithm": checksum}} if checksum != "none" else {}
    if options is None:
        return upload
    kwargs: dict[str, Any] = {
        **upload,
        "config_kwargs": {
            "max_pool_connections": options.max_pool_connections,
            "retries": {"max_attempts": options.retries, "mode": "standard"},
            "read_timeout": options.read_timeout,
            "connect_timeout": options.connect_timeout,
        }
    }
    if checksum == "none":
        kwargs["config_kwargs"]["request_checksum_calculation"] = "when_required"
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


def is_remote(uri: str) -> bool:
    """Whether `uri` names an object store (s3://...), not a local path or file://."""
    return "://" in uri and not uri.startswith("file://")


class StorageUnreachable(Exception):
    """The object store does not accept connections (nothing was read or written there).

    Its own exit code, 5: not a verify mismatch (1) nor a config error (2)."""

    exit_code = exit_codes.STORAGE_UNREACHABLE


class StorageRefused(Exception):
    """The object store answered but refused: no credentials, access denied, or no such bucket.

    Exit 6, one line naming the URI and the cause (5 stays "does not accept connections")."""

    exit_code = exit_codes.STORAGE_REFUSED


# S3 error codes that no retry or other object can cure -> the cause, in words
_REFUSALS = {
    "NoSuchBucket": "no such bucket",
    "AccessDenied": "access denied",
    "AllAccessDisabled": "access denied",
    "AccountProblem": "access denied (account problem)",
    "InvalidAccessKeyId": "the access key is not known to the store",
    "SignatureDoesNotMatch": "the secret key does not match the access key",
    "ExpiredToken": "the credentials have expired",
    "InvalidToken": "the session token is invalid",
    "TokenRefreshRequired": "the credentials have expired",
    "403": "access denied",  # a HEAD's answer: no body, so no code (botocore uses the status)
}
# Denials named by the HTTP status, never by the S3 code: a HEAD's 403 has no code, a GET's or
# a LIST's says AccessDenied, and which request meets the denial first (a store that refuses
# the HEAD, or one that answers it 404 so that s3fs LISTs next) must not change the line: every
# one reads "access denied (HTTP 403, in Op)".
_DENIED_BY_STATUS = {"AccessDenied", "AllAccessDisabled", "403"}


def refusal_cause(error: BaseException) -> str | None:
    """The cause, in words, when `error` or an exception it wraps (its __cause__/__context__,
    s3fs's translation of a botocore error, a Ray task error's `cause`) is the store refusing
    every request of this kind; None for anything else (a missing object, a transient error)."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, StorageRefused):  # a Ray task's error is one too: its cause is clean
            inner = getattr(e, "cause", None)
            return str(inner if isinstance(inner, StorageRefused) else e)
        if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
            return f"no AWS credentials found ({e}; see docs/cluster.md, \"Credentials\")"
        if isinstance(e, ClientError):
            err = e.response.get("Error") or {}
            code = str(err.get("Code", ""))
            if code in _REFUSALS:
                bucket = f", bucket {err['BucketName']}" if err.get("BucketName") else ""
                shown = "HTTP 403" if code in _DENIED_BY_STATUS else code
                return f"{_REFUSALS[code]} ({shown}{bucket}, in {e.operation_name})"
        stack += [e.__cause__, e.__context__, getattr(e, "cause", None)]
    return None


@contextlib.contextmanager
def refusals_named(uri: str) -> Iterator[None]:
    """Turn a refusal (refusal_cause) inside the block into StorageRefused naming `uri`."""
    try:
        yield
    except StorageRefused:
        raise
    except Exception as e:
        cause = refusal_cause(e)
        if cause is None:
            raise
        raise StorageRefused(f"storage refused: {uri}: {cause}") from None


_REACHABLE: set[tuple[str, int]] = set()


def check_reachable(*locations: Location, timeout: float | None = None) -> None:
    """Fail within seconds, naming the endpoint and the object, if an s3:// location's endpoint
    (or the proxy in front of it) does not accept a TCP connection.

    Requests themselves are retried with backoff (`storage.retries`), which is right for a
    throttled or flaky store but makes a stopped or mistyped endpoint take a minute to report;
    so commands and the reader check once, before their first request. No HTTP request is sent,
    so request counts and the store's logs are unchanged."""
    for loc in locations:
        if loc.is_local or "s3" not in (
            (loc.fs.protocol,) if isinstance(loc.fs.protocol, str) else loc.fs.protocol
        ):
            continue
        endpoint = loc.fs.s3.meta.endpoint_url
        url = urllib.parse.urlsplit(endpoint)
        host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
        proxy = urllib.request.getproxies().get(url.scheme)
        if proxy and not urllib.request.proxy_bypass(host):
            purl = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            host, port = purl.hostname or "", purl.port or 80
        if (host, port) in _REACHABLE:
            continue
        if timeout is None:
            config = loc.fs.storage_options.get("config_kwargs") or {}
            timeout = float(config.get("connect_timeout") or 5.0)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as e:
            reason = e.strerror or str(e) or type(e).__name__
            raise StorageUnreachable(
                f"storage unreachable: cannot connect to {endpoint} for {loc.uri}: {reason}"
            ) from None
        _REACHABLE.add((host, port))


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
        if not _watch_requests(self.fs):
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

"""Bytes and requests counted in one place (`IO`), for the run summary and the cost report.

Every Location call counts its bytes here (core/storage.py). On S3 every HTTP request botocore
sends (retries included) is counted by operation type through a `before-send` event hook on the
s3fs client (`watch_requests`): LIST, GET, HEAD, PUT (incl. multipart parts), COPY, DELETE;
anything else is `other_requests`. On local storage, where no request is sent, each Location call
counts the one request it stands for.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import fsspec


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


def watch_requests(fs: fsspec.AbstractFileSystem) -> bool:
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

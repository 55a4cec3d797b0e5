"""The store's failures that no retry cures, each with its own exit code and a one-line message:
`StorageUnreachable` (5: no connection, see core/reachability.py) and `StorageRefused` (6: no
credentials, access denied, no such bucket), and how a refusal is recognised inside whatever
s3fs, botocore or Ray wrapped it in (`refusal_cause`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pipeline.cli import exit_codes


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

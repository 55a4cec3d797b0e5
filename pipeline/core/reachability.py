"""Whether an s3:// location's endpoint accepts a TCP connection, checked once per endpoint
before a command's or the reader's first request (`check_reachable`): a stopped or mistyped
endpoint fails within seconds, naming it, instead of after a minute of retries.
"""

from __future__ import annotations

import socket
import urllib.parse
import urllib.request

from pipeline.core.storage import Location
from pipeline.core.storage_errors import StorageUnreachable

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

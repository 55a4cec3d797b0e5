"""Byte units and the one way sizes are written for people (summary, plan, cost report).

Network and storage figures are decimal (MB/s, GB-months are priced per 2^30 bytes separately in
the price table); configuration sizes are binary (MiB), as pydantic's ByteSize reads them.
"""

from __future__ import annotations

KB, MB, GB = 1_000, 1_000_000, 1_000_000_000
KiB, MiB, GiB = 2**10, 2**20, 2**30


def human_bytes(n: float) -> str:
    """`999 B`, `1.23 kB`, `45.00 MB`, `1.20 TB`: decimal units, two decimals above a kilobyte."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    raise AssertionError


def megabytes(n: float) -> str:
    """A size in MB with one decimal, for columns that compare stages."""
    return f"{n / MB:,.1f} MB"


def parse_size(text: str | None) -> int | None:
    """`10TB`, `256MiB` or a number of bytes, as the config reads sizes (pydantic's ByteSize)."""
    from pydantic import ByteSize, TypeAdapter

    return None if text is None else int(TypeAdapter(ByteSize).validate_python(text))

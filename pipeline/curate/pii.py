"""PII redaction (transform): e-mail addresses and public IPv4/IPv6 addresses replaced by fixed
placeholders, as datatrove's PII formatter does, counted per kind.

Placeholders are addresses reserved for documentation, so the text stays well-formed:
`email@example.com` (RFC 2606), `192.0.2.1` (RFC 5737), `2001:db8::1` (RFC 3849). Only
addresses Python's ipaddress calls global are replaced: a loopback or private address
(127.0.0.1, 10.x, 192.168.x, fe80::) identifies nobody. Contract: as curate/base.py; the text
outside the replaced spans is unchanged, byte for byte.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections import Counter
from collections.abc import Iterator

from pipeline.core.model import StrictModel
from pipeline.curate.base import Transform, register

EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]*\d)")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


# What every match of IPV4 and of IPV6 holds: a text without it has none (a cheap scan, as
# these start with a literal).
_IPV4_HINT = re.compile(r"\.\d{1,3}\.\d")
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")
_LOCAL_PART = frozenset(string.ascii_letters + string.digits + "._%+-")  # EMAIL's, before "@"


class PiiParams(StrictModel):
    email: bool = True
    ip: bool = True
    email_placeholder: str = "email@example.com"
    ipv4_placeholder: str = "192.0.2.1"
    ipv6_placeholder: str = "2001:db8::1"


@register
class Pii(Transform):
    name = "pii"
    Params = PiiParams

    def rewrite(self, text: str, spans: Counter) -> str:
        p: PiiParams = self.params
        if p.email and "@" in text:
            text = _replace(text, _emails(text), _any, p.email_placeholder, "email", spans)
        if p.ip and _IPV4_HINT.search(text):
            text = _replace(text, IPV4.finditer(text), _global(ipaddress.IPv4Address),
                            p.ipv4_placeholder, "ipv4", spans)  # fmt: skip
        if p.ip and _IPV6_HINT.search(text):
            text = _replace(text, IPV6.finditer(text), _global(ipaddress.IPv6Address),
                            p.ipv6_placeholder, "ipv6", spans)  # fmt: skip
        return text


def _emails(text: str) -> Iterator[re.Match[str]]:
    """EMAIL's matches, left to right, as EMAIL.finditer finds them. A match holds one "@"
    and starts in the run of local-part characters just before it (from the end of the match
    before), so EMAIL is tried only at those starts, in order, rather than at every position."""
    end = 0
    at = text.find("@")
    while at != -1:
        start = at
        while start > end and text[start - 1] in _LOCAL_PART:
            start -= 1
        for s in range(start, at):
            match = EMAIL.match(text, s)
            if match:
                yield match
                end = match.end()
                break
        at = text.find("@", max(at + 1, end))


def _replace(text, matches, wanted, placeholder, kind, spans) -> str:
    """The text with each wanted match replaced by the placeholder (counted in spans)."""
    pieces, last = [], 0
    for match in matches:
        if wanted(match.group(0)):
            pieces += (text[last : match.start()], placeholder)
            last = match.end()
            spans[kind] += 1
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _any(value: str) -> bool:
    return True


def _global(kind):
    def check(value: str) -> bool:
        try:
            return kind(value).is_global
        except ValueError:  # looks like an address, is not one (999.1.1.1, 12:30:45)
            return False

    return check

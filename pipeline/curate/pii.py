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
from collections import Counter

from pipeline.core.model import StrictModel
from pipeline.curate.base import Transform, register

EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]*\d)")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


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
            text = self._sub(EMAIL, text, lambda s: True, p.email_placeholder, "email", spans)
        if p.ip and "." in text:
            text = self._sub(IPV4, text, _global(ipaddress.IPv4Address), p.ipv4_placeholder,
                             "ipv4", spans)  # fmt: skip
        if p.ip and ":" in text:
            text = self._sub(IPV6, text, _global(ipaddress.IPv6Address), p.ipv6_placeholder,
                             "ipv6", spans)  # fmt: skip
        return text

    @staticmethod
    def _sub(pattern, text, wanted, placeholder, kind, spans) -> str:
        def one(match: re.Match[str]) -> str:
            if not wanted(match.group(0)):
                return match.group(0)
            spans[kind] += 1
            return placeholder

        return pattern.sub(one, text)


def _global(kind):
    def check(value: str) -> bool:
        try:
            return kind(value).is_global
        except ValueError:  # looks like an address, is not one (999.1.1.1, 12:30:45)
            return False

    return check

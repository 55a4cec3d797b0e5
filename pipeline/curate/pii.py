"""PII redaction (transform): e-mail addresses and public IPv4/IPv6 addresses replaced by fixed
placeholders, as datatrove's PII formatter does, counted per kind.

Placeholders are addresses reserved for documentation, so the text stays well-formed:
`email@example.com` (RFC 2606), `192.0.2.1` (RFC 5737), `2001:db8::1` (RFC 3849). Only
addresses Python's ipaddress calls global are replaced: a loopback or private address
(127.0.0.1, 10.x, 192.168.x, fe80::) identifies nobody. Contract: as curate/base.py; the text
outside the replaced spans is unchanged, byte for byte.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import string
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from pipeline.core.model import StrictModel
from pipeline.curate.base import Rewrites, Transform, register

EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"
)
IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]*\d)")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


# What every match of IPV4 and of IPV6 holds, starting at its first "." or ":" (a cheap scan,
# as these start with a literal), and, for Arrow's RE2 over a batch, patterns every text
# holding one of them matches (a digit of \d is ASCII's or past U+007F: no Unicode table).
_IPV4_HINT = re.compile(r"\.\d{1,3}\.\d")
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")
_CANDIDATE = (r"\.[0-9\x{80}-\x{10FFFF}]{1,3}\.[0-9\x{80}-\x{10FFFF}]", _IPV6_HINT.pattern)
_LOCAL_PART = frozenset(string.ascii_letters + string.digits + "._%+-")  # EMAIL's, before "@"


class PiiParams(StrictModel):
    email: bool = Field(
        True,
        description='replace e-mail addresses',
    )
    ip: bool = Field(
        True,
        description='replace public IPv4 and IPv6 addresses',
    )
    email_placeholder: str = Field(
        "email@example.com",
        description='what an e-mail address becomes',
    )
    ipv4_placeholder: str = Field(
        "192.0.2.1",
        description='what a public IPv4 address becomes',
    )
    ipv6_placeholder: str = Field(
        "2001:db8::1",
        description='what a public IPv6 address becomes',
    )


@register
class Pii(Transform):
    """PII redaction: e-mail and public IP addresses replaced by fixed placeholders."""

    name = "pii"
    Params = PiiParams

    def rewrite(self, text: str, spans: Counter) -> str:
        return self._rewrite(text, spans, True, True)

    def _rewrite(self, text: str, spans: Counter, ipv4: bool, ipv6: bool) -> str:
        """rewrite, the IPv4 (IPv6) search left out where `ipv4` (`ipv6`) is false (the text
        holds no hint of one) and no replacement before it changed the text: a hint in the
        text as it is then would be one in the text as given."""
        p: PiiParams = self.params
        given = text
        if p.email and "@" in text:
            text = _replace(text, _emails(text), _any, p.email_placeholder, "email", spans)
        if p.ip and (ipv4 or text is not given):
            text = _replace(text, _anchored(text, IPV4, _IPV4_HINT, 3),
                            _global(ipaddress.IPv4Address), p.ipv4_placeholder, "ipv4", spans)
        if p.ip and (ipv6 or text is not given):
            text = _replace(text, _anchored(text, IPV6, _IPV6_HINT, 4),
                            _global(ipaddress.IPv6Address), p.ipv6_placeholder, "ipv6", spans)
        return text  # fmt: skip

    def __call__(self, batch: pa.Table) -> Rewrites:
        """rewrite's texts; a document without "@" or an IP hint (_CANDIDATE, checked over the
        batch by Arrow) is left as it is without a Python call, and a kind of address whose
        hint a document lacks is not looked for in it."""
        p: PiiParams = self.params
        texts = batch["text"].combine_chunks()
        found = [pc.match_substring_regex(texts, "@")] if p.email else []
        hints = [pc.match_substring_regex(texts, hint) for hint in _CANDIDATE] if p.ip else []
        if not found + hints or not pc.any(
            wanted := functools.reduce(pc.or_, found + hints)
        ).as_py():
            return Rewrites(texts)
        spans: Counter = Counter()
        before = texts.filter(wanted).to_pylist()
        v4, v6 = ([h.filter(wanted).to_pylist() for h in hints] if hints
                  else [[False] * len(before)] * 2)  # fmt: skip
        after = [self._rewrite(x, spans, a, b) for x, a, b in zip(before, v4, v6, strict=True)]
        changed = sum(a != b for a, b in zip(before, after, strict=True))
        if not changed:
            return Rewrites(texts, 0, spans)
        out = pc.replace_with_mask(texts, wanted, pa.array(after, pa.string()))
        return Rewrites(out, changed, spans)


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


def _anchored(text: str, regex: re.Pattern, hint: re.Pattern, back: int) -> Iterator[re.Match]:
    """regex.finditer's matches, regex tried only from `back` characters before each of hint's
    matches up to it: each match of IPV4 (IPV6) starts 1 to 3 (0 to 4) characters before its
    first "." (":"), where a hint match starts (an earlier one cannot overlap it: the
    lookbehind forbids a digit, "." or ":" before the match)."""
    end = 0  # positions before it are tried or inside a match
    for h in hint.finditer(text):
        for start in range(max(h.start() - back, end), h.start() + 1):
            match = regex.match(text, start)
            if match:
                yield match
                end = match.end()  # past h.start(): see the docstring
                break
        else:
            end = max(end, h.start() + 1)


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

"""The units the published filters measure text in: words, lines, paragraphs, n-grams.

Words are whitespace-separated tokens (str.split), as in the Gopher rules (Rae et al. 2021,
app. A); lines are the text split at newlines, stripped, blank ones left out; paragraphs are
separated by one or more blank lines. Every filter of curate/ measures with these, so two
filters never disagree on what a line is.
"""

from __future__ import annotations

import re
import string

PUNCTUATION = frozenset(string.punctuation + "…«»“”‘’—–")
_PARAGRAPH = re.compile(r"\n\s*\n")


def words(text: str) -> list[str]:
    return text.split()


def lines(text: str) -> list[str]:
    return [s for line in text.split("\n") if (s := line.strip())]


def paragraphs(text: str) -> list[str]:
    return [s for p in _PARAGRAPH.split(text) if (s := p.strip())]


def bare(word: str) -> str:
    """A word without its leading and trailing punctuation, lower-cased."""
    return word.strip(string.punctuation + "…«»“”‘’").lower()


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items that repeat an earlier one, their characters): every occurrence after the first."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars

"""The units the published filters measure text in: words, lines, paragraphs, n-grams.

Words are whitespace-separated tokens (str.split), as in the Gopher rules (Rae et al. 2021,
app. A); lines are the text split at newlines, stripped, blank ones left out; paragraphs are
separated by one or more blank lines. Every filter of curate/ measures with these, so two
filters never disagree on what a line is.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Iterator
from itertools import repeat

PUNCTUATION = frozenset(string.punctuation + "…«»“”‘’—–")
_PARAGRAPH = re.compile(r"\n\s*\n")


def words(text: str) -> list[str]:
    return text.split()


def lines(text: str) -> list[str]:
    return list(filter(None, map(str.strip, text.split("\n"))))


def paragraphs(text: str) -> list[str]:
    return list(filter(None, map(str.strip, _PARAGRAPH.split(text))))


BARE_STRIP = string.punctuation + "…«»“”‘’"


def bare(word: str) -> str:
    """A word without its leading and trailing punctuation, lower-cased."""
    return word.strip(BARE_STRIP).lower()


def bare_words(words: Iterable[str]) -> Iterator[str]:
    """`bare` of each word, without a Python call per word."""
    return map(str.lower, map(str.strip, words, repeat(BARE_STRIP)))


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items that repeat an earlier one, their characters): every occurrence after the first."""
    distinct = dict.fromkeys(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))

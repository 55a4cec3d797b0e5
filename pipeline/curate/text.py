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


# Characters that end a sentence, for the rules that ask whether a line ends in terminal
# punctuation (FineWeb's, C4's line rule), so that a page in Hindi, Bengali, Urdu, Arabic,
# Amharic, Burmese, Chinese, Japanese, ... is not scored as one without a full stop.
# Unicode's Sentence_Terminal property (PropList.txt, "STerm"; Python's unicodedata does not
# carry it): the 152 code points of Unicode 14.0, as perl 5.36's \p{Sentence_Terminal} lists
# them (`perl -e 'for (0..0x10FFFF) {...} chr($_) =~ /\p{STerm}/'`), e.g. . ! ? । ॥ ۔ ؟ ։
# ። ፧ ။ ‼ ⁇ 。 ． ！ ？ ﹒ ｡ ...; Unicode 15.0 added U+11F43 U+11F44 (Kawi).
STERM = (
    "!.?\u0589\u061D\u061E\u061F\u06D4\u0700\u0701\u0702\u07F9\u0837\u0839\u083D\u083E\u0964"
    "\u0965\u104A\u104B\u1362\u1367\u1368\u166E\u1735\u1736\u1803\u1809\u1944\u1945\u1AA8"
    "\u1AA9\u1AAA\u1AAB\u1B5A\u1B5B\u1B5E\u1B5F\u1B7D\u1B7E\u1C3B\u1C3C\u1C7E\u1C7F\u203C"
    "\u203D\u2047\u2048\u2049\u2E2E\u2E3C\u2E53\u2E54\u3002\uA4FF\uA60E\uA60F\uA6F3\uA6F7"
    "\uA876\uA877\uA8CE\uA8CF\uA92F\uA9C8\uA9C9\uAA5D\uAA5E\uAA5F\uAAF0\uAAF1\uABEB\uFE52"
    "\uFE56\uFE57\uFF01\uFF0E\uFF1F\uFF61\U00010A56\U00010A57\U00010F55\U00010F56\U00010F57"
    "\U00010F58\U00010F59\U00010F86\U00010F87\U00010F88\U00010F89\U00011047\U00011048"
    "\U000110BE\U000110BF\U000110C0\U000110C1\U00011141\U00011142\U00011143\U000111C5"
    "\U000111C6\U000111CD\U000111DE\U000111DF\U00011238\U00011239\U0001123B\U0001123C"
    "\U000112A9\U0001144B\U0001144C\U000115C2\U000115C3\U000115C9\U000115CA\U000115CB"
    "\U000115CC\U000115CD\U000115CE\U000115CF\U000115D0\U000115D1\U000115D2\U000115D3"
    "\U000115D4\U000115D5\U000115D6\U000115D7\U00011641\U00011642\U0001173C\U0001173D"
    "\U0001173E\U00011944\U00011946\U00011A42\U00011A43\U00011A9B\U00011A9C\U00011C41"
    "\U00011C42\U00011EF7\U00011EF8\U00016A6E\U00016A6F\U00016AF5\U00016B37\U00016B38"
    "\U00016B44\U00016E98\U0001BC9F\U0001DA88"
    "\U00011F43\U00011F44"
)
# Full stops of scripts lid.176 labels that Sentence_Terminal leaves out (Unicode counts them
# as other punctuation): Tibetan shad and nyis shad ། ༎, Khmer khan and bariyoosan ។ ៕, the
# vertical presentation forms of the ideographic full stop, "!" and "?" ︒ ︕ ︖.
FULL_STOPS_BEYOND_STERM = "\u0F0D\u0F0E\u17D4\u17D5\uFE12\uFE15\uFE16"
SENTENCE_ENDS = tuple(STERM + FULL_STOPS_BEYOND_STERM)


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

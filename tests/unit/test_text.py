import random
import re
import sys
import unicodedata

from pipeline.core.text import content_hash, normalize


def regex_normalize(text: str) -> str:
    """The documented rule, written as a regex (the form normalize had before)."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip()


def test_normalize_collapses_every_whitespace_character_as_the_regex_does():
    every = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    spaces = [c for c in every if re.fullmatch(r"\s", c)]
    assert len(spaces) == 29  # ASCII 9-13, 28-32, U+0085, U+00A0, U+1680, U+2000..U+3000
    for c in every:
        text = f"{c}a{c}{c}b{c}"
        assert normalize(text) == regex_normalize(text), hex(ord(c))


def test_normalize_equals_the_regex_rule_on_random_text():
    rng = random.Random(0)
    alphabet = "ab \t\n\x1c\x1f\x85\xa0\u2028\u3000e\u0301\u1e9b\u0323\u00e9Å"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20)))
        assert normalize(text) == regex_normalize(text), repr(text)
        assert content_hash(text) == content_hash(regex_normalize(text))

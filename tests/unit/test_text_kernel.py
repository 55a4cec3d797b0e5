"""dedup/text_kernel.py's compiled loops against the reference implementations: the xxhash
package for XXH3-64, Python's str methods for words and normalisation (core/text.py)."""

import json
import os
import random
import string
import subprocess
import sys
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import xxhash
from support import REPO

from pipeline.core.text import content_hash
from pipeline.dedup import text_kernel
from pipeline.dedup.minhash import ASCII_SPACES, PUNCTUATION

SEEDS = (0, 42, 2**64 - 1, 0x9E3779B97F4A7C15)


@pytest.fixture(autouse=True, scope="module")
def compiled():
    assert text_kernel.available()  # numba is a dependency: the compiled loops are what runs


def test_xxh3_64_equals_xxhash_for_every_length_and_seed():
    """Every length to 2,100 bytes covers each branch (0, 1-3, 4-8, 9-16, 17-128, 129-240, and
    past 240 the 1,024-byte blocks, the partial block and the last stripe), read at an
    unaligned offset too."""
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 2200, dtype=np.uint8)
    acc = np.empty(8, np.uint64)
    for seed in SEEDS:
        secret = text_kernel.long_secret(seed)
        for n in range(2101):
            for at in (0, 5):
                got = text_kernel.xxh3_64(data, at, n, np.uint64(seed), secret, acc)
                want = xxhash.xxh3_64_intdigest(data[at : at + n].tobytes(), seed=seed)
                assert int(got) == want, (seed, n, at)


# the ASCII bytes next to A-Z, a-z and the high bit: where a lowering done on 8 bytes at once
# would go wrong first
_CASE_EDGES = b"@AZ[`az{\x7f\x00\x01?_~09 "


def test_lowered_upto16_equals_xxhash_of_the_lowered_bytes():
    """Every length of its branches (1-3, 4-8, 9-16), each byte at every position drawn from the
    case edges and from all of ASCII, at unaligned offsets, for several seeds."""
    rng = np.random.default_rng(4)
    for seed in SEEDS:
        for n in range(1, 17):
            for trial in range(60):
                pool = np.frombuffer(_CASE_EDGES, np.uint8) if trial % 2 else np.arange(128)
                data = rng.choice(pool, n + 7).astype(np.uint8)
                at = trial % 7
                word = data[at : at + n].tobytes()
                got = text_kernel.lowered_upto16(data, at, n, np.uint64(seed))
                assert int(got) == xxhash.xxh3_64_intdigest(word.lower(), seed=seed), (seed, n)


def test_ascii_words_on_both_sides_of_each_length_class():
    """Words of 1 to 40 bytes (short ones hashed where they lie, from 17 bytes copied lowered),
    upper case at their ends and at the 8-byte boundaries, trimmed punctuation around them."""
    rng = random.Random(5)
    letters = string.ascii_letters + string.digits + "@[`{_~"
    texts = []
    for n in range(1, 41):
        words = ["".join(rng.choice(letters) for _ in range(n)) for _ in range(20)]
        words += ["A" * n, "Z" + "z" * (n - 1), "(" + "Q" * n + ")", "x" * (n - 1) + "X"]
        texts.append(rng.choice(["", " ", "\n"]) + " ".join(words) + rng.choice(["", "\t", ". "]))
    for seed in (0, 42):
        got, counts = text_kernel.ascii_word_hashes(
            pa.array(texts), ASCII_SPACES, string.punctuation, seed
        )
        want, want_counts = hashes_of([t.lower() for t in texts], string.punctuation, seed)
        assert got.tolist() == want and counts.tolist() == want_counts


def words_of(text: str, punctuation: str) -> list[bytes]:
    words = [w.strip(punctuation) for w in text.split()]
    return [w.encode() for w in words if w]


def hashes_of(texts: list[str], punctuation: str, seed: int) -> tuple[list[int], list[int]]:
    per_text = [words_of(t, punctuation) for t in texts]
    flat = [xxhash.xxh3_64_intdigest(w, seed=seed) for words in per_text for w in words]
    return flat, [len(words) for words in per_text]


def edge_texts(rng: random.Random, alphabet: list[str]) -> list[str]:
    """Empty and blank texts, 1-character words, punctuation-only tokens, words of 16, 17, 240,
    241, 1,024 and 3,000 bytes, and random runs of `alphabet`."""
    texts = ["", " ", "a", "a b c", "!!! ... ,", "x" * 16, "y" * 17, "z" * 240, "Q" * 241]
    texts += ["(" + "w" * 1024 + ")", " ".join("v" * k for k in range(1, 60)), "L" * 3000]
    texts += [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120))) for _ in range(3000)
    ]
    return texts


def test_ascii_word_hashes_follow_the_word_rule():
    rng = random.Random(1)
    alphabet = [chr(c) for c in range(128)] + ["Word", "abc", "...", "LONG" * 70]
    texts = edge_texts(rng, alphabet)
    for seed in (0, 42):
        got, counts = text_kernel.ascii_word_hashes(
            pa.array(texts), ASCII_SPACES, string.punctuation, seed
        )
        want, want_counts = hashes_of([t.lower() for t in texts], string.punctuation, seed)
        assert got.tolist() == want and counts.tolist() == want_counts


def test_utf8_word_hashes_follow_the_word_rule_on_any_text():
    """Every whitespace character str.split knows, the Unicode punctuation minhash trims, 2-, 3-
    and 4-byte characters; input as minhash gives it (lowered NFC), also as a slice."""
    rng = random.Random(2)
    spaces = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    alphabet = spaces + list(PUNCTUATION) + list("abcXYZé日本\U0001f600\u0301ßİ") + ["mot" * 90]
    texts = edge_texts(rng, alphabet) + ["é" * 200, "\U0001f600" * 70, "“”", "«a»\u3000"]
    lowered = pc.utf8_lower(text_kernel.nfc(pa.array(texts)))
    for array in (lowered, lowered.slice(3, 500)):
        got, counts = text_kernel.utf8_word_hashes(array, PUNCTUATION, 42)
        want, want_counts = hashes_of(array.to_pylist(), PUNCTUATION, 42)
        assert got.tolist() == want and counts.tolist() == want_counts


def test_content_hashes_equal_content_hash():
    rng = random.Random(3)
    spaces = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    alphabet = spaces + list("ab.é\u0301\u1e9b\u0323Å日\U0001f600") + ["word"]
    texts = edge_texts(rng, alphabet) + ["  ", "\u3000a\u2028\u2029b\x85", "e\u0301 e\u0301"]
    array = pa.array(texts)
    chunked = pa.chunked_array([array.slice(0, 900), array.slice(0, 0), array.slice(900)])
    for part in (array, array.slice(5, 700), array.slice(0, 0), chunked):
        want = [content_hash(t) for t in part.to_pylist()]
        assert text_kernel.content_hashes(part, batch_bytes=3000) == want


def test_content_hashes_of_dense_space_runs_equal_content_hash():
    """Runs of ASCII and other spaces at the start, the end, between single characters, mixed;
    documents that are only spaces; a multi-byte space right after an ASCII one."""
    rng = random.Random(6)
    spaces = [" ", "\n", "\t", "\r\n", "\x1c", "\xa0", "\u3000", "\u2028", "\x85"]
    pieces = spaces + ["a", "é", "日", "\U0001f600", "ab", ".", "Z"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 30))) for _ in range(2000)]
    texts += ["".join(rng.choice(spaces) for _ in range(k)) for k in range(6)]
    texts += [" a", "a ", " a ", "a  b", "a\u3000 b", "a \u3000b", "\xa0", "x\x85"]
    want = [content_hash(t) for t in texts]
    assert text_kernel.content_hashes(pa.array(texts), batch_bytes=500) == want


def test_the_class_table_holds_every_whitespace_character():
    every = (chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000)
    assert max(ord(c) for c in every if c.isspace()) < text_kernel._CLASSES_SIZE
    with pytest.raises(ValueError):
        text_kernel.char_classes("\U0001f600")


def test_nfc_changes_only_what_python_changes():
    texts = ["abc", "e\u0301", "Å", "\u1e9b\u0323", "", "A\u030a", "café"]
    assert text_kernel.nfc(pa.array(texts)).to_pylist() == [
        unicodedata.normalize("NFC", t) for t in texts
    ]
    # a slice (offsets not at 0) comes back right too
    sliced = pa.array(texts).slice(1, 5)
    assert text_kernel.nfc(sliced).to_pylist() == [
        unicodedata.normalize("NFC", t) for t in texts[1:6]
    ]


def test_nfc_of_text_already_nfc_is_the_batch_itself():
    """Non-ASCII text that is NFC already (most of it) is not copied."""
    batch = pa.array(["café", "naïve", "plain", "Å"])
    assert text_kernel.nfc(batch) is batch


_SIGNATURES = """
import json
from pipeline.dedup import text_kernel as k
import numpy as np
data, acc = np.zeros(300, np.uint8), np.empty(8, np.uint64)
for n in (0, 3, 8, 16, 100, 240, 300):
    k.xxh3_64(data, 0, n, np.uint64(1), k.long_secret(1), acc)
helpers = ("_r64", "_r32", "_upto240", "_long", "_stripe")  # _mix16, _upto16: inlined
print(json.dumps({name: len(getattr(k, name).signatures) for name in helpers}))
"""


def test_each_hash_helper_is_compiled_once(tmp_path):
    """An int literal passed to a compiled function would compile a copy of it (and of what it
    calls) per value: the first compile after install took twice as long. Here each helper is
    compiled for one signature (into an empty cache, so nothing is loaded instead)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env |= {"PYTHONPATH": str(REPO), "PIPELINE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _SIGNATURES], env=env, capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout.splitlines()[-1])
    assert counts == dict.fromkeys(counts, 1), counts

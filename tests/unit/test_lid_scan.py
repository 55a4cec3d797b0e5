"""The compiled predict's tokens (curate/lid_scan.py) are fastText's: split at space, \\t, \\n,
\\v, \\f, \\r and NUL (other control bytes inside a token), found 64 bytes at a time, whatever
a token's length, where it falls against a block's edge or the buffer's end; a line's \\n stops
a LINE read there."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipeline.curate import lid_kernel, lid_scan

pytestmark = pytest.mark.skipif(lid_kernel.numba is None, reason="numba is not installed")

SEPARATORS = b" \t\n\x0b\x0c\r\x00"
PIECES = [b"a", b"word", b"\xc3\xa9t\xc3\xa9", b"\x01", b"\x1f", b"!", b"~", b"x" * 63, b"y" * 64,
          b"z" * 65, b"q" * 130, b"w" * 300, *[bytes([c]) for c in SEPARATORS]]  # fmt: skip


def expected(data: bytes, i: int, end: int, lines: bool) -> tuple[list[tuple[int, int]], int]:
    """(start, length) of each token of data[i:end] until a \\n (lines), and where it stops."""
    found = []
    while i < end:
        if data[i] in SEPARATORS:
            i += 1
            if lines and data[i - 1] == 10:
                return found, i
            continue
        first = i
        while i < end and data[i] not in SEPARATORS:
            i += 1
        found.append((first, i - first))
    return found, end


def scanned(buffer: np.ndarray, i: int, end: int, lines: bool, chunk: int):
    """Every token _scan finds from i to end, chunk by chunk, long ones skipped as lid_kernel
    skips them (their start and length kept): (tokens, where it stopped)."""
    cells = np.zeros((64, lid_scan.SLOT), np.int32)
    found = np.zeros((chunk, 5), np.int64)
    tokens = []
    while True:
        i, t, why, after = lid_scan._scan(buffer, i, end, not lines, np.uint64(58), 256, cells,
                                          found)  # fmt: skip
        tokens += [(int(a), int(n)) for a, n in found[:t, :2]]
        assert all(0 <= s < 64 for s in found[:t, 4])
        if why == lid_scan.LONG:
            tokens.append((i, after - i))
            i = after
        elif why == lid_scan.EOL or i >= end:
            return tokens, i


@pytest.mark.parametrize("lines", [False, True])
def test_scan_finds_the_tokens_fasttext_splits(lines):
    rng = random.Random(7)
    for case in range(300):
        data = b"".join(rng.choice(PIECES) for _ in range(rng.randint(0, 60)))
        buffer = np.frombuffer(data, np.uint8)  # the text ends at the buffer's end
        i = rng.randint(0, len(data))
        end = rng.randint(i, len(data))
        want = expected(data, i, end, lines)
        for chunk in (1, 3, 1024):
            assert scanned(buffer, i, end, lines, chunk) == want, (case, chunk, data[i:end])


def test_equal_tokens_get_equal_keys_and_slots_and_others_differ():
    words = [b"a", b"ab", b"abcdefgh", b"abcdefghi", b"abcdefghijklmnop", b"abcdefghijklmnopq",
             b"abcdefghijklmnopqrstuvwx", b"abcdefghijklmnopqrstuvwxy", b"a" * 40]  # fmt: skip
    for spacing in (b" ", b"\t\t", b"\r\n" * 40):
        data = spacing.join(words + words) + b"\n"
        found = np.zeros((64, 5), np.int64)
        cells = np.zeros((1 << 10, lid_scan.SLOT), np.int32)
        _, t, _, _ = lid_scan._scan(np.frombuffer(data, np.uint8), 0, len(data), True,
                                    np.uint64(54), 256, cells, found)  # fmt: skip
        assert t == 2 * len(words)
        keys = [tuple(row[1:]) for row in found[:t].tolist()]  # length, 16 bytes, slot
        assert keys[: len(words)] == keys[len(words) :]
        assert len(set(keys[: len(words)])) == len(words)
        packed = [int.from_bytes(w[:8].ljust(8, b"\0"), "little") for w in words]
        assert [k[1] & (2**64 - 1) for k in keys[: len(words)]] == packed

"""Real text found on a Debian machine, cut into documents, plus helpers to plant duplicates.

The sample and benchmark corpora are built from text nobody on this project wrote: package
documentation under /usr/share/doc, the licences under /usr/share/common-licenses, man pages and
the Python standard library. Everything here is deterministic given the same machine contents.
"""

from __future__ import annotations

import gzip
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.text import normalize

DOC_ROOT = Path("/usr/share/doc")
LICENSE_ROOT = Path("/usr/share/common-licenses")
MAN_ROOT = Path("/usr/share/man")

MIN_DOC_BYTES = 300
MAX_DOC_BYTES = 30_000

# A Debian changelog entry starts with "package (version) distribution; urgency=...".
_CHANGELOG_HEADER = re.compile(r"^[a-z0-9][a-z0-9+.~-]* \([^)]*\) [^;\n]*;", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n[ \t]*\n\s*")
# Binary or typeset documentation that only looks like text after decompression.
_NOT_PROSE_SUFFIXES = (".pdf", ".ps", ".png", ".gif", ".jpg", ".svg", ".tar", ".dvi", ".jar")


@dataclass(frozen=True)
class RealText:
    origin: str  # absolute path of the file the text came from
    kind: str  # copyright | changelog | news | readme | license | man | python | other
    text: str


def word_shingles(text: str, n: int = 5) -> set[str]:
    """Lower-cased word n-grams of the normalised text: the measure the ground truth reports."""
    words = normalize(text).lower().split(" ")
    if len(words) < n:
        return {" ".join(words)}
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def read_text_file(path: Path) -> str | None:
    """UTF-8 text of a (possibly gzipped) file, or None when it is binary or not UTF-8."""
    if path.name.removesuffix(".gz").endswith(_NOT_PROSE_SUFFIXES):
        return None
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        if b"\x00" in data:
            return None
        return data.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError):
        return None


def classify_doc_file(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    if path.is_relative_to(LICENSE_ROOT):
        return "license"
    if name == "copyright":
        return "copyright"
    if name.startswith("changelog"):
        return "changelog"
    if name.startswith("news"):
        return "news"
    if name.startswith(("readme", "authors", "thanks", "todo")):
        return "readme"
    return "other"


def list_files(root: Path, pattern: str = "*") -> list[Path]:
    """Regular, readable files under root in a stable (sorted) order."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob(pattern) if p.is_file() and not p.is_symlink())


def split_units(text: str, kind: str) -> list[str]:
    """Natural units of a text: changelog entries for changelogs, paragraphs otherwise."""
    if kind == "changelog":
        starts = [m.start() for m in _CHANGELOG_HEADER.finditer(text)]
        if len(starts) > 1:
            bounds = [0, *starts[1:], len(text)] if starts[0] > 0 else [*starts, len(text)]
            return [text[a:b].strip("\n") for a, b in zip(bounds, bounds[1:], strict=False)]
    return [p for p in _BLANK_LINES.split(text) if p.strip()]


def _split_oversized(unit: str, max_bytes: int) -> list[str]:
    """Cut a unit larger than max_bytes at line boundaries (a line itself is never cut)."""
    pieces, current, size = [], [], 0
    for line in unit.splitlines(keepends=True):
        line_bytes = len(line.encode())
        if current and size + line_bytes > max_bytes:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += line_bytes
    if current:
        pieces.append("".join(current))
    # A single line longer than max_bytes is minified markup or data, not prose: drop it.
    return [p for p in pieces if len(p.encode()) <= max_bytes]


def chunk_text(text: str, kind: str, target_bytes: int) -> list[str]:
    """Group natural units into documents of about target_bytes (MIN..MAX_DOC_BYTES)."""
    units: list[str] = []
    for unit in split_units(text, kind):
        units.extend(_split_oversized(unit, MAX_DOC_BYTES))
    separator = "\n\n"
    chunks, current, size = [], [], 0
    for unit in units:
        unit_bytes = len(unit.encode()) + len(separator)
        if current and size + unit_bytes > target_bytes:
            chunks.append(separator.join(current))
            current, size = [], 0
        current.append(unit)
        size += unit_bytes
    if current:
        chunks.append(separator.join(current))
    return [c for c in chunks if MIN_DOC_BYTES <= len(c.encode()) <= MAX_DOC_BYTES]


def iter_documents(
    files: list[Path], kind_of, target_bytes: int, max_chunks_per_file: int | None = None
) -> Iterator[RealText]:
    """Documents cut from files in the given order; at most max_chunks_per_file from one file."""
    for path in files:
        text = read_text_file(path)
        if text is None:
            continue
        kind = kind_of(path)
        chunks = chunk_text(text, kind, target_bytes)
        for chunk in chunks[:max_chunks_per_file]:
            yield RealText(str(path), kind, chunk)


def mutate_words(text: str, rate: float, rng: random.Random) -> str:
    """Copy of text with about `rate` of its words substituted, inserted or deleted.

    Replacement words are drawn from the text itself so the copy still reads like the original.
    Whitespace between untouched words is kept as it was.
    """
    parts = re.split(r"(\s+)", text)  # words at even indices, separators at odd ones
    word_positions = [i for i in range(0, len(parts), 2) if parts[i]]
    if not word_positions:
        return text
    vocabulary = sorted({parts[i] for i in word_positions})
    n_edits = max(1, round(rate * len(word_positions)))
    for position in sorted(rng.sample(word_positions, min(n_edits, len(word_positions)))):
        operation = rng.choice(("substitute", "insert", "delete"))
        if operation == "substitute":
            replacement = rng.choice(vocabulary)
            if replacement == parts[position]:  # one retry keeps the edit real in most cases
                replacement = rng.choice(vocabulary)
            parts[position] = replacement
        elif operation == "insert":
            parts[position] = f"{parts[position]} {rng.choice(vocabulary)}"
        else:
            parts[position] = ""
            if position + 1 < len(parts):
                parts[position + 1] = ""
    return "".join(parts)

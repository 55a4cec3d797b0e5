"""Build a larger real-text corpus (JSONL) for benchmarks.

    python -m pipeline.tools.make_corpus --out DIR --mb 60 [--seed 0] [--long-share 0.25]
        [--long-doc-mb 1]

Text comes from this Debian machine: /usr/share/doc (changelogs decompressed),
/usr/share/common-licenses, man pages (troff source) and the Python standard library. Files are
visited in a seeded order, each cut into documents of 300 B - 30 KB (at most MAX_BYTES_PER_FILE
from one file, so that a few huge files do not dominate). Only if the machine runs out of text
are further documents made by word-level edits of ones already written (near duplicates).
With `--long-share F`, about that share of the text goes into long documents instead (kind
"long": documents joined in order by a blank line up to `--long-doc-mb` MB each, as books,
concatenated sources and long web pages are): a corpus mixing long and short documents.
Output: DIR/part-NNNNN.jsonl files of about 16 MB with records {"id", "text", "origin"}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sysconfig
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from pipeline.tools.real_text import (
    DOC_ROOT,
    LICENSE_ROOT,
    MAN_ROOT,
    RealText,
    classify_doc_file,
    iter_documents,
    list_files,
    mutate_words,
)

PART_BYTES = 16 * 1024 * 1024
TARGET_DOC_BYTES = 12_000
MAX_BYTES_PER_FILE = 256 * 1024
_SKIPPED_PYTHON_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def python_stdlib_files() -> list[Path]:
    """The standard library's .py files (installed third-party packages excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in _SKIPPED_PYTHON_DIRS)
        found.extend(Path(folder, n) for n in sorted(names) if n.endswith(".py"))
    return found


def corpus_kind(path: Path) -> str:
    if path.is_relative_to(MAN_ROOT):
        return "man"
    if path.suffix == ".py":
        return "python"
    return classify_doc_file(path)


def real_documents(rng: random.Random) -> Iterator[RealText]:
    files = list_files(DOC_ROOT) + list_files(LICENSE_ROOT)
    files += list_files(MAN_ROOT, "*.gz") + python_stdlib_files()
    rng.shuffle(files)  # mix the sources; the order is fixed by the seed
    max_chunks = MAX_BYTES_PER_FILE // TARGET_DOC_BYTES
    return iter_documents(files, corpus_kind, TARGET_DOC_BYTES, max_chunks_per_file=max_chunks)


def mutated_documents(written: list[RealText], rng: random.Random) -> Iterator[RealText]:
    """Endless near-duplicates: 1-10 % word edits of documents already in the corpus."""
    while True:
        original = rng.choice(written)
        text = mutate_words(original.text, rng.uniform(0.01, 0.10), rng)
        yield RealText(original.origin, "mutated", text)


class PartWriter:
    """Collects JSONL lines into part files of about PART_BYTES each."""

    def __init__(self, out: Path):
        self.out, self.parts, self.buffer = out, [], []

    def write(self, line: bytes) -> None:
        if not self.parts or self.parts[-1]["bytes"] >= PART_BYTES:
            self.flush()
            self.parts.append({"file": f"part-{len(self.parts):05d}.jsonl", "docs": 0, "bytes": 0})
        self.buffer.append(line)
        self.parts[-1]["docs"] += 1
        self.parts[-1]["bytes"] += len(line)

    def flush(self) -> None:
        if self.buffer:
            (self.out / self.parts[-1]["file"]).write_bytes(b"".join(self.buffer))
            self.buffer = []


def documents(rng: random.Random, written: list[RealText]) -> Iterator[RealText]:
    yield from real_documents(rng)
    if not written:
        raise SystemExit("no readable text found under /usr/share/doc: not a Debian machine?")
    yield from mutated_documents(written, rng)  # only reached when the real text ran out


def joined_long(docs: Iterator[RealText], share: float, doc_bytes: int) -> Iterator[RealText]:
    """`docs`, with about `share` of their bytes joined into documents of `doc_bytes` or more:
    a document goes to the long one being built while the long documents' bytes (that one's
    included) are below `share` of all bytes so far."""
    long_bytes = total = 0
    parts: list[RealText] = []
    size = 0
    for doc in docs:
        n = len(doc.text.encode())
        total += n
        if share <= 0 or long_bytes + size >= share * total:
            yield doc
            continue
        parts.append(doc)
        size += n + 2
        if size >= doc_bytes:
            text = "\n\n".join(p.text for p in parts)
            yield RealText(parts[0].origin, "long", text)
            long_bytes += size
            parts, size = [], 0


def build(
    out: Path, target_bytes: int, seed: int, long_share: float = 0.0, long_doc_bytes: int = 10**6
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("part-*.jsonl"):
        stale.unlink()
    rng = random.Random(seed)
    writer, written, by_kind = PartWriter(out), [], Counter()
    text_bytes = 0
    for doc in joined_long(documents(rng, written), long_share, long_doc_bytes):
        if text_bytes >= target_bytes:
            break
        doc_id = f"doc-{sum(by_kind.values()):08d}"
        record = {"id": doc_id, "text": doc.text, "origin": doc.origin, "kind": doc.kind}
        writer.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
        if doc.kind not in ("mutated", "long"):
            written.append(doc)
        by_kind[doc.kind] += 1
        text_bytes += len(doc.text.encode())
    writer.flush()
    return {
        "parts": writer.parts,
        "by_kind": dict(sorted(by_kind.items())),
        "text_bytes": text_bytes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--mb", type=float, default=60, help="text to write, in MB (10^6 bytes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--long-share",
        type=float,
        default=0.0,
        help="share of the text in long documents (joined documents); 0: none",
    )
    parser.add_argument(
        "--long-doc-mb", type=float, default=1.0, help="size of each long document, in MB"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = build(
        args.out, int(args.mb * 1e6), args.seed, args.long_share, int(args.long_doc_mb * 1e6)
    )
    seconds = time.perf_counter() - started

    print(f"{'file':<20} {'docs':>8} {'bytes':>12}")
    for part in result["parts"]:
        print(f"{part['file']:<20} {part['docs']:>8} {part['bytes']:>12}")
    print(f"{'kind':<20} {'docs':>8}")
    for kind, count in result["by_kind"].items():
        print(f"{kind:<20} {count:>8}")
    figures = {
        "docs": sum(p["docs"] for p in result["parts"]),
        "bytes": sum(p["bytes"] for p in result["parts"]),
        "files": len(result["parts"]),
        "text_bytes": result["text_bytes"],
        "mutated_docs": result["by_kind"].get("mutated", 0),
        "seconds": round(seconds, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

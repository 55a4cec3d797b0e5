"""Small readers and writers for the document file formats of the sample corpus.

The tools (sample generator, tokenizer trainer, corpus generator) need only a simple, whole-file
view of these formats; the pipeline's own streaming readers live elsewhere.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson")
DATA_SUFFIXES = (*JSONL_SUFFIXES, ".parquet", ".txt")


@dataclass(frozen=True)
class RawLine:
    """A line written verbatim into a JSONL file (used to plant a malformed record)."""

    line: str


@dataclass(frozen=True)
class Malformed:
    """What the reader yields for a JSONL line that is not a JSON object."""

    line: str


def is_data_file(relative: Path) -> bool:
    """Data files end with a known suffix; '.'/'_' names (.DS_Store, _SUCCESS) are skipped."""
    hidden = any(part.startswith((".", "_")) for part in relative.parts)
    return not hidden and relative.name.endswith(DATA_SUFFIXES)


def list_data_files(root: Path) -> list[Path]:
    """Data files under root, sorted by their '/'-separated relative path."""
    files = [p for p in root.rglob("*") if p.is_file() and is_data_file(p.relative_to(root))]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def compress_for(name: str, data: bytes) -> bytes:
    """Compress by file suffix, deterministically (gzip without a timestamp)."""
    if name.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    if name.endswith(".zst"):
        return zstandard.ZstdCompressor(level=10).compress(data)
    return data


def decompress_for(name: str, data: bytes) -> bytes:
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith(".zst"):
        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return data


def encode_jsonl(records: list[dict | RawLine], ensure_ascii: bool) -> tuple[bytes, list[int]]:
    """JSONL bytes (uncompressed) and the byte offset at which each record's line starts."""
    buffer, offsets, position = [], [], 0
    for record in records:
        if isinstance(record, RawLine):
            line = record.line
        else:
            line = json.dumps(record, ensure_ascii=ensure_ascii)
        encoded = (line + "\n").encode()
        offsets.append(position)
        buffer.append(encoded)
        position += len(encoded)
    return b"".join(buffer), offsets


def write_parquet(path: Path, columns: dict[str, list], row_group_size: int) -> None:
    table = pa.table(columns)
    pq.write_table(table, path, compression="zstd", row_group_size=row_group_size)


def iter_records(path: Path) -> Iterator[tuple[int, dict | Malformed]]:
    """(row, record) pairs of one data file.

    row is the byte offset of the line in the decompressed stream for JSONL, the row index for
    Parquet and 0 for a text file (whose record is {"text": whole file}).
    """
    name = path.name
    if name.endswith(".parquet"):
        for index, record in enumerate(pq.read_table(path).to_pylist()):
            yield index, record
    elif name.endswith(".txt"):
        yield 0, {"text": path.read_bytes().decode("utf-8")}  # keep "\r\n" as written
    else:
        data = decompress_for(name, path.read_bytes())
        position = 0
        for line in io.BytesIO(data):  # splits on b"\n" only, like any JSONL reader
            offset, position = position, position + len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            yield offset, record if isinstance(record, dict) else Malformed(line.decode("utf-8"))


def usable_text(record: dict | Malformed) -> str | None:
    """The record's text when it is a non-blank string; None for bad records."""
    if isinstance(record, Malformed):
        return None
    text = record.get("text")
    return text if isinstance(text, str) and text.strip() else None


def iter_texts(root: Path) -> Iterator[str]:
    """Usable texts of every data file under root, in listing order (bad records skipped)."""
    for path in list_data_files(root):
        for _, record in iter_records(path):
            text = usable_text(record)
            if text is not None:
                yield text

"""Benchmark decontamination: drop a document that shares a word n-gram (13 by default, GPT-3's
choice: Brown et al. 2020, "Language Models are Few-Shot Learners", appendix C) with any text of
the given benchmark files.

Words are curate/text.bare words (punctuation stripped, lower-cased), so punctuation and case do
not hide an overlap. A benchmark text shorter than n words, but of at least `min_words` (8,
GPT-3's smallest n), counts whole: a document holding all its words in a row overlaps it;
shorter texts (one-word answers) are ignored, or every document would match. Benchmark files
are JSON Lines (every string value of each record is a text; `fields` picks some), Parquet
(every string column, or `fields`) or plain text (one text a file), local or on S3 (the run's
storage settings), optionally gzip/zstd compressed; they are read once per worker process, as
sets of 64-bit n-gram hashes. `benchmarks` is one file or a list of them. A file that cannot
be read or decoded (not UTF-8, a JSON line that is not an object, a broken Parquet file), or
that holds no text of `min_words` words or more (an empty file: it would remove nothing), is
refused when the config loads (local files; a remote one's existence is checked before Ray
starts, its content when a worker reads it).
Contract: as curate/base.py; the benchmark files' content is in the reuse key.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash
import zstandard
from pydantic import Field, field_validator

from pipeline.core.model import StrictModel
from pipeline.curate import text as t
from pipeline.curate.base import CurationError, Filter, decoded, read_local, register


class DecontaminateParams(StrictModel):
    benchmarks: tuple[str, ...] = Field(
        min_length=1,
        description="benchmark files (one or a list; JSONL, Parquet or text; local or S3): a "
                    "document sharing an n-gram with one of their texts is removed",
    )
    n: int = Field(
        13, ge=1,
        description="words per n-gram (GPT-3's 13)",
    )
    min_words: int = Field(
        8, ge=1,
        description="a benchmark text shorter than n but of at least this many words counts "
                    "whole; shorter ones are ignored",
    )
    fields: tuple[str, ...] = Field(
        (),
        description='the JSONL keys or Parquet columns read as texts; empty: every string',
    )

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _one_or_more(cls, value):
        return (value,) if isinstance(value, str) else value


def _words(text: str) -> list[str]:
    return [w for w in (t.bare(x) for x in t.words(text)) if w]


def ngram_hashes(words: list[str], n: int) -> Iterator[tuple[int, int]]:
    """(position, hash) of each n-gram of the words."""
    for i in range(len(words) - n + 1):
        yield i, xxhash.xxh3_64_intdigest(" ".join(words[i : i + n]).encode())


def benchmark_texts(name: str, data: bytes, fields: tuple[str, ...]) -> Iterator[str]:
    lower = name.lower()
    try:
        if lower.endswith(".gz"):
            data, lower = gzip.decompress(data), lower[:-3]
        elif lower.endswith(".zst"):
            data, lower = zstandard.ZstdDecompressor().decompressobj().decompress(data), lower[:-4]
    except (OSError, EOFError, zstandard.ZstdError) as e:
        raise CurationError(f"{name} cannot be decompressed: {e}") from None
    if lower.endswith(".parquet"):
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError) as e:
            raise CurationError(f"{name} is not a readable Parquet file: {e}") from None
        for column in fields or table.column_names:
            if column not in table.column_names:
                continue
            if pa.types.is_string(table.schema.field(column).type) or pa.types.is_large_string(
                table.schema.field(column).type
            ):
                yield from (v for v in table[column].to_pylist() if v)
    elif lower.endswith((".jsonl", ".json", ".ndjson")):
        for number, line in enumerate(decoded(name, data).splitlines(), 1):
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise CurationError(f"{name}: line {number} is not JSON: {e}") from None
                if not isinstance(record, dict):
                    raise CurationError(f"{name}: line {number} is not a JSON object")
                for key, value in record.items():
                    if isinstance(value, str) and (not fields or key in fields):
                        yield value
    else:
        yield decoded(name, data)


@functools.lru_cache(maxsize=4)
def _ngrams(contents: tuple[tuple[str, bytes], ...], p: DecontaminateParams):
    """n -> hashes: the n-grams of every long text, and each short text whole (under its own
    length)."""
    found: dict[int, set[int]] = {p.n: set()}
    for name, data in contents:
        texts = 0
        for text in benchmark_texts(name, data, p.fields):
            words = _words(text)
            if len(words) >= p.n:
                found[p.n].update(h for _, h in ngram_hashes(words, p.n))
            elif len(words) >= p.min_words:
                found.setdefault(len(words), set()).update(
                    h for _, h in ngram_hashes(words, len(words))
                )
            else:
                continue
            texts += 1
        if not texts:
            raise CurationError(
                f"{name} holds no benchmark text of {min(p.min_words, p.n)} words or more"
                f"{' in the fields ' + ', '.join(p.fields) if p.fields else ''}: it would"
                " decontaminate nothing"
            )
    return {k: frozenset(v) for k, v in found.items()}


@register
class Decontaminate(Filter):
    """Benchmark decontamination: a word 13-gram shared with a benchmark text removes."""

    name = "decontaminate"
    Params = DecontaminateParams

    def __init__(self, params: DecontaminateParams, read=None) -> None:
        """`read(uri) -> bytes` reads a benchmark file (the run's storage layer)."""
        super().__init__(params)
        read = read or read_local
        contents = tuple((uri, read(uri)) for uri in params.benchmarks)
        self._grams = _ngrams(contents, params)

    @classmethod
    def files_for(cls, params: DecontaminateParams) -> list[str]:
        return list(params.benchmarks)

    @classmethod
    def check(cls, params: DecontaminateParams) -> None:
        local = tuple(
            (uri, read_local(uri)) for uri in params.benchmarks if "://" not in uri
            or uri.startswith("file://")
        )  # fmt: skip
        if local:  # not cached: the driver holds no benchmark for the run
            _ngrams.__wrapped__(local, params)

    def judge(self, text: str) -> str | None:
        words = _words(text)
        for n, grams in sorted(self._grams.items(), reverse=True):
            for i, h in ngram_hashes(words, n):
                if h in grams:
                    return f"benchmark_{n}gram at word {i}"
        return None

"""Committed dataset versions of synthetic tokens, for tests and benchmarks.

Shards are written exactly as the pipeline's pack stage writes them (`ShardWriter` into
`Location.atomic_writer`s) and committed with `commit_manifest`, with every manifest field
(one source, SOURCE; training shards only; the document index), size and checksum right, so
`verify_version` passes. Documents have random lengths; each ends
with the EOS id (vocab_size - 1). Generation is streamed in chunks: memory stays bounded whatever
the shard size.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from pipeline.core.layout import new_version_id
from pipeline.core.storage import Location
from pipeline.formats import documents
from pipeline.formats.data_path import blend_line
from pipeline.formats.manifest import FORMAT, commit_manifest
from pipeline.formats.megatron import BLOCK_BYTES, ShardWriter, token_dtype

CHUNK_TOKENS = 4 * 2**20
SOURCE = "synthetic"  # the one source a synthetic version holds (format 2 names one)


def doc_lengths(rng: np.random.Generator, tokens: int, low: int, high: int) -> np.ndarray:
    """Random document lengths in [low, high) summing to exactly `tokens` (last one cut short)."""
    if tokens == 0:
        return np.zeros(0, np.int64)
    lengths = rng.integers(low, high, size=tokens // low + 1, dtype=np.int64)
    ends = np.cumsum(lengths)
    n = int(np.searchsorted(ends, tokens)) + 1
    lengths = lengths[:n].copy()
    lengths[-1] -= int(ends[n - 1]) - tokens
    return lengths


def _chunks(lengths: np.ndarray, chunk_tokens: int) -> Iterator[np.ndarray]:
    """Consecutive runs of documents of about `chunk_tokens` tokens."""
    ends = np.cumsum(lengths)
    start = 0
    while start < len(lengths):
        stop = max(start + 1, int(np.searchsorted(ends, ends[start] + chunk_tokens, "right")))
        yield lengths[start:stop]
        start = stop


def write_shard(
    bin_loc: Location,
    idx_loc: Location,
    lengths: np.ndarray,
    vocab_size: int,
    rng: np.random.Generator,
    block_bytes: int = BLOCK_BYTES,
) -> dict:
    """One shard of random tokens, documents of `lengths`; returns its manifest entry."""
    dtype = token_dtype(vocab_size)
    eos = vocab_size - 1
    with bin_loc.atomic_writer() as bin_f, idx_loc.atomic_writer() as idx_f:
        writer = ShardWriter(bin_f, idx_f, dtype, block_bytes)
        for lens in _chunks(lengths, CHUNK_TOKENS):
            tokens = rng.integers(0, eos, size=int(lens.sum()), dtype=dtype)
            tokens[np.cumsum(lens)[lens > 0] - 1] = eos
            writer.add(tokens, lens)
        info = writer.close()
    return {
        "bin": bin_loc.name,
        "idx": idx_loc.name,
        "bin_bytes": info.bin_bytes,
        "idx_bytes": info.idx_bytes,
        "tokens": info.tokens,
        "documents": info.documents,
        "bin_xxh3_128": info.bin_xxh3_128,
        "idx_xxh3_128": info.idx_xxh3_128,
        "bin_block_bytes": info.bin_block_bytes,
        "bin_blocks_xxh3_64": info.bin_blocks_xxh3_64,
    }


def write_version(
    dataset: Location,
    shard_tokens: Sequence[int],
    *,
    name: str = "synthetic",
    vocab_size: int = 50_000,
    seed: int = 0,
    doc_tokens: tuple[int, int] = (64, 4096),
    commit: bool = True,
    block_bytes: int = BLOCK_BYTES,
) -> Location:
    """Write shards of `shard_tokens[k]` tokens under a new version of `dataset`, then commit.

    With `commit=False` the shards are written but no manifest: a version that does not exist.
    """
    rng = np.random.default_rng(seed)
    run_id = xxhash.xxh3_64_hexdigest(f"{name}:{seed}:{list(shard_tokens)}".encode())
    version_id = new_version_id(run_id)
    version = dataset / version_id
    shards, index = [], []
    for k, tokens in enumerate(shard_tokens):
        lengths = doc_lengths(rng, int(tokens), *doc_tokens)
        entry = write_shard(
            version / f"shard-{k:05d}.bin",
            version / f"shard-{k:05d}.idx",
            lengths,
            vocab_size,
            rng,
            block_bytes,
        )
        shards.append({**entry, "source": SOURCE, "split": "train"})
        index.append(_index_rows(f"shard-{k:05d}", lengths))
    docs = sum(s["documents"] for s in shards)
    counts = {
        "docs_in": docs,
        "docs_out": docs,
        "removed_exact": 0,
        "removed_near": 0,
        "quarantined": 0,
        "tokens": sum(s["tokens"] for s in shards),
    }
    manifest = {
        "format": FORMAT,
        "name": name,
        "version": version_id,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "config": {
            "synthetic": {
                "shard_tokens": list(map(int, shard_tokens)),
                "seed": seed,
                "doc_tokens": list(doc_tokens),
            }
        },
        "config_hash": run_id,
        "tokenizer": {
            "fingerprint": "synthetic",
            "vocab_size": vocab_size,
            "max_id": vocab_size - 1,
            "eos": "<eos>",
            "eos_id": vocab_size - 1,
            "special_tokens_in_text": "text",
            "dtype": np.dtype(token_dtype(vocab_size)).name,
        },
        "counts": {**counts, "quarantined_by_reason": {}},
        "lineage": _empty_lineage(dataset, run_id) if commit else {},
        "shards": shards,
        "splits": {"train": [s["bin"] for s in shards], "valid": []},
        "sources": {SOURCE: {**counts, "weight": 1.0}},
        "blend": {"train": blend_line(shards, {}), "valid": ""},
        "run": {"run_id": run_id, "output_uri": dataset.uri, "synthetic": True},
    }
    if commit:
        manifest["documents"] = documents.write_index(version, index)
        commit_manifest(version, manifest)
    return version


def _index_rows(shard: str, lengths: np.ndarray) -> pa.Table:
    """The document index rows (formats/documents.py) of one synthetic shard: document i of
    shard `shard` is `<shard>-<i>`, row i of an input file named after the shard."""
    n = len(lengths)
    record = pa.table(
        {
            "doc_id": [f"{SOURCE}/{shard}-{i}" for i in range(n)],
            "source": pa.array([f"{shard}.jsonl"] * n, pa.string()),
            "row": pa.array(np.arange(n, dtype=np.int64)),
            "length": pa.array(lengths.astype(np.int64)),
        }
    )
    return documents.shard_rows(record, SOURCE, "train", shard)


def _empty_lineage(dataset: Location, run_id: str) -> dict[str, str]:
    """The run records verify checks (verify_lineage), for a version read from no input: an
    empty input manifest, dedup audit and quarantine listing."""
    from pipeline.dedup.exact import REMOVED_SCHEMA
    from pipeline.ingest.listing import INPUTS_SCHEMA, table_digest
    from pipeline.ingest.records import QUARANTINE_SCHEMA

    run = f"_work/runs/{run_id}"
    lineage = {}
    for key, name, schema in (
        ("input_manifest", "inputs.parquet", INPUTS_SCHEMA),
        ("removed", "removed.parquet", REMOVED_SCHEMA),
        ("quarantine", "quarantine.parquet", QUARANTINE_SCHEMA),
    ):
        (dataset / run / name).write_parquet(schema.empty_table())
        lineage[key] = f"{run}/{name}"
    lineage["input_manifest_xxh3_128"] = table_digest(INPUTS_SCHEMA.empty_table())
    return lineage

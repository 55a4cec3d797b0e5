"""Check every claim a manifest makes about its shards; stop at the first mismatch."""

from __future__ import annotations

import numpy as np
import xxhash

from pipeline.manifest import (
    ManifestError,
    documents_accounted,
    load_manifest,
    resolve_version,
)
from pipeline.megatron import ShardFormatError, decode_index
from pipeline.storage import Location


class VerifyError(Exception):
    """A committed version does not match its manifest."""


def verify_version(location: Location) -> dict:
    """Verify a version folder (or a dataset folder's newest version). Returns its manifest."""
    try:
        version = resolve_version(location)
        manifest = load_manifest(version)
    except ManifestError as e:
        raise VerifyError(str(e)) from None
    dtype = np.dtype(manifest["tokenizer"]["dtype"])
    for i, shard in enumerate(manifest["shards"]):
        verify_shard(version, shard, dtype, f"{version.uri}: shard {i}")
    tokens = sum(shard["tokens"] for shard in manifest["shards"])
    docs = sum(shard["documents"] for shard in manifest["shards"])
    counts = manifest["counts"]
    if tokens != counts["tokens"] or docs != counts["docs_out"]:
        raise VerifyError(
            f"{version.uri}: shards hold {tokens} tokens / {docs} documents, counts"
            f" say {counts['tokens']} / {counts['docs_out']}"
        )
    if (accounted := documents_accounted(counts)) != counts["docs_in"]:
        raise VerifyError(
            f"{version.uri}: docs_in {counts['docs_in']} != out + removed +"
            f" quarantined = {accounted}"
        )
    return manifest


def verify_shard(version: Location, shard: dict, dtype: np.dtype, where: str) -> None:
    """Every claim of one shard entry: both files present with the stated sizes and xxh3-128,
    the .idx well formed and agreeing with the .bin size, the dtype, tokens and documents.
    Pack runs this on each shard it writes, so `verify` later repeats the same check."""
    idx_buf = _read_checked(
        version / shard["idx"], shard["idx_bytes"], shard["idx_xxh3_128"], where
    )
    try:
        info = decode_index(idx_buf)
    except ShardFormatError as e:
        raise VerifyError(f"{where}: {shard['idx']}: {e}") from None
    if info.dtype != dtype:
        raise VerifyError(f"{where}: {shard['idx']} dtype {info.dtype} != manifest {dtype}")
    if info.bin_size != shard["bin_bytes"]:
        raise VerifyError(
            f"{where}: {shard['idx']} describes {info.bin_size} bytes of tokens,"
            f" manifest says {shard['bin_bytes']}"
        )
    if info.tokens != shard["tokens"] or info.sequence_count != shard["documents"]:
        raise VerifyError(
            f"{where}: index holds {info.tokens} tokens in {info.sequence_count}"
            f" documents, manifest says {shard['tokens']} in {shard['documents']}"
        )
    _read_checked(version / shard["bin"], shard["bin_bytes"], shard["bin_xxh3_128"], where)


def _read_checked(loc: Location, size: int, checksum: str, where: str) -> bytes:
    try:
        data = loc.read_bytes()
    except FileNotFoundError:
        raise VerifyError(f"{where}: {loc.name} is missing") from None
    if len(data) != size:
        raise VerifyError(f"{where}: {loc.name} has {len(data)} bytes, manifest says {size}")
    actual = xxhash.xxh3_128_hexdigest(data)
    if actual != checksum:
        raise VerifyError(f"{where}: {loc.name} checksum {actual} != manifest {checksum}")
    return data

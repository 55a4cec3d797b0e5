"""Check every claim a manifest makes about its shards; stop at the first mismatch."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import xxhash

from pipeline.core.storage import Location
from pipeline.core.storage_errors import refusal_cause
from pipeline.formats import documents
from pipeline.formats.claims import check_claims
from pipeline.formats.manifest import (
    FILTERED_KEY,
    TAKEDOWN_KEY,
    ManifestError,
    load_manifest,
    split_shards,
)
from pipeline.formats.megatron import IndexInfo, ShardFormatError, block_digests, decode_index
from pipeline.formats.versions import resolve_version
from pipeline.ingest.listing import table_digest


class VerifyError(Exception):
    """A committed version does not match its manifest."""


def verify_version(location: Location) -> dict:
    """Verify a version folder (or a dataset folder's newest version). Returns its manifest."""
    try:
        version = resolve_version(location)
        manifest = load_manifest(version)
    except ManifestError as e:
        raise VerifyError(str(e)) from None
    except (OSError, ValueError) as e:  # e.g. a folder or unreadable object named manifest.json
        if refusal_cause(e):  # the store refused: not a verdict on the version (exit 6)
            raise
        raise VerifyError(f"{location.uri}: cannot read the manifest: {e}") from None
    try:
        return verify_manifest(version, manifest)
    except (KeyError, TypeError, ValueError, OSError) as e:  # a field no check above covers
        raise VerifyError(f"{version.uri}: malformed manifest: {e!r}") from None


def verify_manifest(version: Location, manifest: dict, shards_checked: bool = False) -> dict:
    """Every check `verify` makes on a version: the manifest's claims (`verify_claims`, the
    judge StreamReader, `find` and `blend` apply too), each shard (`check_shard`), then the
    document index and the lineage. The run calls this before it commits, with
    `shards_checked`: its pack tasks already ran `check_shard` on each shard as they wrote it
    (one read of each)."""
    verify_claims(version, manifest)
    dtype = np.dtype(manifest["tokenizer"]["dtype"])
    every = manifest["shards"] + split_shards(manifest, "valid")
    if not shards_checked:
        for i, shard in enumerate(every):
            check_shard(version, shard, manifest["tokenizer"], f"{version.uri}: shard {i}")
    verify_documents(version, manifest, every, dtype)
    verify_lineage(version, manifest)
    return manifest


def verify_claims(version: Location, manifest: dict) -> None:
    """The checks of `verify` that need the manifest alone (no shard or record is read):
    formats/claims.py's judge (the counts, the sources, the splits and the blend lines agree
    with the shard entries and each other), as VerifyError. `find`, `blend` and StreamReader
    run the same judge (after load_manifest's model) before they answer from a version."""
    try:
        check_claims(manifest, version.uri)
    except ManifestError as e:
        raise VerifyError(str(e)) from None


def verify_documents(version: Location, manifest: dict, shards: list[dict], dtype) -> None:
    """The document index (formats/documents.py), where the manifest lists one: its size and
    checksum, one row per document, and per shard the .idx's counts, offsets and lengths."""
    entry = manifest.get("documents")
    if entry is None:
        return  # a version from before the index
    try:
        index = documents.read_index(version, entry)
    except FileNotFoundError:
        raise VerifyError(f"{version.uri}: {documents.INDEX_FILE} is missing") from None
    except ValueError as e:
        raise VerifyError(f"{version.uri}: {e}") from None
    if index.num_rows != entry["rows"] or index.num_rows != manifest["counts"]["docs_out"]:
        raise VerifyError(
            f"{version.uri}: {documents.INDEX_FILE} has {index.num_rows} rows, the manifest"
            f" says {entry['rows']} and docs_out {manifest['counts']['docs_out']}"
        )
    for shard in shards:
        info = decode_index((version / shard["idx"]).read_bytes())
        name = shard["bin"].removesuffix(".bin")
        problem = documents.index_problem(
            index, name, info.pointers, info.lengths, dtype.itemsize
        )
        if problem:
            raise VerifyError(f"{version.uri}: {problem}")


def verify_lineage(version: Location, manifest: dict) -> None:
    """The run's records agree with the counts: the input manifest has the digest the run
    recorded, the dedup audit holds removed_exact / removed_near rows, and the quarantine
    listing the quarantined records per reason (and, where its rows carry `origin`, per
    source). Counts edited so that they still balance fail here. Lineage paths are relative to
    the dataset folder (the version's parent); the judge (claims.check_lineage, run before)
    checked that they name the records and stay inside it."""
    lineage, counts = manifest["lineage"], manifest["counts"]
    dataset = Location(version.fs, version.path.rsplit("/", 1)[0])

    def table(key: str, columns: list[str] | None):
        """The record's `columns` that it has (all of them with None): the audit can hold
        millions of rows, and only a few of its columns are counted here."""
        path = lineage[key]
        try:
            with (dataset / path).open_read() as f:
                parquet = pq.ParquetFile(f)
                names = parquet.schema_arrow.names
                return parquet.read([c for c in columns if c in names] if columns else None)
        except FileNotFoundError:
            raise VerifyError(f"{version.uri}: lineage {key} {path} is missing") from None
        except Exception as e:  # noqa: BLE001 - an unreadable record is a failed check
            raise VerifyError(f"{version.uri}: lineage {key} {path}: {e}") from None

    inputs = table("input_manifest", None)
    if table_digest(inputs) != lineage["input_manifest_xxh3_128"]:
        raise VerifyError(
            f"{version.uri}: input manifest {lineage['input_manifest']} does not have the"
            " digest the run recorded"
        )
    removed = table("removed", ["rule", "origin"])
    rules = Counter(removed["rule"].to_pylist())
    sources = manifest.get("sources")
    if sources is not None and "origin" in removed.column_names:
        pairs = Counter(zip(removed["origin"].to_pylist(), removed["rule"].to_pylist(),
                            strict=True))
        for name, entry in sources.items():
            for rule in ("exact", "near"):
                if pairs.get((name, rule), 0) != entry[f"removed_{rule}"]:
                    raise VerifyError(
                        f"{version.uri}: the dedup audit lists {pairs.get((name, rule), 0)}"
                        f" {rule} removals from source {name}, sources say"
                        f" {entry[f'removed_{rule}']}"
                    )
    for rule in ("exact", "near"):
        if rules.get(rule, 0) != counts[f"removed_{rule}"]:
            raise VerifyError(
                f"{version.uri}: the dedup audit lists {rules.get(rule, 0)} {rule} removals,"
                f" counts say removed_{rule} = {counts[f'removed_{rule}']}"
            )
    filtered = {r: n for r, n in rules.items() if r not in ("exact", "near", "takedown")}
    if filtered != (counts.get(FILTERED_KEY) or {}):  # curation's rules (read pass)
        raise VerifyError(
            f"{version.uri}: the audit lists curation removals {dict(sorted(filtered.items()))},"
            f" counts say {FILTERED_KEY} = {counts.get(FILTERED_KEY) or {}}"
        )
    listed = rules.get("takedown", 0)  # the run's takedown list's documents (read pass)
    by_remove = isinstance(lineage.get("removed_ids"), str)  # a `remove` version: and more
    if listed > counts.get(TAKEDOWN_KEY, 0) or (
        not by_remove and listed != counts.get(TAKEDOWN_KEY, 0)
    ):
        raise VerifyError(
            f"{version.uri}: the audit lists {listed} takedown removals, counts say"
            f" {TAKEDOWN_KEY} = {counts.get(TAKEDOWN_KEY, 0)}"
        )
    if by_remove:
        taken = table("removed_ids", ["doc_id"]).num_rows
        if taken + listed > counts.get(TAKEDOWN_KEY, 0):
            raise VerifyError(
                f"{version.uri}: {taken} ids were taken down, counts say"
                f" {TAKEDOWN_KEY} = {counts.get(TAKEDOWN_KEY, 0)} documents"
            )
    bad = table("quarantine", ["reason", "records", "origin"])
    weights = bad["records"].to_pylist() if "records" in bad.column_names else [1] * len(bad)
    by_reason: Counter = Counter()
    for reason, n in zip(bad["reason"].to_pylist(), weights, strict=True):
        by_reason[reason] += n
    if sources is not None and "origin" in bad.column_names:
        by_origin: Counter = Counter()
        for origin, n in zip(bad["origin"].to_pylist(), weights, strict=True):
            by_origin[origin] += n
        for name, entry in sources.items():
            if by_origin.get(name, 0) != entry["quarantined"]:
                raise VerifyError(
                    f"{version.uri}: the quarantine listing holds {by_origin.get(name, 0)}"
                    f" records from source {name}, sources say {entry['quarantined']}"
                )
    if sum(by_reason.values()) != counts["quarantined"] or dict(by_reason) != {
        k: v for k, v in (counts.get("quarantined_by_reason") or {}).items() if v
    }:
        raise VerifyError(
            f"{version.uri}: the quarantine listing holds {dict(by_reason)}, counts say"
            f" {counts['quarantined']} {counts.get('quarantined_by_reason')}"
        )


def check_shard(version: Location, shard: dict, tokenizer: dict, where: str) -> IndexInfo:
    """Every check `verify` makes on one shard, on one read of it: its claims (`verify_shard`),
    then the document boundaries (`check_document_boundaries`). Pack runs it on each shard it
    writes, so a shard that `verify` would reject is never committed."""
    info, tokens = verify_shard(version, shard, np.dtype(tokenizer["dtype"]), where)
    check_document_boundaries(info, tokens, shard, tokenizer, where)
    return info


def check_written(
    version: Location, shard: dict, idx_buf: bytes, tokenizer: dict, where: str
) -> IndexInfo:
    """The check pack runs on a shard it has just written, without reading it back: the .idx
    as written (`idx_buf`, in memory) is well formed and holds the entry's claims, and storage
    holds both objects at the stated sizes (a HEAD each). The rest of `check_shard` happened on
    the bytes as they were written: the document boundaries (`WrittenBoundaries`) and the
    checksums (ShardWriter); on S3 the store checked each PUT's SHA-256
    (core/storage_options.py) and refused a corrupted body. `verify` still reads every byte back
    and checks it all."""
    if xxhash.xxh3_128_hexdigest(idx_buf) != shard["idx_xxh3_128"]:
        raise VerifyError(f"{where}: {shard['idx']} as written does not have the entry's checksum")
    info = _check_index(idx_buf, shard, np.dtype(tokenizer["dtype"]), where)
    for key in ("idx", "bin"):
        try:
            size = (version / shard[key]).size()
        except FileNotFoundError:
            raise VerifyError(f"{where}: {shard[key]} is missing") from None
        if size != shard[f"{key}_bytes"]:
            raise VerifyError(
                f"{where}: {shard[key]} has {size} bytes, manifest says {shard[f'{key}_bytes']}"
            )
    return info


class WrittenBoundaries:
    """`check_document_boundaries` on a shard's documents as they are written, batch by batch
    (each batch whole documents, in shard order): VerifyError at the first bad document, with
    its index in the shard, before the shard is committed."""

    def __init__(self, shard_bin: str, tokenizer: dict, where: str) -> None:
        self.checked = tokenizer.get("special_tokens_in_text") == "text"
        self.eos, self.bos = tokenizer["eos_id"], tokenizer.get("bos_id")
        self.shard_bin, self.where, self.documents = shard_bin, where, 0

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        if self.checked:
            problem = boundary_problem(
                tokens, lengths.astype(np.int64), self.eos, self.bos, self.documents
            )
            if problem:
                raise VerifyError(f"{self.where}: {self.shard_bin}: {problem}")
        self.documents += len(lengths)


def verify_shard(
    version: Location, shard: dict, dtype: np.dtype, where: str
) -> tuple[IndexInfo, np.ndarray]:
    """Every claim of one shard entry: both files present with the stated sizes and xxh3-128,
    the .idx well formed and agreeing with the .bin size, the dtype, tokens and documents.
    Returns the decoded index and the tokens, for the checks that need the content."""
    idx_buf = _read_checked(
        version / shard["idx"], shard["idx_bytes"], shard["idx_xxh3_128"], where
    )
    info = _check_index(idx_buf, shard, dtype, where)
    data = _read_checked(version / shard["bin"], shard["bin_bytes"], shard["bin_xxh3_128"], where)
    check_blocks(shard, data, where)
    return info, np.frombuffer(data, dtype=dtype)


def check_blocks(shard: dict, data: bytes, where: str) -> None:
    """The .bin's block checksums (format 2, formats/megatron.py "Block checksums"), which the
    reader trusts for a stretch of a shard: each must be the digest of its block."""
    expected = shard.get("bin_blocks_xxh3_64")
    if expected is None:
        return  # format 1: whole-shard checksums only
    actual = block_digests(data, shard["bin_block_bytes"])
    bad = next((i for i, (a, e) in enumerate(zip(actual, expected, strict=True)) if a != e), None)
    if bad is not None:
        raise VerifyError(
            f"{where}: {shard['bin']} block {bad} (bytes {bad * shard['bin_block_bytes']}-)"
            f" xxh3-64 {actual[bad]} != manifest {expected[bad]}"
        )


def _check_index(idx_buf: bytes, shard: dict, dtype: np.dtype, where: str) -> IndexInfo:
    """The .idx well formed and agreeing with the entry: dtype, .bin size, tokens, documents."""
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
    return info


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


def check_document_boundaries(
    info: IndexInfo, tokens: np.ndarray, shard: dict, tokenizer: dict, where: str
) -> None:
    """For versions written with special_tokens_in_text "text" (earlier versions lack the field and
    are not checked): every document ends with the EOS id and no other EOS id occurs, and with a
    BOS every document starts with it and no other BOS id occurs. A reader that splits on EOS
    (Megatron's EOD masking) or on BOS then sees exactly the documents the manifest counts."""
    if tokenizer.get("special_tokens_in_text") != "text":
        return
    problem = boundary_problem(
        tokens, info.lengths.astype(np.int64), tokenizer["eos_id"], tokenizer.get("bos_id")
    )
    if problem:
        raise VerifyError(f"{where}: {shard['bin']}: {problem}")


def boundary_problem(
    tokens: np.ndarray, lengths: np.ndarray, eos_id: int, bos_id: int | None, first: int = 0
) -> str | None:
    """Where the documents (`lengths` tokens each, in order; the first is document `first` of
    its shard) break the EOS/BOS rule, or None."""
    if len(lengths) == 0:
        return None
    ends = np.cumsum(lengths)
    if (lengths < (1 if bos_id is None else 2)).any() or ends[-1] != len(tokens):
        return "document lengths do not cover the tokens"
    no_eos = np.flatnonzero(tokens[ends - 1] != eos_id)
    if len(no_eos):
        return f"document {first + int(no_eos[0])} does not end with EOS id {eos_id}"
    starts = ends - lengths
    if bos_id is not None:
        no_bos = np.flatnonzero(tokens[starts] != bos_id)
        if len(no_bos):
            return f"document {first + int(no_bos[0])} does not start with BOS id {bos_id}"
    expected = len(lengths) * (2 if bos_id == eos_id else 1)
    is_eos = tokens == eos_id
    if np.count_nonzero(is_eos) != expected:  # where, only when wrong
        eos_at = np.flatnonzero(is_eos)
        allowed = np.zeros(len(tokens), dtype=bool)
        allowed[ends - 1] = True
        if bos_id == eos_id:
            allowed[starts] = True
        stray = int(eos_at[~allowed[eos_at]][0])
        doc = int(np.searchsorted(ends, stray, side="right"))
        return (
            f"EOS id {eos_id} inside document {first + doc} (token {stray - int(starts[doc])}):"
            " a reader splitting on EOS would see two documents"
        )
    if bos_id is not None and bos_id != eos_id:  # bos == eos: counted as EOS above
        is_bos = tokens == bos_id
        if np.count_nonzero(is_bos) != len(lengths):  # one per document, at its start (above)
            bos_at = np.flatnonzero(is_bos)
            at_start = np.zeros(len(tokens), dtype=bool)
            at_start[starts] = True
            stray = int(bos_at[~at_start[bos_at]][0])
            doc = int(np.searchsorted(ends, stray, side="right"))
            return (
                f"BOS id {bos_id} inside document {first + doc} (token"
                f" {stray - int(starts[doc])}): the config puts BOS only at document starts,"
                " a reader splitting on BOS would see two documents"
            )
    return None

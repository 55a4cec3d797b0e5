"""What the read pass writes for near dedup, while it holds a unit's documents
(run/read_tasks.py read_unit), so that near dedup (run/neardup.py) reads neither the documents
nor, for banding, the signatures. Both files live under `_work/units/<read_key>/` (core/layout.py),
shared by the runs that read the unit the same way:

    <unit>.sig-<signature_key>.parquet  one row per document, sorted by (source, row):
        doc_id, source, row, unit_id, length (chars), sig (the low minhash.STORED_BITS of each
        of the num_perm values, little-endian, as one fixed-size binary: b-bit MinHash, compared
        by minhash.estimated_jaccard), origin, origin_rank (the named input and its position in
        `inputs`: dedup/exact.py). Read by near_fetch only, once, for units with a candidate.
    <unit>.bands-<band_key>.bin  a sectioned object (exchange/sections.py) of P + 1 sections
        (P = dedup.partitions): section p holds the rows (band_hash, position) of band partition
        p (band_rows.partition_of: a range of hashes; `bands` rows per document,
        minhash.band_hashes of the full 32-bit values, before narrowing: the candidates are those
        of 32-bit MinHash), a document named by its position in the signature file; section P
        the documents' keys in that order (band_rows.keys_encoded; near_band_group drops exact
        duplicates by them); every document, exact duplicates included; then the index. A bucket
        of consecutive partitions is one contiguous range: near_band_group reads each row once.

A done unit without either file (near dedup off when it was read, or the file deleted by
retention) is read again by the read stage (read_tasks._outputs_present): no text is kept
to sign again, and the band hashes need the full values, which the signature file no longer
holds.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.dedup import band_rows, minhash
from pipeline.dedup.exact import REMOVED_SCHEMA
from pipeline.dedup.nfc import NormalForm
from pipeline.exchange import sections

# in signature_key: files of another column set are never read as this one (a rerun signs the
# unit again)
SIGNATURE_FORMAT = "nokey"


def params_of(cfg: Config) -> minhash.MinHashParams:
    near = cfg.dedup.near
    return minhash.MinHashParams(
        ngram=near.ngram,
        num_perm=near.num_perm,
        bands=near.bands,
        rows=near.rows,
        threshold=near.threshold,
        seed=near.seed,
    )


def sig_schema(cfg: Config) -> pa.Schema:
    """The columns of a signature file (the module docstring), its signatures narrowed."""
    width = cfg.dedup.near.num_perm * minhash.STORED_BITS // 8
    return pa.schema(
        [
            ("doc_id", pa.string()),
            ("source", pa.string()),
            ("row", pa.int64()),
            ("unit_id", pa.string()),
            ("length", pa.int64()),
            ("sig", pa.binary(width)),
            ("origin", pa.string()),
            ("origin_rank", pa.int32()),
        ]
    )


def record_keys(sources: list[str], rows: list[int]) -> np.ndarray:
    pairs = zip(sources, rows, strict=True)
    keys = [xxhash.xxh3_64_intdigest(f"{s}\x00{r}".encode()) for s, r in pairs]
    return np.array(keys, dtype=np.uint64).view(np.int64)


def removed_keys(
    removals: list[list[sections.Range]], units: list[tuple[str, int, str | None]], cfg: Config
) -> dict[str, np.ndarray]:
    """Node keys of the exact duplicates of each of `units` (name, index, origin), by the rule of
    signed_rows: from the exact removals' ranges of the unit buckets that hold the units
    (dedup_stage.group_removals), one bucket's removal rows in memory at a time. A bucket at
    the group's edge also holds another group's units: their rows are dropped here."""
    origins = {unit: origin for unit, _, origin in units}
    found: dict[str, list[np.ndarray]] = {unit: [] for unit in origins}
    wanted = pa.array(list(origins), pa.string())
    for ranges in removals:
        gone = sections.read_part(ranges, REMOVED_SCHEMA)
        gone = gone.filter(pc.is_in(gone["unit_id"], value_set=wanted))
        coded = pc.dictionary_encode(gone["unit_id"].combine_chunks())
        present, codes = coded.dictionary.to_pylist(), coded.indices.to_numpy()
        sources = gone["source"].to_pylist()
        if cfg.named_sources:
            names = [cfg.source_rank(origins[u])[1].name for u in present]
            sources = [f"{names[c]}\x00{s}" for c, s in zip(codes.tolist(), sources, strict=True)]
        keys = record_keys(sources, gone["row"].to_pylist())
        # each unit's keys in row order: one sort, not a scan of the bucket's rows per unit
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(present) + 1))
        for c, unit in enumerate(present):
            found[unit].append(keys[order[bounds[c] : bounds[c + 1]]])
    return {u: np.concatenate(k) if k else np.empty(0, np.int64) for u, k in found.items()}


def sig_column(sigs: np.ndarray) -> pa.Array:
    """Signatures (uint32, or narrowed: uint16, uint8) as one fixed-size binary per row."""
    sigs = np.asarray(sigs)
    width = sigs.shape[1] * sigs.dtype.itemsize
    flat = np.ascontiguousarray(sigs, dtype=sigs.dtype.newbyteorder("<")).view(np.uint8)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(sigs), [None, pa.py_buffer(flat.reshape(-1))]
    )


def sigs_of(column: pa.ChunkedArray | pa.Array, num_perm: int) -> np.ndarray:
    """The signatures of a sig column, as the unsigned ints its width holds per value."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    dtype = f"<u{arr.type.byte_width // num_perm}"
    if len(arr) == 0:
        return np.empty((0, num_perm), dtype=dtype)
    data = np.frombuffer(arr.buffers()[1], dtype=dtype)
    return data[arr.offset * num_perm : (arr.offset + len(arr)) * num_perm].reshape(-1, num_perm)


def _signing(cfg: Config) -> str:
    """What decides a document's full 32-bit signature."""
    near = cfg.dedup.near
    return f"{near.ngram}:{near.num_perm}:{near.seed}"


def signature_key(cfg: Config) -> str:
    """What decides a document's stored signature (not bands or threshold: those act later)."""
    what = _signing(cfg)
    if minhash.STORED_BITS < 32:  # the 32-bit files' key stays theirs
        what += f":b{minhash.STORED_BITS}"
    what += f":{SIGNATURE_FORMAT}"
    return xxhash.xxh3_64_hexdigest(what.encode())[:12]


def band_key(cfg: Config) -> str:
    """What decides a document's band object: its (full) signature, the bands x rows cut and
    the band rows' format."""
    near = cfg.dedup.near
    full = xxhash.xxh3_64_hexdigest(_signing(cfg).encode())[:12]
    what = f"{full}:{near.bands}:{near.rows}:{band_rows.FORMAT}"
    return xxhash.xxh3_64_hexdigest(what.encode())[:12]


def write_unit_files(
    layout: RunLayout,
    unit: str,
    docs: pa.Table,
    cfg: Config,
    origin: str = "",
    rank: int = 0,
    known: NormalForm | None = None,
) -> None:
    """The read task's two files of a unit (the module docstring), from its documents (`known`:
    nfc.normal_form of their texts, where the caller has it)."""
    rows, keys, full = signed_rows(docs, unit, cfg, origin, rank, known)
    layout.read_sigs(unit, signature_key(cfg)).write_parquet(rows)
    write_band_object(layout.read_bands(unit, band_key(cfg)), keys, full, cfg)


def signed_rows(
    docs: pa.Table,
    unit: str,
    cfg: Config,
    origin: str = "",
    rank: int = 0,
    known: NormalForm | None = None,
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """One row per document, sorted by (source, row): ids, length and MinHash signature
    (narrowed: minhash.narrowed); the documents' keys in that order (the band object's keys
    section); and the full 32-bit signatures they were narrowed from (band hashes are made from
    those).

    The read task calls this while it holds the unit's documents, so near dedup never reads
    the documents again (layout.read_sigs)."""
    order = pc.sort_indices(docs, [("source", "ascending"), ("row", "ascending")]).to_numpy()
    if not np.array_equal(order, np.arange(len(order))):  # a read unit is in order already
        docs, known = docs.take(order), None  # `known` names rows in the order given
    sigs = minhash.signatures(docs["text"], params_of(cfg), known=known)
    sources = docs["source"].to_pylist()
    if cfg.named_sources:  # two sources may hold the same relative path
        sources = [f"{origin}\x00{s}" for s in sources]
    keys = record_keys(sources, docs["row"].to_pylist())
    n = docs.num_rows
    rows = pa.table(
        {
            "doc_id": docs["doc_id"],
            "source": docs["source"],
            "row": docs["row"],
            "unit_id": pa.array([unit] * docs.num_rows, pa.string()),
            "length": pc.utf8_length(docs["text"]).cast(pa.int64()),
            "sig": sig_column(minhash.narrowed(sigs)),
            "origin": pa.array([origin] * n, pa.string()),
            "origin_rank": pa.array([rank] * n, pa.int32()),
        }
    )
    return rows, keys, sigs


def write_band_object(loc: Location, keys: np.ndarray, sigs: np.ndarray, cfg: Config) -> int:
    """The read task's band object of a unit (exchange/sections.py, P + 1 sections): section p
    holds the rows (band_hash, position) of band partition p, a document named by its position
    in the unit's signature file (dedup/band_rows.py), section P the documents' keys in that
    order; every document, exact duplicates included. A bucket of partitions is one contiguous
    range of it, so near_band_group reads each row once."""
    params, n = params_of(cfg), cfg.dedup.partitions
    bands = minhash.band_hashes(sigs, params).reshape(-1)  # full 32-bit `sigs`, not narrowed
    positions = np.repeat(np.arange(len(keys), dtype=np.int64), params.bands)
    # sorted once: a partition is a range of hashes, so each one's rows are one stretch
    order = band_rows.row_order(bands, positions)
    bands, positions = bands[order], positions[order]
    bounds = np.searchsorted(band_rows.partition_of(bands, n), np.arange(n + 1)).tolist()
    encoded = {
        p: band_rows.encoded_sorted(bands[lo:hi], positions[lo:hi])
        for p, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
        if hi > lo
    }
    encoded[n] = band_rows.keys_encoded(keys)
    return sections.write_sections(loc, encoded, n + 1)


def unit_sigs(layout: RunLayout, unit: str, cfg: Config) -> pa.Table:
    """The unit's signature rows, as its read task wrote them (a done unit without them is read
    again: read_tasks._outputs_present)."""
    signed = layout.read_sigs(unit, signature_key(cfg))
    if not signed.exists():
        raise FileNotFoundError(
            f"{signed.uri}: the unit's signatures are missing (deleted since the read stage?);"
            " rerun the same command: the read stage signs the unit again"
        )
    return signed.read_parquet()

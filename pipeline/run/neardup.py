"""Near-duplicate removal as Ray task bodies: storage in, pure core (minhash, components), out.

No step holds all documents: every step is one task per unit or per partition, and data moves
between steps as Parquet files partitioned by a hash (or, for the component rounds, as small
int64 edge arrays in Ray's object store). A document is a node keyed by xxh3-64 of
(source, row) — with named sources (origin, source, row) — unique per record even where two
records share an id. The keep rule puts the first-listed source first (components.keep_rule).

Files under `_work/runs/<run_id>/near/` (P = dedup.partitions; a key's partition is
components.node_partition):

    sig/q<q>/<unit>.parquet   key, doc_id, source, row, unit_id, length (chars), sig (uint32 x
                              num_perm as bytes), origin, origin_rank (the named input and its
                              position in `inputs`: dedup/exact.py), for the unit's docs whose
                              key is in partition q
    bands/p<p>/<unit>.parquet band_hash uint64, key int64: the unit's band buckets in partition p
    edges/q<q>/p<p>.parquet   a, b: star edges of band partition p's buckets whose a is in q
    half/q<q>/q<r>.parquet    a, b, sig_a: edges from partition r with a's signature, b is in q
    members/l<l>/q<q>.parquet component members (label, key, doc_id, source, row, unit_id,
                              length, sig) of the components whose label is in partition l
    removed/l<l>.parquet      the near removals decided for label partition l (exact.REMOVED_SCHEMA)

Signatures are computed by the read task (stages.read_unit) while it holds a unit's documents,
into `_work/units/<read_key>/<unit>.sig-<signature_key>.parquet` (the sig/ columns, every document
of the unit); near_signatures only drops the exact duplicates and routes rows and band hashes.

Requests (M units, P partitions): near_signatures GETs 2 per unit (signatures, removals) and
PUTs 2·M·P parts (sig, bands); near_buckets GETs M·P band parts and PUTs P·P edge pieces;
near_attach, near_verify and the members step each GET about M·P signature parts and P·P edge
pieces and PUT P·P; near_keep GETs P·P. In all about 2M + 4·M·P + 3·P² GETs and
2·M·P + 3·P² + P PUTs: quadratic once P follows the corpus (see `plan --corpus-bytes`).

Steps: near_signatures (per unit) -> near_buckets (per band partition) -> near_attach (per key
partition: attach a's signature) -> near_verify (per key partition: estimated Jaccard >= threshold;
returns the verified edges routed for the first component round) -> components.star_step rounds
-> near_members (labels joined with signatures, routed by label) -> near_keep (keep rule).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from pipeline.config import Config
from pipeline.core.layout import RunLayout
from pipeline.dedup import components, minhash
from pipeline.dedup.exact import REMOVED_SCHEMA, drop_removed, split_rows
from pipeline.run.results import (
    AttachResult,
    BucketsResult,
    KeepResult,
    MembersResult,
    SignaturesResult,
    VerifyResult,
)
from pipeline.run.timer import TaskTimer

EDGE_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64())])


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


def record_keys(sources: list[str], rows: list[int]) -> np.ndarray:
    pairs = zip(sources, rows, strict=True)
    keys = [xxhash.xxh3_64_intdigest(f"{s}\x00{r}".encode()) for s, r in pairs]
    return np.array(keys, dtype=np.uint64).view(np.int64)


def _sig_table(sigs: np.ndarray) -> pa.Array:
    width = sigs.shape[1] * 4
    flat = np.ascontiguousarray(sigs, dtype="<u4").view(np.uint8).reshape(-1)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(sigs), [None, pa.py_buffer(flat)]
    )


def _sigs_of(column: pa.ChunkedArray | pa.Array, num_perm: int) -> np.ndarray:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(arr) == 0:
        return np.empty((0, num_perm), dtype=np.uint32)
    data = np.frombuffer(arr.buffers()[1], dtype="<u4")
    return data[arr.offset * num_perm : (arr.offset + len(arr)) * num_perm].reshape(-1, num_perm)


def _split_write(table: pa.Table, parts: np.ndarray, path_of) -> list[int]:
    """Write the rows of each partition to path_of(p); return the partitions written."""
    pieces = split_rows(table, parts)
    for p, rows in pieces.items():
        path_of(p).write_parquet(rows)
    return sorted(pieces)


def _read_all(locations) -> list[pa.Table]:
    return [loc.read_parquet() for loc in locations]


# -- per unit ---------------------------------------------------------------------------------
def signature_key(cfg: Config) -> str:
    """What decides a document's signature (not bands or threshold: those act later)."""
    near = cfg.dedup.near
    return xxhash.xxh3_64_hexdigest(f"{near.ngram}:{near.num_perm}:{near.seed}".encode())[:12]


def signature_rows(
    docs: pa.Table, unit: str, cfg: Config, origin: str = "", rank: int = 0
) -> pa.Table:
    """One row per document, sorted by (source, row): key, ids, length and MinHash signature.

    The read task calls this while it holds the unit's documents, so near dedup never reads
    the documents again (layout.read_sigs)."""
    docs = docs.sort_by([("source", "ascending"), ("row", "ascending")])
    sigs = minhash.signatures(docs["text"], params_of(cfg))
    sources = docs["source"].to_pylist()
    if cfg.named_sources:  # two sources may hold the same relative path
        sources = [f"{origin}\x00{s}" for s in sources]
    keys = record_keys(sources, docs["row"].to_pylist())
    n = docs.num_rows
    return pa.table(
        {
            "key": pa.array(keys, pa.int64()),
            "doc_id": docs["doc_id"],
            "source": docs["source"],
            "row": docs["row"],
            "unit_id": pa.array([unit] * docs.num_rows, pa.string()),
            "length": pc.utf8_length(docs["text"]).cast(pa.int64()),
            "sig": _sig_table(sigs),
            "origin": pa.array([origin] * n, pa.string()),
            "origin_rank": pa.array([rank] * n, pa.int32()),
        }
    )


def near_signatures(
    layout: RunLayout, unit: str, cfg: Config, origin: str | None = None
) -> SignaturesResult:
    """Route a unit's signatures (computed by its read task) and band hashes to partitions,
    without its exact duplicates. A unit read without them (near dedup off at the time, or the
    file deleted by retention) is signed here from its documents instead."""
    timer = TaskTimer()
    params, n = params_of(cfg), cfg.dedup.partitions
    with layout.exact_removed_all.open_read() as f:
        gone = pq.read_table(f, columns=["source", "row"], filters=[("unit_id", "=", unit)])
    signed = layout.read_sigs(unit, signature_key(cfg))
    if signed.exists():
        rows = signed.read_parquet()
    else:
        rank, src = cfg.source_rank(origin)
        rows = signature_rows(layout.read_docs(unit).read_parquet(), unit, cfg, src.name, rank)
    rows = drop_removed(rows, gone)
    keys = rows["key"].to_numpy()
    sigs = _sigs_of(rows["sig"], params.num_perm)
    sig_parts = _split_write(
        rows,
        components.node_partition(keys, n),
        lambda q: layout.near_sig(q, unit),
    )
    bands = minhash.band_hashes(sigs, params)
    band_rows = pa.table(
        {
            "band_hash": pa.array(bands.reshape(-1), pa.uint64()),
            "key": pa.array(np.repeat(keys, bands.shape[1]), pa.int64()),
        }
    )
    band_parts = _split_write(
        band_rows,
        (bands.reshape(-1) % np.uint64(n)).astype(np.int64),
        lambda p: layout.near_bands(p, unit),
    )
    return timer.result(
        SignaturesResult,
        unit=unit,
        docs=rows.num_rows,
        sig_parts=sig_parts,
        band_parts=band_parts,
    )


# -- per partition ----------------------------------------------------------------------------
def near_buckets(layout: RunLayout, part: int, units: list[str], n: int) -> BucketsResult:
    """Star edges (bucket head, member) of this band partition's buckets, routed by head."""
    timer = TaskTimer()
    tables = _read_all(layout.near_bands(part, u) for u in units)
    rows = pa.concat_tables(tables) if tables else pa.table({"band_hash": [], "key": []})
    edges = (
        minhash.star_edges(rows["band_hash"].to_numpy(), rows["key"].to_numpy())
        if rows.num_rows
        else minhash.EMPTY_EDGES
    )
    table = pa.table({"a": edges[:, 0], "b": edges[:, 1]}, schema=EDGE_SCHEMA)
    written = _split_write(
        table,
        components.node_partition(edges[:, 0], n),
        lambda q: layout.near_edges(q, part),
    )
    return timer.result(BucketsResult, part=part, candidates=len(edges), parts=written)


def _load_sigs(layout: RunLayout, q: int, units: list[str]) -> pa.Table:
    tables = _read_all(layout.near_sig(q, u) for u in units)
    return pa.concat_tables(tables).sort_by("key") if tables else None


def _lookup(sig_rows: pa.Table, keys: np.ndarray, num_perm: int) -> np.ndarray:
    table_keys = sig_rows["key"].to_numpy()
    idx = np.searchsorted(table_keys, keys)
    if len(keys) and (idx.max() >= len(table_keys) or (table_keys[idx] != keys).any()):
        raise RuntimeError("near dedup: an edge names a document without a signature")
    return _sigs_of(sig_rows["sig"], num_perm)[idx]


def near_attach(
    layout: RunLayout, q: int, sources: list[int], units: list[str], cfg: Config
) -> AttachResult:
    """Give each edge whose a lives in partition q a's signature; route it to b's partition."""
    timer = TaskTimer()
    n, num_perm = cfg.dedup.partitions, cfg.dedup.near.num_perm
    edges = _read_all(layout.near_edges(q, p) for p in sources)
    if not edges:
        return timer.result(AttachResult, part=q, edges=0, parts=[])
    table = pa.concat_tables(edges)
    a, b = table["a"].to_numpy(), table["b"].to_numpy()
    sig_a = _lookup(_load_sigs(layout, q, units), a, num_perm)
    out = pa.table({"a": a, "b": b, "sig_a": _sig_table(sig_a)})
    written = _split_write(
        out,
        components.node_partition(b, n),
        lambda r: layout.near_half(r, q),
    )
    return timer.result(AttachResult, part=q, edges=len(a), parts=written)


def near_verify(
    layout: RunLayout, q: int, sources: list[int], units: list[str], cfg: Config
) -> tuple:
    """Edges whose estimated Jaccard reaches the threshold, routed for the first star round.

    Returns (VerifyResult, piece_0, ..., piece_{P-1}) so that the pieces stay in the object store.
    """
    timer = TaskTimer()
    n, near = cfg.dedup.partitions, cfg.dedup.near
    halves = _read_all(layout.near_half(q, r) for r in sources)
    verified = components.EMPTY_EDGES
    if halves:
        table = pa.concat_tables(halves)
        a, b = table["a"].to_numpy(), table["b"].to_numpy()
        sig_b = _lookup(_load_sigs(layout, q, units), b, near.num_perm)
        sims = minhash.estimated_jaccard(_sigs_of(table["sig_a"], near.num_perm), sig_b)
        close = np.asarray(sims) >= near.threshold
        verified = np.stack([a[close], b[close]], axis=1)
    pieces = components.route(components.undirected(verified), n)
    return (timer.result(VerifyResult, part=q, verified=len(verified)), *pieces)


def near_members(
    layout: RunLayout, q: int, pieces: list[np.ndarray], units: list[str], cfg: Config
) -> MembersResult:
    """Component labels of partition q's nodes, joined with their signatures, routed by label."""
    timer = TaskTimer()
    n = cfg.dedup.partitions
    nodes, labels = components.star_labels(pieces)
    if not len(nodes):
        return timer.result(MembersResult, part=q, members=0, parts=[])
    sig_rows = _load_sigs(layout, q, units)
    idx = np.searchsorted(sig_rows["key"].to_numpy(), nodes)
    members = sig_rows.take(pa.array(idx)).append_column("label", pa.array(labels, pa.int64()))
    written = _split_write(
        members,
        components.node_partition(labels, n),
        lambda lp: layout.near_members(lp, q),
    )
    return timer.result(MembersResult, part=q, members=len(nodes), parts=written)


def near_keep(layout: RunLayout, lp: int, sources: list[int], cfg: Config) -> KeepResult:
    """The keep rule over whole components (all members of a label are in this partition)."""
    timer = TaskTimer()
    near = cfg.dedup.near
    tables = _read_all(layout.near_members(lp, q) for q in sources)
    out = layout.near_removed(lp)
    if not tables:
        out.write_parquet(REMOVED_SCHEMA.empty_table())
        return timer.result(KeepResult, part=lp, removed=0)
    m = pa.concat_tables(tables).sort_by("key")
    # a composite id orders like (doc_id, source, row) and is unique per record
    composite = [
        f"{d}\x00{s}\x00{r:020d}"
        for d, s, r in zip(
            m["doc_id"].to_pylist(), m["source"].to_pylist(), m["row"].to_pylist(), strict=True
        )
    ]
    decided = components.keep_rule(
        composite,
        m["length"].to_numpy(),
        _sigs_of(m["sig"], near.num_perm),
        m["label"].to_numpy(),
        near.threshold,
        m["origin_rank"].to_numpy(),
    )
    row_of = {c: i for i, c in enumerate(composite)}
    gone = np.array([row_of[c] for c in decided["doc_id"].to_pylist()], dtype=np.int64)
    kept = np.array([row_of[c] for c in decided["kept_id"].to_pylist()], dtype=np.int64)
    g, k = m.take(pa.array(gone)), m.take(pa.array(kept))
    removed = pa.table(
        {
            "doc_id": g["doc_id"],
            "source": g["source"],
            "row": g["row"],
            "unit_id": g["unit_id"],
            "rule": pa.array(["near"] * len(gone), pa.string()),
            "kept_id": k["doc_id"],
            "kept_source": k["source"],
            "kept_row": k["row"],
            "similarity": decided["similarity"],
            "origin": g["origin"],
            "kept_origin": k["origin"],
        },
        schema=REMOVED_SCHEMA,
    )
    out.write_parquet(removed)
    return timer.result(KeepResult, part=lp, removed=len(gone))


def star_task(kind: str, n: int, *pieces: np.ndarray) -> tuple:
    """One partition's large- or small-star step; pieces arrive as separate (resolved) args."""
    result = components.star_step(kind, pieces, n)
    return (result.fingerprint, *result.outgoing)


def members_task(
    layout: RunLayout, q: int, units: list[str], cfg: Config, *pieces: np.ndarray
) -> MembersResult:
    return near_members(layout, q, list(pieces), units, cfg)

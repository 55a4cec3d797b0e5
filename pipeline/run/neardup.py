"""Near-duplicate removal as Ray task bodies: storage in, pure core (minhash, components), out.

No step holds all documents: every step is one task per unit or per partition, and data moves
between steps as sectioned Arrow IPC objects, one section per hash partition
(formats/sectioned.py), or, for the component rounds, as small int64 edge arrays in Ray's object
store. A document is a node keyed by xxh3-64 of
(source, row) — with named sources (origin, source, row) — unique per record even where two
records share an id. The keep rule puts the first-listed source first (components.keep_rule).

Files under `_work/runs/<run_id>/near/` (P = dedup.partitions; a key's partition is
components.node_partition). Every step writes ONE object per task, sectioned by the partition
its rows go to (formats/sectioned.py); the driver regroups each set of objects
(run/dedup_stage.py, whose tasks are in run/exchange.py) and a reader GETs one range per writer
group:

    sig/<unit>.bin       by key partition q: key, doc_id, source, row, unit_id, length (chars),
                         sig (uint32 x num_perm as bytes), origin, origin_rank (the named input
                         and its position in `inputs`: dedup/exact.py) of the unit's docs (exact
                         dups dropped)
    bands/<unit>.bin     by band partition p: band_hash uint64, key int64
    edges/p<p>.bin       by q: a, b: star edges of band partition p's buckets whose a is in q
    half/q<r>.bin        by q: a, b, sig_a: edges from partition r with a's signature, b in q
    members/q<q>.bin     by label partition l: component members (label, key, doc_id, source,
                         row, unit_id, length, sig) of partition q's nodes
    removed/l<l>.bin     by unit bucket: the near removals of label partition l
                         (exact.REMOVED_SCHEMA; the audit merges them bucket by bucket)

Signatures are computed by the read task (stages.read_unit) while it holds a unit's documents,
into `_work/units/<read_key>/<unit>.sig-<signature_key>.parquet` (the sig/ columns, every document
of the unit); near_signatures only drops the exact duplicates and routes rows and band hashes.

Requests (M units, P partitions, each exchange cut into G groups x K buckets by
formats/sectioned.exchange_plan from its sizes, not from the corpus): near_signatures GETs 2 per
unit (signatures, removals) and PUTs 2 objects; the sig and band exchanges GET M·K ranges each
(twice that with the writers' index reads when K > 1) and PUT G·K objects; near_buckets,
near_attach, near_members and near_keep each PUT one object per partition, and those four
exchanges GET P·K ranges each; every partition reader GETs one range per group: near_buckets G,
near_attach 2G, near_verify 2G, near_members G, near_keep G; the audit G per unit bucket. In all
about 2M + 2M·K + 4P·K + 7P·G GETs and 2M + 4P + 6G·K (+ markers) PUTs: linear in the corpus.

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
from pipeline.dedup.exact import REMOVED_SCHEMA, drop_removed
from pipeline.formats import sectioned
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


def _sections(table: pa.Table, parts: np.ndarray, loc, n: int) -> list[int]:
    """`table` as one object at `loc`, sectioned by each row's partition (0..n-1)."""
    return sectioned.write_sectioned(loc, table, parts, n)


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
    order = pc.sort_indices(docs, [("source", "ascending"), ("row", "ascending")]).to_numpy()
    if not np.array_equal(order, np.arange(len(order))):  # a read unit is in order already
        docs = docs.take(order)
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
    sig_size = _sections(rows, components.node_partition(keys, n), layout.near_sig(unit), n)
    bands = minhash.band_hashes(sigs, params)
    band_rows = pa.table(
        {
            "band_hash": pa.array(bands.reshape(-1), pa.uint64()),
            "key": pa.array(np.repeat(keys, bands.shape[1]), pa.int64()),
        }
    )
    band_parts = (bands.reshape(-1) % np.uint64(n)).astype(np.int64)
    band_size = _sections(band_rows, band_parts, layout.near_bands(unit), n)
    return timer.result(
        SignaturesResult,
        unit=unit,
        docs=rows.num_rows,
        sig_size=sig_size,
        band_size=band_size,
    )


# -- per partition ----------------------------------------------------------------------------
Ranges = list[sectioned.Range]  # one partition's ranges of an exchange (one GET per group)
BAND_SCHEMA = pa.schema([("band_hash", pa.uint64()), ("key", pa.int64())])


def near_buckets(layout: RunLayout, part: int, bands: Ranges, n: int) -> BucketsResult:
    """Star edges (bucket head, member) of this band partition's buckets, routed by head."""
    timer = TaskTimer()
    rows = sectioned.read_part(bands, BAND_SCHEMA)
    edges = (
        minhash.star_edges(rows["band_hash"].to_numpy(), rows["key"].to_numpy())
        if rows.num_rows
        else minhash.EMPTY_EDGES
    )
    table = pa.table({"a": edges[:, 0], "b": edges[:, 1]}, schema=EDGE_SCHEMA)
    size = _sections(table, components.node_partition(edges[:, 0], n), layout.near_edges(part), n)
    return timer.result(BucketsResult, part=part, candidates=len(edges), size=size)


def _load_sigs(sigs: Ranges) -> pa.Table | None:
    if not sigs:
        return None
    return sectioned.read_part(sigs, pa.schema([])).sort_by("key")


def _lookup(sig_rows: pa.Table | None, keys: np.ndarray, num_perm: int) -> np.ndarray:
    if sig_rows is None:
        if len(keys):
            raise RuntimeError("near dedup: an edge names a document without a signature")
        return np.empty((0, num_perm), dtype=np.uint32)
    table_keys = sig_rows["key"].to_numpy()
    idx = np.searchsorted(table_keys, keys)
    if len(keys) and (idx.max() >= len(table_keys) or (table_keys[idx] != keys).any()):
        raise RuntimeError("near dedup: an edge names a document without a signature")
    return _sigs_of(sig_rows["sig"], num_perm)[idx]


def near_attach(
    layout: RunLayout, q: int, edges: Ranges, sigs: Ranges, cfg: Config
) -> AttachResult:
    """Give each edge whose a lives in partition q a's signature; route it to b's partition."""
    timer = TaskTimer()
    n, num_perm = cfg.dedup.partitions, cfg.dedup.near.num_perm
    table = sectioned.read_part(edges, EDGE_SCHEMA)
    a, b = table["a"].to_numpy(), table["b"].to_numpy()
    sig_a = _lookup(_load_sigs(sigs) if len(a) else None, a, num_perm)
    out = pa.table({"a": a, "b": b, "sig_a": _sig_table(sig_a)})
    size = _sections(out, components.node_partition(b, n), layout.near_half(q), n)
    return timer.result(AttachResult, part=q, edges=len(a), size=size)


def near_verify(layout: RunLayout, q: int, halves: Ranges, sigs: Ranges, cfg: Config) -> tuple:
    """Edges whose estimated Jaccard reaches the threshold, routed for the first star round.

    Returns (VerifyResult, piece_0, ..., piece_{P-1}) so that the pieces stay in the object store.
    """
    timer = TaskTimer()
    n, near = cfg.dedup.partitions, cfg.dedup.near
    verified = components.EMPTY_EDGES
    if halves:
        table = sectioned.read_part(halves, pa.schema([]))
        a, b = table["a"].to_numpy(), table["b"].to_numpy()
        sig_b = _lookup(_load_sigs(sigs), b, near.num_perm)
        sims = minhash.estimated_jaccard(_sigs_of(table["sig_a"], near.num_perm), sig_b)
        close = np.asarray(sims) >= near.threshold
        verified = np.stack([a[close], b[close]], axis=1)
    pieces = components.route(components.undirected(verified), n)
    return (timer.result(VerifyResult, part=q, verified=len(verified)), *pieces)


def near_members(
    layout: RunLayout, q: int, pieces: list[np.ndarray], sigs: Ranges, cfg: Config
) -> MembersResult:
    """Component labels of partition q's nodes, joined with their signatures, routed by label."""
    timer = TaskTimer()
    n = cfg.dedup.partitions
    nodes, labels = components.star_labels(pieces)
    if not len(nodes):
        size = _sections(pa.table({}), np.empty(0, np.int64), layout.near_members(q), n)
        return timer.result(MembersResult, part=q, members=0, size=size)
    sig_rows = _load_sigs(sigs)
    idx = np.searchsorted(sig_rows["key"].to_numpy(), nodes)
    members = sig_rows.take(pa.array(idx)).append_column("label", pa.array(labels, pa.int64()))
    size = _sections(members, components.node_partition(labels, n), layout.near_members(q), n)
    return timer.result(MembersResult, part=q, members=len(nodes), size=size)


def near_keep(
    layout: RunLayout, lp: int, members: Ranges, bounds: list[str], cfg: Config
) -> KeepResult:
    """The keep rule over whole components (all members of a label are in this partition);
    the removals go out sectioned by unit bucket (`bounds`, formats/sectioned.unit_bounds)."""
    timer = TaskTimer()
    near = cfg.dedup.near
    removed = _keep(sectioned.read_part(members, pa.schema([])), near) if members else None
    if removed is None:
        removed = REMOVED_SCHEMA.empty_table()
    buckets = sectioned.unit_bucket(bounds, removed.column("unit_id"))
    size = _sections(removed, buckets, layout.near_removed(lp), len(bounds))
    return timer.result(KeepResult, part=lp, removed=removed.num_rows, size=size)


def _keep(m: pa.Table, near) -> pa.Table:
    """The removals the keep rule decides among the members `m` (whole components)."""
    m = m.sort_by("key")
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
    return removed


def star_task(kind: str, n: int, *pieces: np.ndarray) -> tuple:
    """One partition's large- or small-star step; pieces arrive as separate (resolved) args."""
    result = components.star_step(kind, pieces, n)
    return (result.fingerprint, *result.outgoing)


def members_task(
    layout: RunLayout, q: int, sigs: Ranges, cfg: Config, *pieces: np.ndarray
) -> MembersResult:
    return near_members(layout, q, list(pieces), sigs, cfg)

"""Near-duplicate removal as Ray task bodies: storage in, pure core (minhash, components), out.

Steps: near_band_group (per unit group and band bucket) -> near_buckets (per band partition:
star edges) -> components.star_step rounds over the candidate edges (one star_fold task when
they are few) -> near_members (per key
partition: requests by unit bucket, edges by label) -> near_fetch (per run of unit buckets:
candidates' signature rows, by label) -> near_keep (per label partition: verify, components,
keep rule).

Contract: no step holds all documents (one task per unit, bucket or partition; one candidate
component per task); a signature is read once, and only a candidate's crosses an exchange;
candidate edges stay in Ray's object store; every request count is linear in the corpus; the
decisions do not depend on worker or unit counts.
The steps in prose: docs/dedup.md; the objects and request counts: docs/formats.md,
"Near dedup: the exchange objects".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.dedup import band_rows, components, minhash
from pipeline.dedup.edges import EMPTY_EDGES, star_edges, unique_edges
from pipeline.dedup.exact import REMOVED_SCHEMA
from pipeline.exchange import sections
from pipeline.exchange.plan import ExchangePlan
from pipeline.exchange.regroup import (
    Section,
    grouped,
    merging,
    row_sections,
    sectioned,
    span_piece,
)
from pipeline.run.near_signing import band_key, removed_keys, sig_schema, sigs_of, unit_sigs
from pipeline.run.results import (
    BandGroupResult,
    BucketsResult,
    FetchResult,
    KeepResult,
    MembersResult,
)
from pipeline.run.timer import TaskTimer

Ranges = list[sections.Range]  # one partition's ranges of an exchange (one GET per group)


def _sections(table: pa.Table, parts: np.ndarray, loc, n: int) -> int:
    """`table` as one object at `loc`, sectioned by each row's partition (0..n-1); its size."""
    return sections.write_sectioned(loc, table, parts, n)


# The band exchange's folder (layout.exchange): the band rows' format names it, so that a rerun
# never reuses pass-1 objects of another format.
BAND_EXCHANGE = f"bands-{band_rows.FORMAT}"


def _raw_bands(hashes: np.ndarray, keys: np.ndarray) -> bytes:
    """A unit's band rows of one partition as pass 1 spills them (its local temporary file,
    never storage): (band hash, node id) pairs, int64 little-endian, so that joining units'
    bytes joins their rows."""
    return np.stack([hashes.view(np.int64), keys], axis=1).astype("<i8").tobytes()


def _merged_bands(chunks) -> list[bytes]:
    """A band partition's section of a group's object: its units' rows (`_raw_bands`) encoded
    once (dedup/band_rows.py: the bytes depend only on the set of rows)."""
    rows = np.frombuffer(b"".join(chunks), "<i8").reshape(-1, 2)
    return [band_rows.arrays_encoded(rows[:, 0].view(np.uint64), rows[:, 1])] if len(rows) else []


BANDS = merging(_merged_bands)  # pass 1 of the band exchange


# -- per unit group ---------------------------------------------------------------------------
def cand_schema(cfg: Config) -> pa.Schema:
    """A candidate's row in near_fetch's exchange: its node id (`key`), its signature row, then
    its label."""
    return pa.schema([("key", pa.int64()), *sig_schema(cfg), ("label", pa.int64())])


UNIT_SHIFT = np.int64(32)
POSITION_MASK = np.int64(2**32 - 1)


def node_ids(unit_index: int, positions: np.ndarray) -> np.ndarray:
    """A document's node id: its unit's index in document order (read_stage.Units.
    document_order: source rank, path, offset, whatever the unit size), then its position in
    the unit's signature file (unit << 32 | position): near_fetch finds it there, no lookup;
    a bucket's head, its smallest node id, is thus the same document in any unit layout."""
    return (np.int64(unit_index) << UNIT_SHIFT) | positions.astype(np.int64)


def _unit_bands(
    layout: RunLayout,
    unit: str,
    index: int,
    span: range,
    whole: bool,
    cfg: Config,
    removed: np.ndarray,
) -> tuple[list[Section], int]:
    """The unit's band rows (band_hash, node id) of the band partitions in `span` as its piece
    of pass 1 (`_raw_bands` per partition, None where it has none), without its exact
    duplicates (`removed`: their keys), and its document count after them: one range of its
    band object and its keys section (the whole object in one GET when `whole`), written by its
    read task (run/near_signing.write_band_object)."""
    n = cfg.dedup.partitions
    loc = layout.read_bands(unit, band_key(cfg))
    try:
        size = loc.size()
    except FileNotFoundError:  # deleted since the read stage, which makes it again
        raise FileNotFoundError(
            f"{loc.uri}: the unit's band object is missing (deleted since the read stage?);"
            " rerun the same command: the read stage signs the unit again"
        ) from None
    piece, offsets = sections.read_bucket(sections.SectionedObject(loc, size), span, n + 1, whole)
    a = int(offsets[span.start])
    keys_at = int(offsets[n]), int(offsets[n + 1])
    keys = band_rows.keys_decoded(
        piece[keys_at[0] : keys_at[1]] if whole else loc.read_bytes(*keys_at)
    )
    gone = np.isin(keys, removed)  # by position
    sections_out: list[Section] = []
    for p in span:
        lo, hi = int(offsets[p]) - a, int(offsets[p + 1]) - a
        hashes, positions = band_rows.arrays_decoded(piece[lo:hi])
        kept = ~gone[positions]
        rows = (_raw_bands(hashes[kept], node_ids(index, positions[kept])),) if kept.any() else None
        sections_out.append(rows)
    return sections_out, len(keys) - int(gone.sum())


def near_band_group(
    layout: RunLayout,
    plan: ExchangePlan,
    group: int,
    bucket: int,
    units: list[tuple[str, int, str | None]],
    removals: list[Ranges],
    cfg: Config,
) -> BandGroupResult:
    """Pass 1 of the band exchange, made from the band files themselves: for one group of units
    (name, index in document order, origin), their band rows (band_hash, node id)
    of the bucket's band partitions as one object laid out partition by partition
    (exchange/regroup.grouped), without their exact duplicates: `removals`, the exact removals'
    ranges of each unit bucket that holds the group's units (dedup_stage.group_removals), read
    once per task, so their GETs are those buckets' ranges, not a read per unit. The task holds
    one bucket's removal rows at a time and its units' removed keys (8 bytes each). The
    signatures are not read here (near_fetch reads candidates')."""
    timer = TaskTimer()
    span = plan.bucket_parts(bucket)
    folder = layout.exchange("near", BAND_EXCHANGE) / plan.name
    removed = removed_keys(removals, units, cfg)
    docs = 0

    def band_pieces():
        nonlocal docs
        for unit, index, _ in units:
            piece, kept = _unit_bands(
                layout, unit, index, span, plan.buckets == 1, cfg, removed[unit]
            )
            docs += kept
            yield piece

    bands = grouped(folder, plan, group, bucket, BANDS, band_pieces())
    return timer.result(
        BandGroupResult, group=group, bucket=bucket, docs=docs, bands=bands, reused=bands.reused
    )


# -- per partition ----------------------------------------------------------------------------
REQUEST_SCHEMA = pa.schema([("key", pa.int64()), ("label", pa.int64()), ("unit", pa.int32())])


def near_buckets(part: int, bands: Ranges, n: int) -> tuple:
    """Star edges (bucket head, member) of this band partition's buckets: the candidate pairs,
    both ways, routed by key partition for the component rounds (components.route).

    Returns (BucketsResult, piece_0, ..., piece_{n-1}) so that the pieces stay in the object
    store: the star rounds and near_members read them, storage never holds them."""
    timer = TaskTimer()
    rows = [band_rows.arrays_decoded(data) for data in sections.fetched(bands)]
    hashes = np.concatenate([h for h, _ in rows]) if rows else np.empty(0, np.uint64)
    keys = np.concatenate([k for _, k in rows]) if rows else np.empty(0, np.int64)
    edges = star_edges(hashes, keys)
    pieces = components.route(components.undirected(edges), n)
    return (timer.result(BucketsResult, part=part, candidates=len(edges)), *pieces)


def near_members(
    layout: RunLayout,
    q: int,
    labelled: list[np.ndarray],
    candidates: list[np.ndarray],
    unit_buckets: np.ndarray,
    n: int,
) -> tuple:
    """Candidate components of partition q's nodes (labels from the rounds over the unverified
    candidate edges): a request (key, label, unit) per node, to the unit bucket of its unit
    (near_fetch reads its signature there), and each candidate edge (a, b) whose a is here, to
    the partition of its label (where near_keep verifies it).

    Returns (MembersResult, edges_0, ..., edges_{n-1}); the edges stay in the object store."""
    timer = TaskTimer()
    nodes, labels = components.star_labels(labelled)
    units = (nodes >> UNIT_SHIFT).astype(np.int64)  # node_ids
    requests = pa.table(
        {"key": nodes, "label": labels, "unit": pa.array(units, pa.int32())},
        schema=REQUEST_SCHEMA,
    )
    # the unit buckets: as many as the last bucket's number; no unit: unit_bounds' one bucket
    buckets = int(unit_buckets.max()) + 1 if len(unit_buckets) else 1
    size = _sections(requests, unit_buckets[units], layout.near_requests(q), buckets)
    edges = np.concatenate(candidates) if candidates else EMPTY_EDGES
    edges = edges[edges[:, 0] < edges[:, 1]]  # each pair once: from its smaller key's side
    edge_labels = labels[np.searchsorted(nodes, edges[:, 0])] if len(edges) else edges[:, 0]
    pieces = [
        edges[parts == p] for parts in [components.node_partition(edge_labels, n)] for p in range(n)
    ]
    result = timer.result(MembersResult, part=q, members=len(nodes), size=size)
    return (result, *pieces)


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """values[i] for the keys[i] equal to each wanted key; every wanted key must be there."""
    order = np.argsort(keys, kind="stable")
    idx = np.searchsorted(keys, wanted, sorter=order)
    if len(wanted) and (
        idx.max() >= len(keys) or (keys[order[np.minimum(idx, len(keys) - 1)]] != wanted).any()
    ):
        raise RuntimeError("near dedup: an edge names a document its candidates lack")
    return values[order[idx]] if len(wanted) else values[:0]


# signature files one near_fetch task reads ahead of the one it takes the rows of
SIG_FILES_AHEAD = 4


def near_fetch(
    layout: RunLayout,
    task: int,
    requests: Ranges,
    unit_ids: list[str],
    cfg: Config,
) -> FetchResult:
    """The signature rows of the candidates of this task's units (a run of unit buckets), each
    unit's file read once (units without a candidate: not at all), with their candidate label,
    routed by label: one sectioned object, each unit's rows spilled to local disk as they come
    (exchange/regroup.sectioned), so that memory holds a few signature files, not the task's
    candidates."""
    timer = TaskTimer()
    n = cfg.dedup.partitions
    wanted = sections.read_part(requests, REQUEST_SCHEMA)
    keys, labels = wanted["key"].to_numpy(), wanted["label"].to_numpy()
    # each unit's requests, in request order: one sort, not a scan of all requests per unit
    order = np.argsort(wanted["unit"].to_numpy(), kind="stable")
    units, starts = np.unique(wanted["unit"].to_numpy()[order], return_index=True)
    read, ends = units.tolist(), [*starts[1:].tolist(), len(order)]

    def pieces():
        with ThreadPoolExecutor(SIG_FILES_AHEAD) as pool:
            first = read[:SIG_FILES_AHEAD]
            ahead = [pool.submit(unit_sigs, layout, unit_ids[u], cfg) for u in first]
            for i, u in enumerate(read):
                rows = ahead[i].result()
                ahead[i] = None  # its rows are let go once routed
                if i + SIG_FILES_AHEAD < len(read):
                    unit = unit_ids[read[i + SIG_FILES_AHEAD]]
                    ahead.append(pool.submit(unit_sigs, layout, unit, cfg))
                mine = order[starts[i] : ends[i]]
                yield _unit_candidates(rows, keys, labels, mine, unit_ids[u], cfg, n)

    codec = row_sections(cand_schema(cfg), raw=True)
    size = sectioned(layout.near_cands(task), n, codec, pieces())
    return timer.result(
        FetchResult, part=task, size=size, units_read=len(read), members=len(keys)
    )


def _unit_candidates(
    rows: pa.Table, keys, labels, mine: np.ndarray, unit: str, cfg: Config, n: int
) -> list:
    """One unit's candidates' signature rows with their node key and label, as a piece of its
    fetch task's object (sections by label partition)."""
    positions = keys[mine] & POSITION_MASK  # node_ids
    if len(positions) and positions.max() >= rows.num_rows:
        raise RuntimeError(f"near dedup: unit {unit} lacks a candidate's signature")
    rows = rows.take(pa.array(positions))
    rows = rows.add_column(0, "key", pa.array(keys[mine], pa.int64()))
    table = rows.append_column("label", pa.array(labels[mine], pa.int64())).cast(cand_schema(cfg))
    return span_piece(table, components.node_partition(labels[mine], n), range(n))


def near_keep(
    layout: RunLayout,
    lp: int,
    members: Ranges,
    bounds: list[str],
    cfg: Config,
    *edges: np.ndarray,
) -> KeepResult:
    """Verify the candidate edges of this label partition's candidate components (estimated
    Jaccard of the two signatures >= threshold), their connected components (label = smallest
    key), then the keep rule over them; the removals go out sectioned by unit bucket (`bounds`,
    exchange/sections.unit_bounds). A candidate component holds every verified component it
    contains, so each decision is made with all of its members here."""
    timer = TaskTimer()
    near = cfg.dedup.near
    pairs = unique_edges(np.concatenate(edges)) if edges else EMPTY_EDGES
    removed, verified = None, 0
    if len(pairs):
        m = sections.read_part(members, cand_schema(cfg)).sort_by("key")
        keys, sigs = m["key"].to_numpy(), sigs_of(m["sig"], near.num_perm)
        rows = _lookup(keys, np.arange(len(keys)), pairs.reshape(-1)).reshape(-1, 2)
        sims = np.asarray(minhash.estimated_jaccard(sigs[rows[:, 0]], sigs[rows[:, 1]]))
        close = pairs[sims >= near.threshold]
        verified = len(close)
        if verified:
            nodes, labels = components.local_components(close)
            m = m.take(pa.array(np.searchsorted(keys, nodes)))
            m = m.set_column(m.schema.get_field_index("label"), "label", pa.array(labels))
            removed = _keep(m, near)
    if removed is None:
        removed = REMOVED_SCHEMA.empty_table()
    buckets = sections.unit_bucket(bounds, removed.column("unit_id"))
    size = _sections(removed, buckets, layout.near_removed(lp), len(bounds))
    return timer.result(KeepResult, part=lp, verified=verified, removed=removed.num_rows, size=size)


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
        sigs_of(m["sig"], near.num_perm),
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


# Candidate edges (one way) that one task labels itself instead of star rounds across tasks:
# ~64 MB of edges both ways at most, labelled in seconds, where the rounds would cost a wave
# of tasks and a driver round trip each; and the pieces it takes (P x P object refs).
FOLD_EDGES = 2**21
FOLD_PIECES = 4096


def folds(edges: int, n: int) -> bool:
    """Whether `edges` candidate edges routed to `n` partitions are labelled by star_fold."""
    return edges <= FOLD_EDGES and n * n <= FOLD_PIECES


def star_fold(n: int, *pieces: np.ndarray) -> tuple:
    """The star rounds' outcome in one task (components.folded_stars) for a candidate graph of
    at most FOLD_EDGES edges: (edge count, piece_0, ..., piece_{n-1}), one piece per partition
    where the rounds leave several."""
    stars = components.folded_stars(pieces, n)
    return (sum(len(p) for p in stars), *stars)


def star_task(kind: str, n: int, *pieces: np.ndarray) -> tuple:
    """One partition's large- or small-star step; pieces arrive as separate (resolved) args."""
    result = components.star_step(kind, pieces, n)
    return (result.fingerprint, *result.outgoing)


def members_task(
    layout: RunLayout,
    q: int,
    unit_buckets: np.ndarray,
    n: int,
    labelled: int,
    *pieces: np.ndarray,
) -> tuple:
    """near_members with its pieces as separate (resolved) args: `labelled` of the last star
    round's, then the candidate edges near_buckets routed here."""
    return near_members(
        layout, q, list(pieces[:labelled]), list(pieces[labelled:]), unit_buckets, n
    )

"""Connected components of the near-duplicate graph, and which member of each one is kept (pure).

Nothing here needs all documents in one process. Graphs are int64 edge arrays of shape (k, 2);
node keys are int64 (``node_keys`` turns doc ids into keys). Components come from the alternating
large-star / small-star algorithm (Kiveris et al., "Connected Components in MapReduce and Beyond",
SoCC 2014): each step only needs, for every node, its own neighbour list, so edges are partitioned
by their source node and a step is one independent task per partition whose output is routed by
partition to the next step. It converges in O(log^2 n) rounds to one star per component whose
centre is the component's smallest key, and the edge count never grows.

A caller with a cluster runs `star_step` per partition (e.g. one Ray task each, passing the routed
pieces between them) and stops when the summed fingerprints of two successive large-star inputs
agree; `connected_components` is that loop with a pluggable ``map_fn`` (builtin ``map`` by default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline.dedup.edges import EMPTY_EDGES, candidate_pairs, unique_edges
from pipeline.dedup.minhash import (
    DEFAULT_PARAMS,
    MinHashParams,
    band_hashes,
    estimated_jaccard,
    fmix64,
    narrowed,
    signatures,
    verified_edges,
)


def node_keys(doc_ids: Iterable[str]) -> np.ndarray:
    """int64 key of each doc id (xxh3_64, reinterpreted as signed): collisions ~ n^2 / 2^65."""
    hashes = [xxhash.xxh3_64_intdigest(d.encode("utf-8")) for d in doc_ids]
    return np.array(hashes, dtype=np.uint64).view(np.int64)


def node_partition(nodes: np.ndarray, num_partitions: int) -> np.ndarray:
    """Partition of each node key: mixed first, so sequential keys spread evenly."""
    return (
        fmix64(np.asarray(nodes, dtype=np.int64).view(np.uint64)) % np.uint64(num_partitions)
    ).astype(np.int64)


def route(edges: np.ndarray, num_partitions: int) -> list[np.ndarray]:
    """Edges split by the partition of their source node (edges[:, 0])."""
    owner = node_partition(edges[:, 0], num_partitions)
    order = np.argsort(owner, kind="stable")
    bounds = np.cumsum(np.bincount(owner, minlength=num_partitions))[:-1]
    return np.split(edges[order], bounds)


def undirected(edges: np.ndarray) -> np.ndarray:
    """Both directions of every edge, self-loops dropped, sorted and unique."""
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    edges = edges[edges[:, 0] != edges[:, 1]]
    return unique_edges(np.concatenate([edges, edges[:, ::-1]]))


def _groups(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For sorted unique edges: source, neighbour, and smallest neighbour of each edge's source."""
    u, v = edges[:, 0], edges[:, 1]
    starts = np.concatenate(([True], u[1:] != u[:-1]))
    smallest_neighbour = v[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    return u, v, smallest_neighbour


def large_star(edges: np.ndarray) -> np.ndarray:
    """Link every larger neighbour of u to m(u) = min(u, neighbours of u).

    ``edges`` must hold every directed edge (u, *) of each source u it contains (both directions
    stored), sorted and unique. Returns both directions of the new undirected edges.
    """
    u, v, smallest = _groups(edges)
    larger = v > u
    new = np.stack([v[larger], np.minimum(u, smallest)[larger]], axis=1)
    return np.concatenate([new, new[:, ::-1]])


def small_star(edges: np.ndarray) -> np.ndarray:
    """Link u and each of its smaller neighbours to the smallest of them (same input contract)."""
    u, v, smallest = _groups(edges)
    first = np.concatenate(([True], u[1:] != u[:-1]))
    has_smaller = smallest < u  # neighbours are sorted: the smallest one comes first
    link = (v < u) & (v != smallest)
    centre = first & has_smaller
    new = np.concatenate(
        [np.stack([v[link], smallest[link]], axis=1), np.stack([u[centre], v[centre]], axis=1)]
    )
    return np.concatenate([new, new[:, ::-1]])


def fingerprint(edges: np.ndarray) -> tuple[int, int]:
    """(count, order-free 64-bit sum of mixed edges) of a sorted unique edge set."""
    pairs = edges.view(np.uint64)
    mixed = fmix64(fmix64(pairs[:, 0]) + pairs[:, 1]) if len(edges) else np.zeros(0, np.uint64)
    return len(edges), int(mixed.sum(dtype=np.uint64))


def combine_fingerprints(parts: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """Fingerprint of a whole edge set from those of its partitions (counts and sums add up)."""
    parts = list(parts)
    return sum(count for count, _ in parts), sum(mix for _, mix in parts) % (1 << 64)


@dataclass(frozen=True)
class StepResult:
    outgoing: list[np.ndarray]  # edges for each partition, index = destination partition
    fingerprint: tuple[int, int]  # of this partition's (deduplicated) input


def star_step(kind: str, pieces: Sequence[np.ndarray], num_partitions: int) -> StepResult:
    """One partition's share of a large-star or small-star step.

    pieces: the edges every partition routed here in the previous step (all with their source
    in this partition). The output is routed by destination partition, ready for the next step.
    """
    edges = unique_edges(np.concatenate(list(pieces)) if pieces else EMPTY_EDGES)
    step = {"large": large_star, "small": small_star}[kind]
    new = step(edges) if len(edges) else EMPTY_EDGES
    return StepResult(route(new, num_partitions), fingerprint(edges))


def star_labels(pieces: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(node, component label) for the sources of a converged partition: min(u, neighbours)."""
    edges = np.concatenate(list(pieces)) if pieces else EMPTY_EDGES
    if not len(edges):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    u, _, smallest = _groups(unique_edges(edges))
    first = np.concatenate(([True], u[1:] != u[:-1]))
    return u[first], np.minimum(u, smallest)[first]


def folded_stars(pieces: Sequence[np.ndarray], num_partitions: int) -> list[np.ndarray]:
    """The star rounds' outcome computed in this process, for a graph small enough for one
    task: each component as the star the rounds converge to (both directions of (node, label),
    label = smallest key), routed by partition, so `star_labels` gives the same labels.
    `pieces` hold both directions of each edge (the rounds' input): one direction is the graph."""
    nodes, labels = local_components([p[p[:, 0] < p[:, 1]] for p in pieces])
    leaves = nodes != labels
    star = np.stack([nodes[leaves], labels[leaves]], axis=1)
    return route(np.concatenate([star, star[:, ::-1]]), num_partitions)


def connected_components(
    edges: np.ndarray | Sequence[np.ndarray],
    num_partitions: int = 4,
    map_fn: Callable = map,
) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, labels) sorted by node; label = smallest node key of the component.

    edges: one (k, 2) array, or a list of them (e.g. one per bucket task), in any split.
    map_fn(function, list_of_inputs) runs the per-partition steps (builtin map, a process pool's
    map, or a Ray wrapper). Only nodes with an edge to another node are returned.
    """

    def regroup(results: Iterable[StepResult]) -> list[list[np.ndarray]]:
        results = list(results)
        return [[r.outgoing[p] for r in results] for p in range(num_partitions)]

    pieces = [edges] if isinstance(edges, np.ndarray) else list(edges)
    routed = [route(undirected(piece), num_partitions) for piece in pieces]
    inbox = [[parts[p] for parts in routed] for p in range(num_partitions)]
    previous = None
    while True:
        results = list(map_fn(partial(star_step, "large", num_partitions=num_partitions), inbox))
        current = combine_fingerprints(r.fingerprint for r in results)
        if current == previous:  # a full round changed nothing: every component is a star
            break
        previous = current
        inbox = regroup(
            map_fn(partial(star_step, "small", num_partitions=num_partitions), regroup(results))
        )
    labelled = list(map_fn(star_labels, inbox))
    nodes = np.concatenate([n for n, _ in labelled])
    labels = np.concatenate([label for _, label in labelled])
    order = np.argsort(nodes)
    return nodes[order], labels[order]


def local_components(
    edges: np.ndarray | Sequence[np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """connected_components' (nodes, labels) computed in this process for a graph one task
    holds: min-label hooking and pointer jumping over node indexes (a smaller index is a
    smaller key), each round a few vectorised passes over the edges, not star rounds' sorts."""
    pieces = [edges] if isinstance(edges, np.ndarray) else list(edges)
    edges = np.concatenate([EMPTY_EDGES, *(np.asarray(p, np.int64).reshape(-1, 2) for p in pieces)])
    edges = edges[edges[:, 0] != edges[:, 1]]  # a self-loop links nothing
    if not len(edges):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(edges.reshape(-1))
    ends = edges.reshape(-1)[order]
    first = np.concatenate(([True], ends[1:] != ends[:-1]))
    nodes, index = ends[first], np.empty(len(ends), np.int64)
    index[order] = np.cumsum(first) - 1  # each edge end's node index
    u, v = index[0::2], index[1::2]
    label = np.arange(len(nodes))
    while True:
        lu, lv = label[u], label[v]
        if np.array_equal(lu, lv):
            return nodes, nodes[label]  # every edge inside one label, each label a root
        low = np.minimum(lu, lv)
        np.minimum.at(label, lu, low)  # hook each root to the smallest root it meets
        np.minimum.at(label, lv, low)
        while True:  # every node straight to its root
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped


def reference_components(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain in-memory union-find, for tests: same output contract as connected_components."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for a, b in np.asarray(edges, dtype=np.int64).reshape(-1, 2).tolist():
        if a == b:
            continue  # a self-loop links nothing (connected_components drops them too)
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the root stays the smallest key
    nodes = np.array(sorted(parent), dtype=np.int64)
    return nodes, np.array([find(int(n)) for n in nodes], dtype=np.int64)


KEEP_RULE_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("kept_id", pa.string()), ("similarity", pa.float64())]
)


def keep_rule(
    doc_ids: Sequence[str],
    lengths: np.ndarray,
    sigs: np.ndarray,
    labels: np.ndarray,
    threshold: float,
    ranks: np.ndarray | None = None,
) -> pa.Table:
    """Which members of each component are removed, and the kept document each one resembles.

    Rows (doc_ids, lengths, sigs, labels = component of each row) hold whole components: every
    member of a component present here is in these rows (partition rows by label, not by doc).

    Rule: walk each component's members by source priority first (`ranks`: the position of the
    member's source in the config's `inputs`, smallest first; all 0 without it), then from the
    longest text to the shortest (ties: smallest doc_id). A member whose estimated Jaccard with
    an already kept member is >= threshold is removed and reported as (doc_id, kept_id = the
    first such kept member, similarity); any other member is kept. So the longest text of the
    first-listed source present is always kept; a document is removed only if a *kept*
    document resembles it, however long the chain of edges that joined them in one component
    (in A~B~C with A, C far apart, C is never removed because of A); and the kept members of a
    component are pairwise below the threshold, so no near-duplicate pair inside a component
    survives. Comparing everyone with the longest member is one vectorised step; only members far
    from it walk the (usually short) list of other kept members.
    """
    doc_ids = np.asarray(doc_ids, dtype=object)
    id_rank = np.empty(len(doc_ids), dtype=np.int64)
    id_rank[np.argsort(doc_ids.astype(str), kind="stable")] = np.arange(len(doc_ids))
    labels = np.asarray(labels, dtype=np.int64)
    ranks = np.zeros(len(doc_ids), np.int64) if ranks is None else np.asarray(ranks, np.int64)
    order = np.lexsort((id_rank, -np.asarray(lengths, dtype=np.int64), ranks, labels))
    starts = np.concatenate(([True], labels[order][1:] != labels[order][:-1]))
    first = order[np.flatnonzero(starts)][np.cumsum(starts) - 1]
    members, first = order[~starts], first[~starts]
    sims = np.asarray(estimated_jaccard(sigs[members], sigs[first])).reshape(-1)
    close = sims >= threshold
    removed, kept, similarity = list(members[close]), list(first[close]), list(sims[close])
    far, far_label = members[~close], labels[members[~close]]
    group_starts = np.flatnonzero(np.concatenate(([True], far_label[1:] != far_label[:-1])))
    for group in np.split(far, group_starts[1:]) if len(far) else []:
        keepers: list[int] = []  # kept members of this component, other than the longest
        for row in group.tolist():
            if keepers:
                to_kept = np.asarray(estimated_jaccard(sigs[keepers], sigs[row]))
                hit = np.flatnonzero(to_kept >= threshold)
                if len(hit):
                    removed.append(row)
                    kept.append(keepers[hit[0]])
                    similarity.append(to_kept[hit[0]])
                    continue
            keepers.append(row)
    removed_rows = np.array(removed, dtype=np.int64)
    kept_rows = np.array(kept, dtype=np.int64)
    out = np.argsort(doc_ids[removed_rows].astype(str), kind="stable")
    return pa.table(
        [
            pa.array(doc_ids[removed_rows][out].tolist(), pa.string()),
            pa.array(doc_ids[kept_rows][out].tolist(), pa.string()),
            pa.array(np.array(similarity, dtype=np.float64)[out], pa.float64()),
        ],
        schema=KEEP_RULE_SCHEMA,
    )


def near_duplicate_removals(
    texts: Sequence[str] | pa.Array,
    doc_ids: Sequence[str],
    params: MinHashParams = DEFAULT_PARAMS,
    num_partitions: int = 4,
) -> pa.Table:
    """The whole near-duplicate rule in one process (reference for the distributed stages):
    signatures -> bands -> star edges per bucket -> verification -> components -> keep rule."""
    sigs = signatures(texts, params)
    keys = node_keys(doc_ids)
    pairs = candidate_pairs(band_hashes(sigs, params), keys)
    sigs = narrowed(sigs)  # compared as near dedup stores them (band hashes: full values)
    edges, _ = verified_edges(pairs, keys, sigs, params.threshold)
    nodes, labels = connected_components(edges, num_partitions)
    order = np.argsort(keys)
    rows = order[np.searchsorted(keys, nodes, sorter=order)]
    if not isinstance(texts, pa.Array):
        texts = pa.array(texts, pa.string())
    lengths = pc.utf8_length(texts.fill_null("")).to_numpy(zero_copy_only=False)
    return keep_rule(
        np.asarray(doc_ids, dtype=object)[rows], lengths[rows], sigs[rows], labels, params.threshold
    )

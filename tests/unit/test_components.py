import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pipeline.dedup.components import (
    StepResult,
    combine_fingerprints,
    connected_components,
    folded_stars,
    keep_rule,
    local_components,
    near_duplicate_removals,
    node_keys,
    reference_components,
    route,
    star_labels,
    star_step,
    undirected,
)
from pipeline.dedup.minhash import MinHashParams, estimated_jaccard, signatures


def random_graph(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    keys = rng.integers(-(2**62), 2**62, n)
    return keys[rng.integers(0, n, (m, 2))]


@pytest.mark.parametrize("num_partitions", [1, 2, 5])
def test_components_equal_union_find_on_random_graphs(num_partitions):
    rng = np.random.default_rng(num_partitions)
    for _ in range(40):
        n = int(rng.integers(2, 200))
        edges = random_graph(rng, n, int(rng.integers(1, 2 * n)))
        nodes, labels = connected_components(edges, num_partitions)
        expected_nodes, expected_labels = reference_components(edges)
        assert nodes.tolist() == expected_nodes.tolist()
        assert labels.tolist() == expected_labels.tolist()


def test_local_components_equal_union_find_on_random_graphs_and_long_chains():
    rng = np.random.default_rng(13)
    for trial in range(60):
        n = int(rng.integers(2, 300))
        keys = rng.integers(-(2**62), 2**62, n)
        if trial % 3:
            edges = random_graph(rng, n, int(rng.integers(1, 2 * n)))
        else:  # one path through every node in random order: labels travel the whole chain
            edges = np.stack([keys[:-1], keys[1:]], axis=1)
        expected = reference_components(edges)
        for given in (edges, np.array_split(edges, 3)):
            nodes, labels = local_components(given)
            assert nodes.tolist() == expected[0].tolist()
            assert labels.tolist() == expected[1].tolist()
    assert [a.tolist() for a in local_components(np.array([[3, 3]]))] == [[], []]


def test_edges_split_over_producers_and_partitions_give_same_components():
    rng = np.random.default_rng(11)
    edges = random_graph(rng, 300, 350)
    cuts = np.sort(rng.integers(0, len(edges), 6))
    pieces = np.split(edges[rng.permutation(len(edges))], cuts)
    expected = reference_components(edges)
    for num_partitions in (1, 3, 8):
        nodes, labels = connected_components(pieces, num_partitions)
        assert nodes.tolist() == expected[0].tolist() and labels.tolist() == expected[1].tolist()


def test_hand_driven_partition_tasks_match_the_local_driver():
    """What a Ray driver does: one star_step per partition, pieces routed between rounds."""
    rng = np.random.default_rng(12)
    edges, parts = random_graph(rng, 150, 160), 4
    inbox = [[piece] for piece in route(undirected(edges), parts)]
    previous, rounds = None, 0
    while True:
        results: list[StepResult] = [star_step("large", pieces, parts) for pieces in inbox]
        fingerprint = combine_fingerprints(r.fingerprint for r in results)
        if fingerprint == previous:
            break
        previous, rounds = fingerprint, rounds + 1
        small = [star_step("small", [r.outgoing[p] for r in results], parts) for p in range(parts)]
        inbox = [[r.outgoing[p] for r in small] for p in range(parts)]
    labelled = [star_labels(pieces) for pieces in inbox]
    got = dict(
        zip(
            np.concatenate([n for n, _ in labelled]).tolist(),
            np.concatenate([lab for _, lab in labelled]).tolist(),
            strict=True,
        )
    )
    nodes, labels = reference_components(edges)
    assert got == dict(zip(nodes.tolist(), labels.tolist(), strict=True)) and rounds < 20


def _labels_of(inbox: list[list[np.ndarray]], parts: int) -> dict[int, int]:
    """node -> label from each partition's pieces, each node in its own partition only."""
    got: dict[int, int] = {}
    for p, pieces in enumerate(inbox):
        nodes, labels = star_labels(pieces)
        assert (route(np.stack([nodes, nodes], axis=1), parts)[p] == nodes[:, None]).all()
        got.update(zip(nodes.tolist(), labels.tolist(), strict=True))
    return got


@pytest.mark.parametrize("parts", [1, 3, 8])
def test_a_small_graph_folded_into_one_task_gives_the_rounds_labels(parts):
    """star_fold's core: the converged stars made in one process, routed by partition."""
    rng = np.random.default_rng(parts)
    edges = random_graph(rng, 400, 420)
    folded = folded_stars(route(undirected(edges), parts), parts)
    assert len(folded) == parts
    nodes, labels = reference_components(edges)
    assert _labels_of([[p] for p in folded], parts) == dict(
        zip(nodes.tolist(), labels.tolist(), strict=True)
    )
    assert [len(p) for p in folded_stars([], parts)] == [0] * parts


def test_star_rounds_queued_ahead_of_the_driver_stop_where_the_rounds_converge():
    """The driver's rounds (run/dedup_stage.py) with each round queued before the previous
    round's fingerprints are in: the same labels as union-find."""
    from pipeline.run.dedup_stage import _star_rounds
    from pipeline.run.waves import Waves

    class Counted(Waves):  # tasks submitted by the time the driver waits for fingerprints
        submitted, at_get = 0, []

        def task(self, name):
            inner, waves = super().task(name), self

            class Task:
                def options(self, **kw):
                    return self

                def remote(self, *args):
                    waves.submitted += 1
                    return inner.remote(*args)

            return Task()

        def get(self, refs):
            self.at_get.append(self.submitted)
            return super().get(refs)

    rng = np.random.default_rng(21)
    edges, parts = random_graph(rng, 300, 330), 4
    routed = route(undirected(edges), parts)
    waves = Counted(inline=True)
    inbox = _star_rounds(waves, [[piece] for piece in routed])
    nodes, labels = reference_components(edges)
    assert _labels_of(inbox, parts) == dict(zip(nodes.tolist(), labels.tolist(), strict=True))
    # at each wait the next round is already queued: 3 steps of `parts` tasks at the first
    rounds = len(waves.at_get)
    assert rounds > 2 and waves.at_get == [3 * parts + 2 * parts * r for r in range(rounds)]


def test_long_chain_and_pluggable_map():
    rng = np.random.default_rng(13)
    path = rng.permutation(3000).astype(np.int64)
    edges = np.stack([path[:-1], path[1:]], axis=1)
    with ThreadPoolExecutor(2) as pool:
        nodes, labels = connected_components(edges, 3, map_fn=pool.map)
    assert nodes.tolist() == list(range(3000)) and set(labels.tolist()) == {0}


def test_self_loops_and_empty_input():
    nodes, labels = connected_components(np.array([[5, 5], [1, 2]]), 2)
    assert nodes.tolist() == [1, 2] and labels.tolist() == [1, 1]
    nodes, labels = connected_components(np.empty((0, 2), np.int64), 2)
    assert len(nodes) == 0 and len(labels) == 0


# --- keep rule ---------------------------------------------------------------------------------


def chain_signatures() -> np.ndarray:
    """A~B (0.90), B~C (0.90), A vs C 0.797: below the 0.8 threshold."""
    b = np.random.default_rng(14).integers(0, 2**32, 256, dtype=np.uint32)
    a, c = b.copy(), b.copy()
    a[:26] += 1
    c[26:52] += 1
    return np.stack([a, b, c])


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        ((300, 200, 100), {"B": "A"}),  # A kept; C far from A: kept, though B~C
        ((100, 300, 200), {"A": "B", "C": "B"}),  # B kept, both neighbours close to it
        ((100, 200, 300), {"B": "C"}),  # mirror of the first case
    ],
)
def test_chain_never_removes_a_document_far_from_its_kept_one(lengths, expected):
    sigs = chain_signatures()
    assert estimated_jaccard(sigs[0], sigs[2]) < 0.8 <= estimated_jaccard(sigs[0], sigs[1])
    table = keep_rule(["A", "B", "C"], np.array(lengths), sigs, np.zeros(3, np.int64), 0.8)
    got = dict(zip(table["doc_id"].to_pylist(), table["kept_id"].to_pylist(), strict=True))
    assert got == expected
    for doc, kept, similarity in zip(
        *(table[c].to_pylist() for c in table.column_names), strict=True
    ):
        assert similarity == estimated_jaccard(sigs["ABC".index(doc)], sigs["ABC".index(kept)])


def test_members_far_from_the_longest_are_deduplicated_among_themselves():
    rng = np.random.default_rng(15)
    r = rng.integers(0, 2**32, 256, dtype=np.uint32)
    x = r.copy()
    x[:128] += 1  # far from r
    y = x.copy()
    y[200:210] += 1  # close to x, far from r
    sigs = np.stack([r, x, y])
    table = keep_rule(["r", "x", "y"], np.array([9, 5, 4]), sigs, np.zeros(3, np.int64), 0.8)
    assert table.to_pylist() == [
        {"doc_id": "y", "kept_id": "x", "similarity": pytest.approx(246 / 256)}
    ]


def test_ties_go_to_smallest_doc_id_and_row_order_does_not_matter():
    sigs = np.zeros((4, 16), np.uint32)
    ids, lengths, labels = ["d", "b", "c", "a"], np.array([5, 5, 5, 5]), np.array([1, 1, 2, 2])
    table = keep_rule(ids, lengths, sigs, labels, 0.8)
    assert table["doc_id"].to_pylist() == ["c", "d"] and table["kept_id"].to_pylist() == ["a", "b"]
    order = [2, 0, 3, 1]
    again = keep_rule([ids[i] for i in order], lengths[order], sigs[order], labels[order], 0.8)
    assert again.equals(table)


def random_text(rng: random.Random, n_words: int) -> str:
    return " ".join(f"w{rng.randrange(5000)}" for _ in range(n_words))


def test_end_to_end_chain_of_texts_and_determinism():
    """Shifted windows: J(A,B) = J(B,C) = 0.86, J(A,C) = 0.74 on word 5-grams."""
    rng = random.Random(16)
    words = random_text(rng, 460).split()
    a, b, c = (" ".join(words[s : s + 400]) for s in (0, 30, 60))
    padding = " " + "!" * 500  # punctuation only: longer text, same shingles
    texts = [a + padding, b, c, random_text(rng, 300)]
    ids = ["A", "B", "C", "D"]
    sigs = signatures(texts)
    assert estimated_jaccard(sigs[0], sigs[2]) < 0.8
    assert min(estimated_jaccard(sigs[0], sigs[1]), estimated_jaccard(sigs[1], sigs[2])) >= 0.8
    table = near_duplicate_removals(texts, ids)
    assert table["doc_id"].to_pylist() == ["B"] and table["kept_id"].to_pylist() == ["A"]
    shuffled = [3, 1, 0, 2]
    for parts in (1, 7):
        again = near_duplicate_removals(
            [texts[i] for i in shuffled],
            [ids[i] for i in shuffled],
            MinHashParams(),
            num_partitions=parts,
        )
        assert again.equals(table)


def test_node_keys_are_stable_int64():
    keys = node_keys(["a", "b", "a"])
    assert keys.dtype == np.int64 and keys[0] == keys[2] != keys[1]

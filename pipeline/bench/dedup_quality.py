"""Benchmark: near-duplicate decisions of the pure pipeline against exact shingle Jaccard.

    python -m pipeline.bench.dedup_quality [--docs 5000] [--seed 7]

Corpus: real documents cut from /usr/share/doc and /usr/share/common-licenses (which contain real
families: licence texts inside copyright files, changelogs shared by sibling packages), plus
planted copies with 0.5 % to 30 % of their words substituted, inserted or deleted, some of them
copies of copies (chains). Pipeline: minhash.signatures -> band_hashes -> star edges ->
verification -> components -> keep rule (components.near_duplicate_removals). Baseline in the same
run: datatrove-like banding (14 x 8, 112 permutations) without verification, one kept per
component. Ground truth is computed here with exact word-5-gram sets:
  precision  removed docs that have some doc with Jaccard >= 0.7 / removed docs
  recall     pairs with Jaccard >= 0.85 of which at least one doc is removed / such pairs
  orphaned   removed docs with no *kept* doc at Jaccard >= 0.5
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from pipeline.cli import args as cli_args
from pipeline.dedup.components import (
    connected_components,
    near_duplicate_removals,
    node_keys,
)
from pipeline.dedup.edges import candidate_pairs
from pipeline.dedup.minhash import MinHashParams, band_hashes, shingle_set, signatures
from pipeline.tools.real_text import (
    DOC_ROOT,
    LICENSE_ROOT,
    classify_doc_file,
    iter_documents,
    list_files,
    mutate_words,
)

RATES = (0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3)
PRECISION_J, RECALL_J, ORPHAN_J = 0.7, 0.85, 0.5


@dataclass
class Corpus:
    texts: list[str]
    doc_ids: list[str]
    planted: list[tuple[int, int, float]]  # (parent row, copy row, word edit rate)


def build_corpus(n_docs: int, seed: int) -> Corpus:
    rng = random.Random(seed)
    files = list_files(DOC_ROOT) + list_files(LICENSE_ROOT)
    rng.shuffle(files)
    n_originals = int(n_docs * 0.6)
    originals = []
    for doc in iter_documents(files, classify_doc_file, 3000, max_chunks_per_file=2):
        originals.append(doc.text)
        if len(originals) == n_originals:
            break
    texts, parents = list(originals), []
    while len(texts) < n_docs:
        chain = parents and rng.random() < 0.2  # copy of a copy
        parent = rng.choice(parents)[1] if chain else rng.randrange(len(originals))
        rate = rng.choice(RATES)
        parents.append((parent, len(texts), rate))
        texts.append(mutate_words(texts[parent], rate, rng))
    # ids in shuffled order, so that the smallest-id tie-break favours no group
    labels = list(range(len(texts)))
    rng.shuffle(labels)
    return Corpus(texts, [f"doc-{label:06d}" for label in labels], parents)


class Truth:
    """Exact word-shingle sets (interned to ints) and the neighbour queries the metrics need."""

    def __init__(self, texts: list[str], ngram: int) -> None:
        vocabulary: dict[str, int] = {}
        self.sets = [
            frozenset(vocabulary.setdefault(s, len(vocabulary)) for s in shingle_set(t, ngram))
            for t in texts
        ]
        self.postings: dict[int, list[int]] = defaultdict(list)
        for doc, shingles in enumerate(self.sets):
            for s in shingles:
                self.postings[s].append(doc)

    def jaccard(self, a: int, b: int) -> float:
        x, y = self.sets[a], self.sets[b]
        common = len(x & y)
        return common / (len(x) + len(y) - common) if x or y else 1.0

    def best_neighbour(self, doc: int, allowed) -> float:
        """Largest Jaccard of doc with any other doc for which allowed(other) holds."""
        shared = Counter(o for s in self.sets[doc] for o in self.postings[s] if o != doc)
        size = len(self.sets[doc])
        return max(
            (c / (size + len(self.sets[o]) - c) for o, c in shared.items() if allowed(o)),
            default=0.0,
        )

    def pairs_at_least(self, threshold: float) -> list[tuple[int, int]]:
        """Every pair with Jaccard >= threshold, exactly (prefix filtering, then verification)."""
        frequency = {s: len(docs) for s, docs in self.postings.items()}
        index: dict[int, list[int]] = defaultdict(list)
        pairs = []
        for doc in sorted(range(len(self.sets)), key=lambda d: len(self.sets[d])):
            ordered = sorted(self.sets[doc], key=lambda s: (frequency[s], s))
            prefix = ordered[: len(ordered) - math.ceil(threshold * len(ordered) - 1e-9) + 1]
            candidates = {other for s in prefix for other in index[s]}
            pairs += [(o, doc) for o in candidates if self.jaccard(o, doc) >= threshold]
            for s in prefix:
                index[s].append(doc)
        return pairs


def naive_removals(corpus: Corpus, params: MinHashParams) -> dict[int, int]:
    """Baseline: components of unverified band candidates, all but the longest text removed."""
    sigs = signatures(corpus.texts, params)
    keys = node_keys(corpus.doc_ids)
    nodes, labels = connected_components(candidate_pairs(band_hashes(sigs, params), keys))
    row_of = {int(k): i for i, k in enumerate(keys)}
    members = defaultdict(list)
    for node, label in zip(nodes.tolist(), labels.tolist(), strict=True):
        members[label].append(row_of[node])
    removed = {}
    for rows in members.values():
        rep = min(rows, key=lambda r: (-len(corpus.texts[r]), corpus.doc_ids[r]))
        removed.update({r: rep for r in rows if r != rep})
    return removed


def evaluate(removed: dict[int, int], truth: Truth, close_pairs) -> dict:
    """Metrics of a removal decision {removed row: kept row} against the exact truth."""
    false_removals = [
        d
        for d, kept in removed.items()
        if truth.jaccard(d, kept) < PRECISION_J
        and truth.best_neighbour(d, lambda o: True) < PRECISION_J
    ]
    orphans = [
        d
        for d, kept in removed.items()
        if truth.jaccard(d, kept) < ORPHAN_J
        and truth.best_neighbour(d, lambda o: o not in removed) < ORPHAN_J
    ]
    found = sum(1 for a, b in close_pairs if a in removed or b in removed)
    return {
        "removed": len(removed),
        "precision": 1 - len(false_removals) / len(removed) if removed else 1.0,
        "recall": found / len(close_pairs) if close_pairs else 1.0,
        "orphaned": len(orphans),
        "missed_pairs": len(close_pairs) - found,
        "false_removals": len(false_removals),
    }


def rate_table(corpus: Corpus, truth: Truth, removed: dict[int, int]) -> list[str]:
    by_rate = defaultdict(list)
    for parent, copy, rate in corpus.planted:
        by_rate[rate].append(
            (
                truth.jaccard(parent, copy),
                parent in removed or copy in removed,
                removed.get(copy) == parent,
            )
        )
    lines = [
        f"{'edit rate':>9} {'copies':>6} {'mean J':>7} {'min J':>6} {'max J':>6} "
        f"{'pair caught':>11} {'copy kept->parent':>17}"
    ]
    for rate in sorted(by_rate):
        js, caught, to_parent = zip(*by_rate[rate], strict=True)
        lines.append(
            f"{rate:>9.3f} {len(js):>6} {np.mean(js):>7.3f} {min(js):>6.3f} "
            f"{max(js):>6.3f} {np.mean(caught):>11.3f} {np.mean(to_parent):>17.3f}"
        )
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = cli_args.Parser(
        prog="python -m pipeline bench dedup-quality", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--docs", type=int, default=5000, help="documents in the corpus, planted copies included"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the corpus and its copies")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    params = MinHashParams()
    started = time.perf_counter()
    corpus = build_corpus(args.docs, args.seed)
    built = time.perf_counter()

    table = near_duplicate_removals(corpus.texts, corpus.doc_ids, params)
    row_of = {d: i for i, d in enumerate(corpus.doc_ids)}
    removed = {
        row_of[d]: row_of[k]
        for d, k in zip(table["doc_id"].to_pylist(), table["kept_id"].to_pylist(), strict=True)
    }
    pipeline_s = time.perf_counter() - built
    baseline = naive_removals(corpus, MinHashParams(num_perm=112, bands=14, rows=8))

    truth_started = time.perf_counter()
    truth = Truth(corpus.texts, params.ngram)
    close_pairs = truth.pairs_at_least(RECALL_J)
    ours, naive = evaluate(removed, truth, close_pairs), evaluate(baseline, truth, close_pairs)
    truth_s = time.perf_counter() - truth_started

    mb = sum(len(t.encode()) for t in corpus.texts) / 1e6
    print(
        f"corpus: {len(corpus.texts)} docs, {mb:.1f} MB, {len(corpus.planted)} planted copies, "
        f"{len(close_pairs)} pairs with exact J >= {RECALL_J}"
    )
    print(f"{'decision':<44} {'removed':>7} {'precision':>9} {'recall':>7} {'orphaned':>8}")
    for name, m in (
        ("pipeline 32x8 + verify >= 0.8 + keep rule", ours),
        ("baseline 14x8, no verification, keep 1", naive),
    ):
        print(
            f"{name:<44} {m['removed']:>7} {m['precision']:>9.4f} {m['recall']:>7.4f} "
            f"{m['orphaned']:>8}"
        )
    print(
        "planted copies by edit rate (pair caught: copy or parent removed; copy kept->parent: "
        "the copy removed with its parent as the kept doc)"
    )
    print("\n".join(rate_table(corpus, truth, removed)))
    print(
        f"time: corpus {built - started:.1f} s, pipeline {pipeline_s:.1f} s, "
        f"ground truth {truth_s:.1f} s"
    )
    print(
        json.dumps(
            {
                "precision": round(ours["precision"], 5),
                "recall": round(ours["recall"], 5),
                "orphaned": ours["orphaned"],
                "removed": ours["removed"],
                "missed_pairs": ours["missed_pairs"],
                "false_removals": ours["false_removals"],
                "close_pairs": len(close_pairs),
                "docs": len(corpus.texts),
                "baseline_precision": round(naive["precision"], 5),
                "baseline_recall": round(naive["recall"], 5),
                "baseline_orphaned": naive["orphaned"],
                "pipeline_s": round(pipeline_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()

"""Near dedup through Ray on the sample: planted pairs found, the distributed path equals the
single-process reference, results independent of partitions and units, and the audit is sound."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import REPO, SAMPLE_CONFIG, run_documents

from pipeline.config.loader import load_config
from pipeline.core.layout import RunLayout
from pipeline.core.text import normalize
from pipeline.dedup import components, minhash
from pipeline.run.driver import run_pipeline

PLANTED = json.loads((REPO / "sample" / "_planted.json").read_text())


def run_sample(tmp_path, *sets):
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path), overrides=list(sets))
    result = run_pipeline(cfg, show_progress=False)
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    return cfg, result, layout


@pytest.fixture(scope="module")
def sample(ray_local, tmp_path_factory):
    return run_sample(tmp_path_factory.mktemp("near"))


def removals(layout: RunLayout, rule: str) -> list[dict]:
    return [r for r in layout.removed.read_parquet().to_pylist() if r["rule"] == rule]


def survivors_of_exact(cfg, layout: RunLayout) -> list[dict]:
    gone = {(r["source"], r["row"]) for r in removals(layout, "exact")}
    return [d for d in run_documents(cfg, layout) if (d["source"], d["row"]) not in gone]


def test_distributed_equals_single_process_reference(sample):
    cfg, result, layout = sample
    docs = survivors_of_exact(cfg, layout)
    composite = [f"{d['doc_id']}\x00{d['source']}\x00{d['row']:020d}" for d in docs]
    params = minhash.MinHashParams(
        num_perm=cfg.dedup.near.num_perm,
        bands=cfg.dedup.near.bands,
        rows=cfg.dedup.near.rows,
        seed=cfg.dedup.near.seed,
        threshold=cfg.dedup.near.threshold,
        ngram=cfg.dedup.near.ngram,
    )
    reference = components.near_duplicate_removals([d["text"] for d in docs], composite, params)
    expected = {tuple(c.split("\x00")[1:]) for c in reference["doc_id"].to_pylist()}
    got = {(r["source"], f"{r['row']:020d}") for r in removals(layout, "near")}
    assert got == expected and len(got) == result.manifest["counts"]["removed_near"] > 20


def test_planted_close_copies_are_removed(sample):
    _, _, layout = sample
    removed = {(r["source"], r["row"]) for r in layout.removed.read_parquet().to_pylist()}
    close = [
        (p["copy"], p["parent"])
        for p in PLANTED["near_duplicates"]
        if p["jaccard_to_parent"] >= 0.88
    ]
    close += [(p["a"], p["b"]) for p in PLANTED["natural_near_duplicates"] if p["jaccard"] >= 0.88]
    assert len(close) >= 30
    for a, b in close:  # one of each close pair is gone, across files and units
        assert tuple(a[:2]) in removed or tuple(b[:2]) in removed, (a, b)


def test_each_removed_document_resembles_a_kept_one(sample):
    cfg, _, layout = sample
    docs = {(d["source"], d["row"]): d for d in survivors_of_exact(cfg, layout)}
    near = removals(layout, "near")
    removed = {(r["source"], r["row"]) for r in near}
    params = minhash.MinHashParams(num_perm=cfg.dedup.near.num_perm, seed=cfg.dedup.near.seed)
    for r in near:
        kept = (r["kept_source"], r["kept_row"])
        assert kept in docs and kept not in removed  # the representative survives
        assert r["similarity"] >= cfg.dedup.near.threshold
        a, b = (
            minhash.shingle_set(normalize(docs[k]["text"]).lower())
            for k in ((r["source"], r["row"]), kept)
        )
        assert minhash.exact_jaccard(a, b) >= 0.6  # a true neighbour, not a chained stranger
        sigs = minhash.signatures(
            [docs[(r["source"], r["row"])]["text"], docs[kept]["text"]], params
        )
        # compared as stored: 8-bit (b-bit MinHash); the band hashes came from all 32 bits
        assert np.isclose(minhash.estimated_jaccard(*minhash.narrowed(sigs)), r["similarity"])


def _selected_by_bucket(layout: RunLayout, partitions: int) -> None:
    """select reads each unit bucket's removals once, beside the audit, not removed.parquet once
    per unit: a task per bucket, and every unit's kept index is the one the audit's rows name
    (select_unit, which reads removed.parquet, finds it written)."""
    from pipeline.exchange.sections import unit_bounds
    from pipeline.run.tokenize_tasks import select_unit

    units = sorted(set(layout.units.read_parquet()["unit_id"].to_pylist()))
    stages = {s["stage"]: s for s in json.loads(layout.stats.read_bytes())["stages"]}
    assert stages["select"]["tasks"] == len(unit_bounds(units, partitions)) < len(units)
    for unit in units:
        assert select_unit(layout, unit).reused, unit


def test_independent_of_partitions_and_units(sample, tmp_path):
    _, result, layout = sample
    _, other, other_layout = run_sample(tmp_path, "dedup.partitions=1", "ingest.unit_bytes=16MiB")
    key = ("doc_id", "source", "row", "rule", "kept_source", "kept_row", "similarity")
    rows = sorted(tuple(r[k] for k in key) for r in layout.removed.read_parquet().to_pylist())
    other_rows = sorted(
        tuple(r[k] for k in key) for r in other_layout.removed.read_parquet().to_pylist()
    )
    assert rows == other_rows
    assert other.manifest["shards"] == result.manifest["shards"]


def test_small_run_shortcuts_remove_the_same_and_write_no_pass_1_object(
    sample, tmp_path, monkeypatch
):
    """The sample's exchanges are small (plan.direct: at most dedup.exchange_small_gets GETs),
    so their readers GET the writers' objects, and its candidate graph is labelled in one task
    (neardup.star_fold). Without either, pass 1 runs and the star rounds run across tasks; but
    the candidates' rows, which one near_fetch task per unit bucket (3 partitions: 3 buckets of
    the sample's 4 units) would send through two passes at 16 KiB requests, go through one: one
    fetch task over the 3 buckets makes pieces large enough to read directly
    (dedup_stage.fetch_runs)."""
    from pipeline.run import neardup

    _, result, layout = sample
    monkeypatch.setattr(neardup, "FOLD_EDGES", 0)  # the driver's choice: rounds, queued ahead
    _, other, other_layout = run_sample(
        tmp_path,
        "dedup.exchange_small_gets=0",
        "dedup.partitions=3",
        "dedup.exchange_request_bytes=16KiB",
    )
    _selected_by_bucket(other_layout, 3)
    for stage, name in [("exact", n) for n in ("hashes", "exact-removed")] + [
        ("near", n) for n in ("req", "cand", "near-removed")
    ]:
        assert not Path(layout.exchange(stage, name).path).exists(), name
        two_passes = Path(other_layout.exchange(stage, name).path).exists()
        assert two_passes == (name != "cand"), name
    assert other_layout.near_cands(0).exists() and not other_layout.near_cands(1).exists()
    assert layout.near_cands(1).exists()  # one fetch task per bucket where it changes nothing
    assert layout.removed.read_parquet().equals(other_layout.removed.read_parquet())
    assert other.manifest["shards"] == result.manifest["shards"]


def test_disabled_near_dedup_removes_nothing_near(ray_local, tmp_path):
    _, result, _ = run_sample(tmp_path, "dedup.near.enabled=false")
    assert result.manifest["counts"]["removed_near"] == 0
    assert result.manifest["counts"]["removed_exact"] > 0



def test_signature_files_hold_no_key_the_band_objects_keys_section_does(sample):
    """Near dedup names a document by unit and position; only near_band_group matches keys (the
    exact removals'), from the band object's keys section: the signature file does not carry
    them (8 B a document written and read for nothing)."""
    from pipeline.exchange import sections
    from pipeline.run import near_signing

    cfg, _, layout = sample
    n = cfg.dedup.partitions
    units = sorted(set(layout.units.read_parquet()["unit_id"].to_pylist()))
    signed = 0
    for unit in units:
        rows = layout.read_sigs(unit, near_signing.signature_key(cfg)).read_parquet()
        assert rows.schema.equals(near_signing.sig_schema(cfg)) and "key" not in rows.column_names
        data = layout.read_bands(unit, near_signing.band_key(cfg)).read_bytes()
        offsets = sections.index_of(data, n + 1)
        keys = np.frombuffer(data[int(offsets[n]) : int(offsets[n + 1])], "<i8")
        sources = rows["source"].to_pylist()
        if cfg.named_sources:  # the rule of near_signing.signed_rows
            origins = rows["origin"].to_pylist()
            sources = [f"{o}\x00{s}" for o, s in zip(origins, sources, strict=True)]
        expected = near_signing.record_keys(sources, rows["row"].to_pylist())
        assert np.array_equal(keys, expected), unit
        signed += rows.num_rows
    assert signed > 0



def _chain_texts() -> list[str]:
    """A, B, C: B a text of 400 words, A with one word of it changed, C with eight (found by
    search, seed 15: estimated Jaccard A~B 0.97, B~C 0.82, A~C 0.796 on the stored 8-bit
    signatures, and every band bucket that holds B and C also holds A)."""
    rng = np.random.default_rng(15)
    vocab = [f"w{i}" for i in range(5000)]
    base = [vocab[i] for i in rng.integers(0, 5000, 400)]
    a, c = list(base), list(base)
    a[int(rng.integers(0, 400))] = "alpha"
    for k in rng.choice(400, int(rng.integers(3, 9)), replace=False):
        c[int(k)] = f"gamma{k}"
    return [" ".join(t) for t in (a, base, c)]


def test_the_chain_corpus_has_a_head_dependent_bucket():
    """The precondition of the next test, checked with the pipeline's own MinHash: A~B and
    B~C pass verification, A~C does not, and B meets C only in buckets that A is in too, so the
    component of C depends on which of A and B heads those buckets."""
    params = minhash.DEFAULT_PARAMS
    sigs = minhash.signatures(_chain_texts(), params)
    bands, stored = minhash.band_hashes(sigs, params), minhash.narrowed(sigs)
    est = {(i, j): float(minhash.estimated_jaccard(stored[i], stored[j]))
           for i, j in ((0, 1), (1, 2), (0, 2))}  # fmt: skip
    assert est[0, 1] >= 0.8 and est[1, 2] >= 0.8 and est[0, 2] < 0.8, est
    b_meets_c = bands[1] == bands[2]
    assert b_meets_c.any() and (bands[0] == bands[1])[b_meets_c].all()


@pytest.mark.parametrize("fillers", [40, 400])
def test_a_chain_of_near_copies_is_decided_alike_whatever_the_units(ray_local, tmp_path, fillers):
    """A ~ B and B ~ C above the threshold, A and C below it: a bucket's star edges start at its
    head (smallest node id), so the head decides whether C joins A and B. Node ids follow the
    documents' order (source, path, offset), not the unit ids, so every unit size decides alike
    (before, small units and whole files differed)."""
    rng = np.random.default_rng(fillers)
    folder = tmp_path / "in"
    folder.mkdir()
    for name, text in zip("abc", _chain_texts(), strict=True):
        filler = [" ".join(f"f{x}" for x in rng.integers(0, 10**6, 300)) for _ in range(fillers)]
        rows = [{"id": f"{name}-{i}", "text": t} for i, t in enumerate(filler)]
        rows.insert(fillers // 2, {"id": name.upper(), "text": text})
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    decided = []
    for unit in ("8KiB", "64KiB", "64MiB"):
        cfg = load_config(SAMPLE_CONFIG, input_uri=str(folder), output_uri=str(tmp_path / unit),
                          overrides=[f"ingest.unit_bytes={unit}"])  # fmt: skip
        result = run_pipeline(cfg, show_progress=False)
        layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
        decided.append(sorted((r["doc_id"], r["kept_id"]) for r in removals(layout, "near")))
    assert decided[0] and decided[0] == decided[1] == decided[2], decided

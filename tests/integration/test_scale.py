"""Pack's two-pass exchange and partitions from the listing: plan arithmetic and real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import SAMPLE_CONFIG

from pipeline.config import load_config
from pipeline.core.layout import RunLayout
from pipeline.formats import sectioned
from pipeline.run.driver import run_pipeline
from pipeline.tokens.pack import pack_plan

MiB = 2**20


def _run(tmp_path: Path, name: str, *sets: str):
    cfg = load_config(SAMPLE_CONFIG, output_uri=str(tmp_path / name), overrides=list(sets))
    result = run_pipeline(cfg, show_progress=False)
    names = [s[k] for s in result.manifest["shards"] for k in ("bin", "idx")]
    shards = [(result.version / name).read_bytes() for name in names]
    return cfg, result, shards


@pytest.mark.usefixtures("ray_local")
def test_exchange_cut_does_not_change_shard_bytes_and_pack_requests_stay_linear(tmp_path):
    small = ("ingest.unit_bytes=128KiB", "pack.shard_bytes=128KiB")
    _, _, one_piece = _run(tmp_path, "a", *small)
    # tiny request size: many buckets and groups, so every shard merges several sections
    cfg, result, cut = _run(tmp_path, "b", *small, "pack.exchange_request_bytes=16KiB")
    assert cut == one_piece and len(cut) >= 2 * 10
    # a tiny task cap: more groups and buckets than the request size asks for, same shards
    _, _, capped = _run(tmp_path, "c", *small, "pack.exchange_task_bytes=64KiB")
    assert capped == one_piece
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    stats = json.loads(layout.stats.read_bytes())["stages"]
    [packed] = [s for s in stats if s["stage"] == "pack"]
    units = len(set(layout.units.read_parquet()["unit_id"].to_pylist()))
    shards = len(result.manifest["shards"])
    plan = pack_plan(
        result.manifest["counts"]["tokens"] * 2, units, 128 * 1024, 16 * 1024
    )  # the sample's tokenizer is uint16
    assert plan.buckets > 1 and plan.groups > 1
    # pass 1: index + tokens per unit and bucket, pass 2: one per group and shard, + the verify
    # reads of each shard; a one-pass pack reads an index and a range per unit and shard
    bound = 2 * units * plan.buckets + plan.groups * shards + 4 * shards
    assert packed["io"]["get_requests"] <= bound < 2 * units * shards


@pytest.mark.usefixtures("ray_local")
def test_partition_count_from_listing_keys_the_read_output(tmp_path):
    cfg, result, _ = _run(tmp_path, "auto", "dedup.partitions=null", "dedup.partition_bytes=1MiB")
    layout = RunLayout.for_config(cfg.for_listing(0), result.manifest["run"]["run_id"])
    listed = sum(layout.inputs.read_parquet()["size"].to_pylist())
    parts = result.manifest["config"]["dedup"]["partitions"]
    assert parts == -(-listed // MiB) and parts >= 2
    # the count is part of the read key: units read for another count are not reused
    assert cfg.for_listing(listed).read_key() != cfg.for_listing(0).read_key()
    resolved = RunLayout.for_config(cfg.for_listing(listed), layout.run_id)
    # one hash object per unit, sectioned by partition (formats/sectioned.py)
    sizes = []
    for u in _unit_ids(layout):
        marker = json.loads(resolved.read_done(u).read_bytes())
        data = resolved.exact_hashes(u).read_bytes()
        offsets = sectioned.index_of(data, parts)  # its index: one offset per partition + 1
        assert len(data) == marker["hash_size"] == offsets[-1] + sectioned.index_bytes(parts)
        sizes.append(int(offsets[-1]))
    assert max(sizes) > 0


def _unit_ids(layout: RunLayout) -> list[str]:
    return sorted(set(layout.units.read_parquet()["unit_id"].to_pylist()))


@pytest.mark.usefixtures("ray_local")
def test_near_dedup_signs_in_the_read_pass_not_from_the_documents(tmp_path):
    from pipeline.run import neardup

    cfg, result, _ = _run(tmp_path, "sig")
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    unit = next(u for u in _unit_ids(layout) if layout.read_docs(u).read_parquet().num_rows)
    outputs = lambda: {  # noqa: E731
        loc.path: loc.read_bytes()
        for loc in (layout.near_sig(unit), layout.near_bands(unit))
        if loc.exists()
    }
    before = outputs()
    assert before
    docs = Path(layout.read_docs(unit).path)
    hidden = docs.with_suffix(".hidden")
    docs.rename(hidden)  # the near pass must not need the documents
    try:
        for q in before:
            Path(q).unlink()
        neardup.near_signatures(layout, unit, cfg)
        assert outputs() == before
    finally:
        hidden.rename(docs)
    # without the read pass's signatures (e.g. deleted by retention): signed from the documents
    Path(layout.read_sigs(unit, neardup.signature_key(cfg)).path).unlink()
    neardup.near_signatures(layout, unit, cfg)
    assert outputs() == before

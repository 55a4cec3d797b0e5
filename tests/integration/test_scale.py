"""Pack's two-pass exchange and partitions from the listing: plan arithmetic and real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import SAMPLE_CONFIG, SOURCES_CONFIG

from pipeline.config.loader import load_config
from pipeline.core.io_counters import IO
from pipeline.core.layout import RunLayout
from pipeline.exchange import sections
from pipeline.formats.run_stats import parse_stats
from pipeline.run.driver import run_pipeline
from pipeline.tokens.pack import pack_plan

MiB = 2**20


def _run(tmp_path: Path, name: str, *sets: str, config: Path = SAMPLE_CONFIG):
    cfg = load_config(config, output_uri=str(tmp_path / name), overrides=list(sets))
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
    layout = RunLayout.for_config(cfg.for_listing(0, []), result.manifest["run"]["run_id"])
    listed = sum(layout.inputs.read_parquet()["size"].to_pylist())
    parts = result.manifest["config"]["dedup"]["partitions"]
    assert parts == -(-listed // MiB) and parts >= 2
    # the count is part of the read key: units read for another count are not reused
    formats = set(layout.inputs.read_parquet()["format"].to_pylist())
    assert cfg.for_listing(listed, formats).read_key() != cfg.for_listing(0, formats).read_key()
    resolved = RunLayout.for_config(cfg.for_listing(listed, formats), layout.run_id)
    # one hash object per unit, sectioned by partition (exchange/sections.py)
    sizes = []
    for u in _unit_ids(layout):
        marker = json.loads(resolved.read_done(u).read_bytes())
        data = resolved.exact_hashes(u).read_bytes()
        offsets = sections.index_of(data, parts)  # its index: one offset per partition + 1
        assert len(data) == marker["hash_size"] == offsets[-1] + sections.index_bytes(parts)
        sizes.append(int(offsets[-1]))
    assert max(sizes) > 0


def _unit_ids(layout: RunLayout) -> list[str]:
    return sorted(set(layout.units.read_parquet()["unit_id"].to_pylist()))


def _exact_removals(cfg, layout: RunLayout, units: list[str]):
    """The run's exact removals by unit bucket, read from the partitions' own objects: the
    rows, in the order, a regrouped exchange gives (sections.writer_ranges)."""
    from pipeline.run.dedup_stage import Removals

    parts, bounds = cfg.dedup.partitions, sections.unit_bounds(units, cfg.dedup.partitions)
    writers = [layout.exact_removed(p) for p in range(parts)]
    objects = [sections.SectionedObject(w, w.size()) for w in writers]
    ranges = sections.writer_ranges(objects, len(bounds))
    return Removals(bounds, [ranges[b] for b in range(len(bounds))])


@pytest.mark.usefixtures("ray_local")
def test_near_dedup_bands_from_the_read_pass_without_signatures_or_documents(tmp_path):
    from pipeline.exchange.plan import ExchangePlan
    from pipeline.run import near_signing, neardup
    from pipeline.run.dedup_stage import group_removals

    # two unit groups and two band-partition buckets: each task reads its group's band files
    cfg, result, _ = _run(tmp_path, "sig", "dedup.exchange_request_bytes=4KiB")
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    units = _unit_ids(layout)
    [folder] = list(Path(layout.exchange("near", neardup.BAND_EXCHANGE).path).iterdir())
    s, k, g = (int(x[1:]) for x in folder.name.split("-"))
    plan = ExchangePlan(s, k, g)
    assert plan.buckets > 1 and plan.groups > 1 and plan.name == folder.name
    from pipeline.run.dedup_stage import document_order
    from pipeline.run.read_stage import Units

    order = document_order(cfg, Units.of(layout.units.read_parquet()))
    index = {u: i for i, u in enumerate(order)}  # as near_dedup numbers the units
    groups = plan.unit_groups([(u, index[u], cfg.sources[0].name) for u in units])
    exact = _exact_removals(cfg, layout, units)
    objects = lambda: {  # noqa: E731  the band and directory exchanges' pass-1 objects
        p.relative_to(layout.run.path): p.read_bytes()
        for name in [neardup.BAND_EXCHANGE]
        for p in sorted(Path((layout.exchange("near", name) / plan.name).path).iterdir())
    }

    def rerun(*hidden: Path) -> None:  # pass 1 again from scratch with these files away
        for p in objects():
            (Path(layout.run.path) / p).unlink()
        for p in hidden:
            p.rename(p.with_suffix(".hidden"))
        try:
            for gi in range(plan.groups):
                for ki in range(plan.buckets):
                    removals = group_removals(exact, groups[gi])
                    neardup.near_band_group(layout, plan, gi, ki, groups[gi], removals, cfg)
        finally:
            for p in hidden:
                p.with_suffix(".hidden").rename(p)

    before = objects()
    assert len(before) == 2 * plan.groups * plan.buckets  # .bin and .json of each task
    unit = next(u for u in units if layout.read_docs(u).read_parquet().num_rows)
    banded = Path(layout.read_bands(unit, near_signing.band_key(cfg)).path)
    sig_files = [Path(layout.read_sigs(u, near_signing.signature_key(cfg)).path) for u in units]
    doc_files = [Path(layout.read_docs(u).path) for u in units]
    rerun(*sig_files, *doc_files)  # banding needs neither the signatures nor the documents
    assert objects() == before
    # without the read pass's band file (e.g. deleted by retention): no text is kept to sign
    # again, and the stored signatures are narrowed (the band hashes need all 32 bits), so the
    # task says so; the read stage of the next run reads the unit again (test_resume)
    banded.unlink()
    with pytest.raises(FileNotFoundError, match="band object is missing"):
        rerun()


@pytest.mark.usefixtures("ray_local")
def test_near_dedup_reads_each_signature_file_at_most_once(tmp_path):
    from pipeline.exchange.plan import ExchangePlan
    from pipeline.run import near_signing, neardup
    from pipeline.run.dedup_stage import group_removals

    cfg, result, _ = _run(tmp_path, "once")
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    units = _unit_ids(layout)
    # what one read of each unit's signature file and band file costs, read the way near dedup
    # reads them (a Parquet read may pull a footer twice), and the exact removals' ranges each
    # band task reads (those of its units' buckets, once per band bucket)
    reads = []
    for u in units:
        io = IO.snapshot()
        layout.read_sigs(u, near_signing.signature_key(cfg)).read_parquet()
        after_sigs = IO.snapshot()
        layout.read_bands(u, near_signing.band_key(cfg)).read_bytes()
        reads.append((IO.delta(after_sigs, io), IO.delta(IO.snapshot(), after_sigs)))
    sigs = sum(s["bytes_read"] for s, _ in reads)
    bands = sum(b["bytes_read"] for _, b in reads)
    [folder] = list(Path(layout.exchange("near", neardup.BAND_EXCHANGE).path).iterdir())
    s, k, g = (int(x[1:]) for x in folder.name.split("-"))
    plan, exact = ExchangePlan(s, k, g), _exact_removals(cfg, layout, units)
    groups = plan.unit_groups([(u, i, None) for i, u in enumerate(units)])
    exact_bytes = plan.buckets * sum(
        b - a for group in groups for ranges in group_removals(exact, group) for _, a, b in ranges
    )
    [near] = [
        s["io"] for s in json.loads(layout.stats.read_bytes())["stages"] if s["stage"] == "near"
    ]
    assert near["bytes_written"] > 0 and result.manifest["counts"]["removed_near"] > 0
    # every object near writes is read once (by its exchange's pass 1, then by its reader); on
    # top of that: each band file and each signature file once. A signature exchange (read by
    # pass 1 and each reader that joins signatures) would add a multiple of `sigs` (before:
    # 3x on the make_corpus 256 MB run, 118 MB read beyond what was written for 40 MB of them).
    assert near["bytes_read"] - near["bytes_written"] <= sigs + bands + exact_bytes


@pytest.mark.usefixtures("ray_local")
def test_one_pass_pack_gives_the_two_pass_shards_and_moves_the_tokens_once(tmp_path):
    """The sample's packs (two sources, each with a validation split) with one group per unit
    (16 KiB requests, 1 MiB shards: every unit's part of a shard is big enough) read the token
    files in the shard tasks: the same shard bytes as two passes, no exchange object, less read
    and written."""
    two = "pack.exchange_request_bytes=1MiB"  # one group of all units: two passes
    two_cfg, two, two_shards = _run(tmp_path, "two", two, config=SOURCES_CONFIG)
    one = "pack.exchange_request_bytes=16KiB"
    one_cfg, one, one_shards = _run(tmp_path, "one", one, config=SOURCES_CONFIG)
    assert one_shards == two_shards and len(one.manifest["splits"]["valid"]) >= 1
    moved, exchange_bytes = {}, 0
    for cfg, result in ((two_cfg, two), (one_cfg, one)):
        layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
        [packed] = [s for s in parse_stats(layout.stats.read_bytes()).stages if s.stage == "pack"]
        moved[result is one] = packed.io["bytes_read"] + packed.io["bytes_written"]
        exchanged = [p for p in Path(layout.run.path, "pack").iterdir() if p.name != "docs"]
        assert bool(exchanged) == (result is two), exchanged
        exchange_bytes += sum(f.stat().st_size for p in exchanged for f in p.rglob("*.bin"))
    # the exchange objects' write and read (their token sections are zstd frames, so smaller
    # than the tokens: tokens/framed.py)
    assert exchange_bytes > 0 and moved[False] - moved[True] >= 1.5 * exchange_bytes

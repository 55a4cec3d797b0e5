"""Pack's two-pass exchange and partitions from the listing: plan arithmetic and real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, SAMPLE_CONFIG

from pipeline.config import load_config
from pipeline.config_sections import DedupConfig, IngestConfig, PackConfig
from pipeline.core.layout import RunLayout
from pipeline.core.storage import IO
from pipeline.formats import sectioned
from pipeline.run.driver import run_pipeline
from pipeline.tokens.pack import key_range, pack_plan

MiB = 2**20


def test_plan_pieces_reach_the_request_size_at_production_settings():
    # 10 TB of tokens, 256 MiB units and shards, 16 MiB pieces
    total = 10 * 10**12
    plan = pack_plan(total, total // (256 * MiB), 256 * MiB, 16 * MiB)
    assert (plan.buckets, plan.groups) == (16, 16)
    units = total // (256 * MiB)
    assert total / (units * plan.buckets) >= 16 * MiB  # pass 1 token GET
    assert total / (plan.groups * plan.shards) >= 15 * MiB  # pass 2 GET (shards a bit < target)


def test_plan_requests_grow_linearly_at_fixed_unit_and_shard_sizes():
    def gets(total: int) -> int:
        units = total // (2 * MiB)
        plan = pack_plan(total, units, MiB, 16 * MiB)
        return 2 * units * plan.buckets + plan.groups * plan.shards

    assert gets(16 * 64 * MiB) <= 16 * gets(64 * MiB) * 1.01


def test_buckets_and_groups_cover_every_shard_and_unit_once():
    plan = pack_plan(1000 * MiB, 37, 7 * MiB, MiB)
    shards = [s for k in range(plan.buckets) for s in plan.bucket_shards(k)]
    assert shards == list(range(plan.shards))
    units = list(range(37))
    assert [u for g in plan.unit_groups(units) for u in g] == units
    for k in range(plan.buckets):
        lo, hi = plan.bucket_range(k)
        span = plan.bucket_shards(k)
        assert lo == key_range(span.start, plan.shards)[0]
        assert hi == key_range(span.stop - 1, plan.shards)[1]
        assert all(plan.bucket_of(s) == k for s in span)


def test_partitions_follow_the_listed_bytes_unless_given():
    auto = DedupConfig(partition_bytes=MiB)
    assert [auto.partition_count(b) for b in (0, 1, MiB, MiB + 1, 10 * MiB)] == [1, 1, 1, 2, 10]
    assert DedupConfig(partitions=3, partition_bytes=MiB).partition_count(10 * MiB) == 3


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
def test_near_dedup_bands_from_the_read_pass_without_signatures_or_documents(tmp_path):
    from pipeline.run import near_signing, neardup
    from pipeline.tokens.pack import PackPlan

    # two unit groups and two band-partition buckets: each task reads its group's band files
    cfg, result, _ = _run(tmp_path, "sig", "dedup.exchange_request_bytes=4KiB")
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    units = _unit_ids(layout)
    [folder] = list(Path(layout.exchange("near", "bands").path).iterdir())
    s, k, g = (int(x[1:]) for x in folder.name.split("-"))
    plan = PackPlan(s, k, g)
    assert plan.buckets > 1 and plan.groups > 1 and plan.name == folder.name
    groups = plan.unit_groups([(u, i, cfg.sources[0].name) for i, u in enumerate(units)])
    objects = lambda: {  # noqa: E731  the band and directory exchanges' pass-1 objects
        p.relative_to(layout.run.path): p.read_bytes()
        for name in ("bands", "dir")
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
                    neardup.near_band_group(layout, plan, gi, ki, groups[gi], cfg)
        finally:
            for p in hidden:
                p.with_suffix(".hidden").rename(p)

    before = objects()
    assert len(before) == 4 * plan.groups * plan.buckets  # .bin and .json of both exchanges
    unit = next(u for u in units if layout.read_docs(u).read_parquet().num_rows)
    signed = Path(layout.read_sigs(unit, near_signing.signature_key(cfg)).path)
    banded = Path(layout.read_bands(unit, near_signing.band_key(cfg)).path)
    band_file = banded.read_bytes()
    sig_files = [Path(layout.read_sigs(u, near_signing.signature_key(cfg)).path) for u in units]
    doc_files = [Path(layout.read_docs(u).path) for u in units]
    rerun(*sig_files, *doc_files)  # banding needs neither the signatures nor the documents
    assert objects() == before
    # without the read pass's band file: from its signatures, and the file written back
    banded.unlink()
    rerun()
    assert objects() == before and banded.read_bytes() == band_file
    # without either (e.g. deleted by retention): signed from the documents
    banded.unlink()
    signed.unlink()
    rerun()
    assert objects() == before and banded.read_bytes() == band_file and signed.exists()


@pytest.mark.usefixtures("ray_local")
def test_near_dedup_reads_each_signature_file_at_most_once(tmp_path):
    from pipeline.run import near_signing, neardup

    cfg, result, _ = _run(tmp_path, "once")
    layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    units = _unit_ids(layout)
    # what one read of each unit's signature file, band file and exact removals costs, read
    # the way near dedup reads them (a Parquet read may pull a footer twice)
    reads = []
    for u in units:
        io = IO.snapshot()
        layout.read_sigs(u, near_signing.signature_key(cfg)).read_parquet()
        after_sigs = IO.snapshot()
        layout.read_bands(u, near_signing.band_key(cfg)).read_bytes()
        neardup._removed_keys(layout, u, cfg, cfg.sources[0].name)
        reads.append((IO.delta(after_sigs, io), IO.delta(IO.snapshot(), after_sigs)))
    sigs = sum(s["bytes_read"] for s, _ in reads)
    bands = sum(b["bytes_read"] for _, b in reads)
    [near] = [
        s["io"] for s in json.loads(layout.stats.read_bytes())["stages"] if s["stage"] == "near"
    ]
    assert near["bytes_written"] > 0 and result.manifest["counts"]["removed_near"] > 0
    # every object near writes is read once (by its exchange's pass 1, then by its reader); on
    # top of that: each band file and each signature file once. A signature exchange (read by
    # pass 1 and each reader that joins signatures) would add a multiple of `sigs` (before:
    # 3x on the make_corpus 256 MB run, 118 MB read beyond what was written for 40 MB of them).
    assert near["bytes_read"] - near["bytes_written"] <= sigs + bands


def test_dry_run_at_10tb_cuts_like_the_pipeline_and_pack_moves_large_pieces():
    from pipeline.report import dry_run

    tb = 10**13
    cut, stages = dry_run.dry_run(tb)
    # without a config: the config models' defaults, the sizes a run with defaults would use
    unit, shard = int(IngestConfig().unit_bytes), int(PackConfig().shard_bytes)
    assert abs(cut["units"] - tb / unit) / cut["units"] < 0.1
    assert cut["partitions"] == DedupConfig().partition_count(tb)
    assert cut["shards"] == pack_plan(cut["token_bytes"], cut["units"], shard, 16 * MiB).shards
    # at 256 MiB units (configs/s3.yaml) pack's GETs reach its 16 MiB aim; at the default 64 MiB
    # a unit's token part per key bucket is smaller (~11 MB). Counted: the pieces that carry
    # tokens (not pass 1's small index GETs, one per unit and bucket; no shard is read back any
    # more, whose whole-shard GETs used to lift the mean)
    cut, stages = dry_run.dry_run(tb, unit_bytes=256 * MiB)
    pack_stage = next(s for s in stages if s.name == "pack")
    index_gets = cut["units"] * cut["pack_buckets"]
    assert pack_stage.bytes_read / (pack_stage.requests["get"] - index_gets) >= 16 * 10**6
    assert all(s.core_hours >= 0 and s.dollars >= 0 for s in stages)


def test_plan_at_a_corpus_size_takes_the_configs_unit_and_shard_sizes(capsys):
    """It printed 37,253 units for 10 TB whatever the config said (the option's unset value
    hid the config's); the sample's 1 MiB units and shards give ~9.5M units and ~7.3M shards."""
    from pipeline.cli import main

    base = ["plan", "--corpus-bytes", "10TB", "--config", str(SAMPLE_CONFIG)]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "settings: units of 1.0MiB (ingest.unit_bytes), shards of 1.0MiB" in out
    assert "9,536,744 units, 4 dedup partitions, 7,343,293 shards" in out
    assert main([*base, "--unit-bytes", "256MiB"]) == 0  # an option still wins over the config
    assert "37,253 units" in capsys.readouterr().out


def test_dry_run_requests_grow_linearly_with_fixed_partition_size_settings():
    from pipeline.report import dry_run

    def requests(corpus: int, stage: str) -> int:  # at configs/s3.yaml's 256 MiB units
        _, stages = dry_run.dry_run(corpus, unit_bytes=256 * MiB, dedup=DedupConfig(partitions=64))
        return sum(next(s for s in stages if s.name == stage).requests.values())

    for stage in ("read+hash", "tokenize", "pack"):
        assert requests(10**13, stage) <= 1.1 * 10 * requests(10**12, stage)


def test_dry_run_dedup_requests_grow_linearly_with_partitions_from_the_listing():
    from pipeline.report import dry_run

    def requests(corpus: int, stage: str) -> int:
        # task cap out of the way: the exchanges' own cut (formats/sectioned.py)
        _, stages = dry_run.dry_run(
            corpus, unit_bytes=256 * MiB, dedup=DedupConfig(exchange_task_bytes=2**60)
        )
        return sum(next(s for s in stages if s.name == stage).requests.values())

    for stage in ("read+hash", "exact", "near", "audit"):
        assert requests(10**13, stage) <= 1.3 * 10 * requests(10**12, stage), stage
    # with the default cap on one regroup task's bytes, 10 TB in 256 MiB units (configs/s3.yaml;
    # the default 64 MiB units make ~14M) still needs < 10M requests
    _, stages = dry_run.dry_run(10**13, unit_bytes=256 * MiB)
    assert sum(sum(s.requests.values()) for s in stages) < 10**7


def test_plan_and_report_print_the_dry_run(capsys):
    from pipeline.cli import main

    assert main(["plan", "--corpus-bytes", "1TB", "--unit-bytes", "128MiB"]) == 0
    out = capsys.readouterr().out
    assert "units" in out and "pack" in out and "core-h" in out
    assert "local disk per pass-1 task" in out
    # --set without a config would be silently ignored: refused instead
    assert main(["plan", "--corpus-bytes", "1TB", "--set", "pack.shard_bytes=1GiB"]) == 2
    assert "--set needs --config" in capsys.readouterr().err
    # with a config, a lower pack task cap trades local disk for requests
    base = ["plan", "--corpus-bytes", "10TB", "--config", str(REPO / "configs/s3.yaml")]
    assert main(base) == 0
    uncapped = capsys.readouterr().out
    assert main([*base, "--set", "pack.exchange_task_bytes=8GiB"]) == 0
    capped = capsys.readouterr().out
    assert "40.1GB of local disk" in uncapped and "8.5GB of local disk" in capped


def test_projected_bill_scales_storage_from_raw_bytes_and_adds_run_and_training():
    from pipeline.report import bill as bills
    from pipeline.report import dry_run
    from pipeline.report.prices import PricesConfig

    report = {
        "before": {"retained": [{"data_class": "raw", "bytes": 10**9}]},
        "after": {
            "retained": [
                {"data_class": "raw", "bytes": 10**9, "usd_month": 0.02},
                {"data_class": "versions", "bytes": 7 * 10**8, "usd_month": 0.015},
            ]
        },
    }
    cut, stages = dry_run.dry_run(10**13)
    bill = bills.projected_bill(
        report,
        10**13,
        stages,
        cut,
        runs_per_month=2,
        epochs_per_month=1,
        range_bytes=16 * MiB,
        prices=PricesConfig(),
    )
    assert bill["scale"] == 10**4
    assert bill["storage_usd_by_class"] == pytest.approx({"raw": 200.0, "versions": 150.0})
    assert bill["pipeline_request_usd"] == pytest.approx(2 * sum(s.dollars for s in stages))
    assert bill["training_request_usd"] > 0
    assert "total" in "\n".join(bills.bill_lines(bill))


def test_bench_scale_cuts_the_corpus_by_file_and_sums_stage_waves(tmp_path):
    from fractions import Fraction

    from pipeline.bench.scale import parts_of, stage_rows

    for i in range(8):
        (tmp_path / f"part-{i}.jsonl").write_bytes(b"x" * 100)
    parts = parts_of(tmp_path, [Fraction(1, 4), Fraction(1, 2), Fraction(1)])
    assert [len(p) for p in parts] == [2, 4, 8]
    assert parts[0] == sorted(tmp_path.iterdir())[:2]
    rows = stage_rows(
        [
            {
                "stage": "pack",
                "seconds": 1.0,
                "peak_rss_mb": 10,
                "io": {"get_requests": 2, "bytes_read": 100, "put_requests": 1},
            },
            {
                "stage": "pack",
                "seconds": 2.0,
                "peak_rss_mb": 30,
                "io": {"get_requests": 3, "bytes_read": 400},
            },
        ]
    )
    assert rows["pack"]["requests"] == 6 and rows["pack"]["mean_get_bytes"] == 100
    assert rows["pack"]["peak_rss_mb"] == 30 and rows["pack"]["seconds"] == 3.0

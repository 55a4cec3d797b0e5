"""Pack's plan, dedup's partitions, the dry run and the projected bill: arithmetic only (the
runs that check the same cuts on real data are tests/integration/test_scale.py)."""

from __future__ import annotations

import pytest
from support import REPO, SAMPLE_CONFIG

from pipeline.config.sections import DedupConfig, IngestConfig, PackConfig
from pipeline.report.dry_run import dry_run
from pipeline.tokens.pack import INDEX_ROW_BYTES, key_range, pack_plan

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
    shards = [s for k in range(plan.buckets) for s in plan.bucket_parts(k)]
    assert shards == list(range(plan.shards))
    units = list(range(37))
    assert [u for g in plan.unit_groups(units) for u in g] == units
    for k in range(plan.buckets):
        lo, hi = plan.bucket_range(k)
        span = plan.bucket_parts(k)
        assert lo == key_range(span.start, plan.shards)[0]
        assert hi == key_range(span.stop - 1, plan.shards)[1]
        assert all(plan.bucket_of(s) == k for s in span)


def test_partitions_follow_the_listed_bytes_unless_given():
    auto = DedupConfig(partition_bytes=MiB)
    assert [auto.partition_count(b) for b in (0, 1, MiB, MiB + 1, 10 * MiB)] == [1, 1, 1, 2, 10]
    assert DedupConfig(partitions=3, partition_bytes=MiB).partition_count(10 * MiB) == 3


def test_dry_run_at_10tb_cuts_like_the_pipeline_and_pack_moves_large_pieces():
    from pipeline.report import dry_run
    from pipeline.report.dry_run_assumptions import TOKEN_STORED_RATIO

    tb = 10**13
    cut, stages = dry_run.dry_run(tb)
    # without a config: the config models' defaults, the sizes a run with defaults would use
    unit, shard = int(IngestConfig().unit_bytes), int(PackConfig().shard_bytes)
    assert abs(cut["units"] - tb / unit) / cut["units"] < 0.1
    assert cut["partitions"] == DedupConfig().partition_count(tb)
    assert cut["shards"] == pack_plan(cut["token_bytes"], cut["units"], shard, 16 * MiB).shards
    # at 256 MiB units (configs/s3.yaml) pack's GETs reach its 16 MiB aim of raw tokens; at the
    # default 64 MiB a unit's token part per key bucket is smaller (~11 MB). Counted: the pieces
    # that carry tokens (not pass 1's small index GETs, one per unit and bucket; no shard is
    # read back any more, whose whole-shard GETs used to lift the mean), stored compressed: a GET
    # moves TOKEN_STORED_RATIO of its raw tokens
    cut, stages = dry_run.dry_run(tb, unit_bytes=256 * MiB)
    pack_stage = next(s for s in stages if s.name == "pack")
    index_gets = cut["units"] * cut["pack_buckets"]
    raw_read = pack_stage.bytes_read / TOKEN_STORED_RATIO
    assert raw_read / (pack_stage.requests["get"] - index_gets) >= 16 * 10**6
    assert all(s.core_hours >= 0 and s.dollars >= 0 for s in stages)


def test_plan_at_a_corpus_size_takes_the_configs_unit_and_shard_sizes(capsys):
    """It printed the default's units whatever the config said (the option's unset value hid
    the config's); the sample's 1 MiB units and shards give ~95k units and ~73k shards for
    100 GB (10 TB: 9.5M units, 70 s of cutting; the arithmetic is the same)."""
    from pipeline.cli.main import main

    base = ["plan", "--corpus-bytes", "100GB", "--config", str(SAMPLE_CONFIG)]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "settings: units of 1.0MiB (ingest.unit_bytes), shards of 1.0MiB" in out
    assert "95,368 units, 4 dedup partitions, 73,433 shards" in out
    assert main([*base, "--unit-bytes", "256MiB"]) == 0  # an option still wins over the config
    assert "373 units" in capsys.readouterr().out


def test_dry_run_requests_grow_linearly_with_fixed_partition_size_settings():
    from pipeline.report import dry_run

    def requests(corpus: int, stage: str) -> int:  # at configs/s3.yaml's 256 MiB units
        _, stages = dry_run.dry_run(corpus, unit_bytes=256 * MiB, dedup=DedupConfig(partitions=64))
        return sum(next(s for s in stages if s.name == stage).requests.values())

    for stage in ("read+hash", "select", "pack"):
        assert requests(10**13, stage) <= 1.1 * 10 * requests(10**12, stage)


def test_dry_run_dedup_requests_grow_linearly_with_partitions_from_the_listing():
    from pipeline.report import dry_run

    def requests(corpus: int, stage: str) -> int:
        # task cap out of the way: the exchanges' own cut (exchange/plan.py)
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
    from pipeline.cli.main import main

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
    assert "40.1GB of local disk" in uncapped and "8.2GB of local disk" in capped


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
        report, 10**13, stages, cut, runs_per_month=2, epochs_per_month=1,
        range_bytes=16 * MiB, prices=PricesConfig(),
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
            {"stage": "pack", "seconds": 1.0, "peak_rss_mb": 10, "io": {"get_requests": 2,
             "bytes_read": 100, "put_requests": 1}},
            {"stage": "pack", "seconds": 2.0, "peak_rss_mb": 30, "io": {"get_requests": 3,
             "bytes_read": 400}},
        ]
    )
    assert rows["pack"]["requests"] == 6 and rows["pack"]["mean_get_bytes"] == 100
    assert rows["pack"]["peak_rss_mb"] == 30 and rows["pack"]["seconds"] == 3.0


def test_one_pass_only_while_each_units_part_of_a_shard_is_a_large_read():
    # 22 units of 30 MB of tokens, 256 MiB shards (3), 16 MiB requests: 10 MB a unit and shard
    total, docs = 22 * 30 * 10**6, 22 * 6_000
    plan = pack_plan(total, 22, 256 * MiB, 16 * MiB, docs=docs)
    assert plan.shards == 3 and plan.one_pass
    assert 2 * total / (22 * plan.shards) >= 16 * MiB  # each read >= half the request size
    # twice the units of the same size: 5 MB a unit and shard, two passes
    assert not pack_plan(2 * total, 44, 256 * MiB, 16 * MiB, docs=2 * docs).one_pass
    # without the document count (takedown, callers that cannot say) always two passes
    assert not pack_plan(total, 22, 256 * MiB, 16 * MiB).one_pass
    # no unit: the empty shard of a single input comes from the two-pass path
    assert not pack_plan(0, 0, 256 * MiB, 16 * MiB, docs=0).one_pass
    # tiny documents: reading every unit's index once per shard would cost more than the copy
    many = 2 * total // (plan.shards * INDEX_ROW_BYTES) + 1
    assert not pack_plan(total, 22, 256 * MiB, 16 * MiB, docs=many).one_pass


def test_dry_run_packs_in_one_pass_where_the_run_would():
    cut, stages = dry_run(1 * 10**9)
    [pack] = [s for s in stages if s.name == "pack"]
    assert cut["pack_one_pass"] and pack.tasks == cut["shards"]
    assert pack.bytes_written == cut["token_bytes"]  # the shards only: no exchange object
    assert pack.requests["get"] == 2 * cut["units"] * cut["shards"]
    big, _ = dry_run(10 * 10**12)
    assert not big["pack_one_pass"]  # at scale the units outnumber shard / request bytes


def test_plan_takes_a_corpus_token_ratios_for_the_token_bytes_it_moves(capsys):
    """--token-ratio and --stored-ratio: a corpus's own ratios (a run's) instead of the plan's
    assumed 0.77 and 0.56; pack moves r·t per crossing of the token files and t of shards."""
    from pipeline.cli.main import main
    from pipeline.report import dry_run
    from pipeline.report.dry_run_printout import bytes_moved_per_input_byte

    _, base = dry_run.dry_run(10**12)
    _, own = dry_run.dry_run(10**12, token_ratio=0.65, stored_ratio=0.39)
    pack, own_pack = (next(s for s in st if s.name == "pack") for st in (base, own))
    assert own_pack.bytes_written < pack.bytes_written * 0.65 / 0.77 * 1.01
    assert main(["plan", "--corpus-bytes", "1TB", "--token-ratio", "0.65", "--stored-ratio",
                 "0.39"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    moved = bytes_moved_per_input_byte(*dry_run.dry_run(10**12, token_ratio=0.65,
                                                        stored_ratio=0.39))  # fmt: skip
    assert f"bytes moved {moved:.2f} x input" in out


def test_plan_counts_the_fetch_tasks_the_run_would_cut():
    """Near dedup's fetch tasks, as the run cuts them (dedup_stage.fetch_runs) from the
    candidates' rows: at 16 GiB partitions and 32 MiB requests fewer tasks than unit buckets,
    whose exchange then runs in one pass; at the default 1 GiB partitions one per bucket."""
    from pipeline.dedup.minhash import cand_row_bytes
    from pipeline.exchange.plan import direct
    from pipeline.report import dry_run
    from pipeline.report.dry_run_assumptions import CANDIDATE_DOCS_PER_DOC
    from pipeline.run.dedup_stage import fetch_runs

    gib = 2**30
    for dedup, one_pass in [
        (DedupConfig(partition_bytes=16 * gib, exchange_request_bytes=32 * MiB,
                     exchange_task_bytes=32 * gib), True),  # fmt: skip
        (DedupConfig(), False),
    ]:
        cut, _ = dry_run.dry_run(10**13, unit_bytes=256 * MiB, dedup=dedup)
        p, buckets = cut["partitions"], min(cut["partitions"], cut["units"])
        cands = int(cut["docs"] * CANDIDATE_DOCS_PER_DOC * cand_row_bytes(256))
        runs = fetch_runs(dedup.model_copy(update={"partitions": p}), buckets, cands)
        assert cut["near_fetch_tasks"] == len(runs)
        assert [b for r in runs for b in r] == list(range(buckets))  # each bucket once
        request = int(dedup.exchange_request_bytes)
        assert direct(p, len(runs), cands, request, small_gets=0) == one_pass
        assert (len(runs) < buckets) == one_pass


def test_configs_s3_sizes_give_every_data_stage_large_gets_at_10tb():
    """Issue 32's targets at configs/s3.yaml's sizes, as plan projects 10 TB: every data stage's
    mean GET >= 8 MB and <= 6 M requests (what each setting buys: docs/scaling-and-costs.md)."""
    from pipeline.config.loader import load_config
    from pipeline.report.dry_run import plan_for_config

    _, stages = plan_for_config(load_config(REPO / "configs/s3.yaml"), 10**13)
    for s in stages:
        if s.requests.get("get"):
            assert s.bytes_read / s.requests["get"] >= 8 * 10**6, s.name
    assert sum(sum(s.requests.values()) for s in stages) <= 6 * 10**6


def test_plan_counts_the_exact_removal_buckets_each_near_band_task_reads():
    """The plan's exact removal reads in near (dry_run_stages.exact_removal_spans: per band
    group, the unit buckets that hold its units) are those dedup_stage.group_removals hands the
    group's tasks, at most B + G - 1 in all: linear in the corpus, where a read per unit and task
    made them M x K."""
    from pipeline.exchange import sections
    from pipeline.exchange.plan import ExchangePlan
    from pipeline.report.dry_run_stages import exact_removal_spans
    from pipeline.run.dedup_stage import Removals, group_removals

    for units, buckets, groups in [(1, 4, 1), (7, 3, 2), (12, 5, 3), (100, 7, 9), (583, 583, 33),
                                   (9314, 583, 33), (40, 40, 40)]:  # fmt: skip
        ids = [f"u{i:05d}" for i in range(units)]
        bounds = sections.unit_bounds(ids, buckets)
        exact = Removals(bounds, [[(b,)] for b in range(len(bounds))])  # a bucket's ranges
        cut = ExchangePlan(8, 1, groups).unit_groups([(u, i, None) for i, u in enumerate(ids)])
        code = [len(group_removals(exact, group)) for group in cut]
        assert exact_removal_spans(units, buckets, groups) == code, (units, buckets, groups)
        assert sum(code) <= len(bounds) + groups - 1

"""Cost report: dollar arithmetic against hand-computed values, the report built from a dataset,
a self-contained HTML page, and request counters that match what the S3 server received."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import REPO

from pipeline.cli.main import main
from pipeline.config.model import Config
from pipeline.core.storage import Location
from pipeline.formats.manifest import FORMAT_V1, commit_manifest
from pipeline.ingest.listing import list_inputs
from pipeline.report import cost
from pipeline.report.build import build_report, write_report
from pipeline.report.html import format_html
from pipeline.report.markdown import format_markdown
from pipeline.report.prices import PricesConfig
from pipeline.retention.decide import DAY, StoredObject, decide
from pipeline.retention.policy import RetentionRules

GIB = 2**30
NOW = 1_800_000_000.0
V1, V2 = "20250101T000000.000000Z-ab12", "20250201T000000.000000Z-ab12"


def obj(
    key: str, size: float, days: float, storage_class: str = "STANDARD", root: str = "dataset"
) -> StoredObject:
    return StoredObject(root, key, f"s3://b/ds/{key}", int(size), NOW - days * DAY, storage_class)


@pytest.fixture
def decisions():
    """2 GiB raw; V1 (1 GiB shard in STANDARD_IA for 10 days) is beyond keep_newest=1;
    V2 (1 GiB STANDARD) is live; 0.5 GiB of 30-day-old token parts."""
    listing = [
        obj("a.jsonl", 2 * GIB, 100, root="raw"),
        obj(f"{V1}/shard-00000.bin", GIB, 10, "STANDARD_IA"),
        obj(f"{V1}/manifest.json", 0, 10, "STANDARD_IA"),
        obj(f"{V2}/shard-00000.bin", GIB, 5),
        obj(f"{V2}/manifest.json", 0, 5),
        obj("_work/tokens/t/u.bin", GIB / 2, 30),
    ]
    rules = RetentionRules.model_validate({"versions": {"keep_newest": 1}})
    return decide(listing, rules, NOW, 1.0, {V1: [], V2: []})


STREAMS = [
    cost.ReadStream("pipeline read", "raw", 2 * GIB, {"get": 200, "list": 10, "put": 50}),
    cost.ReadStream("training", "versions", 3 * GIB, {"get": 1000}),
]


def test_dollars_equal_hand_computed_values(decisions):
    prices = PricesConfig()
    assert {d.obj.key for d in decisions if d.action == "delete"} == {
        f"{V1}/shard-00000.bin",
        f"{V1}/manifest.json",
        "_work/tokens/t/u.bin",
    }
    before = cost.monthly(cost.retained_rows(decisions, after=False), STREAMS, prices)
    after = cost.monthly(cost.retained_rows(decisions, after=True), STREAMS, prices)
    # storage: raw 2 x 0.023 + V1 1 x 0.0125 + V2 1 x 0.023 + tokens 0.5 x 0.023
    assert before["storage_usd"] == pytest.approx(0.093)
    assert after["storage_usd"] == pytest.approx(0.069)
    # requests: pipeline 200 GET x 0.0004/1000 + 60 LIST/PUT x 0.005/1000;
    # training 1000 GET, before half IA (0.001) half STANDARD (0.0004), after all STANDARD
    assert before["request_usd"] == pytest.approx(0.00008 + 0.0003 + 0.0007)
    assert after["request_usd"] == pytest.approx(0.00008 + 0.0003 + 0.0004)
    # retrieval: 3 GiB read, half of it from IA at $0.01/GB; none after
    assert before["retrieval_usd"] == pytest.approx(0.015)
    assert after["retrieval_usd"] == 0
    assert before["total_usd"] == pytest.approx(0.10908)
    assert after["total_usd"] == pytest.approx(0.06978)
    assert before["retained_per_read"] == pytest.approx(4.5 / 5)
    assert after["retained_per_read"] == pytest.approx(3 / 5)
    once = cost.apply_once(decisions, NOW, prices)
    # V1's shard leaves STANDARD_IA after 10 of its 30 minimum days: 1 GiB x 0.0125 x 20/30
    assert once["early_delete_usd"] == pytest.approx(0.0125 * 20 / 30)
    assert (once["deletes"], once["delete_bytes"], once["copies"]) == (3, 1.5 * GIB, 0)


def test_transition_copies_are_priced_at_the_target_class():
    listing = [obj("_work/tokens/t/u.bin", GIB, 40), obj("_work/tokens/t/v.bin", GIB, 40)]
    rules = RetentionRules.model_validate(
        {"token_parts": {"transitions": [{"after_days": 30, "storage_class": "GLACIER_IR"}]}}
    )
    decisions = decide(listing, rules, NOW, 1.0, {})
    once = cost.apply_once(decisions, NOW, PricesConfig())
    assert once["copies"] == 2 and once["copy_usd"] == pytest.approx(2 * 0.02 / 1000)
    after = cost.price_rows(cost.retained_rows(decisions, after=True), PricesConfig())
    assert after == [
        {
            "data_class": "token_parts",
            "storage_class": "GLACIER_IR",
            "objects": 2,
            "bytes": 2 * GIB,
            "usd_month": pytest.approx(0.008),
        }
    ]


def test_napkin_small_files_vs_shards():
    n = cost.layout_napkin(
        documents=1_000_000,
        dataset_bytes=2 * GIB,
        shards=4,
        shard_gets_per_epoch=132,
        prices=PricesConfig(),
    )
    assert n["small_files"]["request_usd_per_epoch"] == pytest.approx(0.40)
    assert n["shards"]["request_usd_per_epoch"] == pytest.approx(132 * 0.0004 / 1000)
    assert n["small_files"]["first_byte_wait_s_per_epoch"] == pytest.approx(50_000)
    assert n["request_ratio"] == pytest.approx(1_000_000 / 132)


# -- the report from a dataset ---------------------------------------------------------------
STATS = {
    "format": "pipeline.stats/1",
    "run_id": "r",
    "stages": [
        {"stage": "list", "io": {"list_requests": 3}},
        {
            "stage": "read+hash",
            "io": {"bytes_read": 5000, "get_requests": 7, "put_requests": 9, "bytes_written": 4000},
        },
        {"stage": "tokenize", "io": {"bytes_read": 3000, "get_requests": 4}},
        {"stage": "pack", "io": {"bytes_read": 2000, "get_requests": 2, "put_requests": 2}},
    ],
}


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Config, Location]:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.jsonl").write_bytes(b"x" * 10_000)
    cfg = Config.model_validate(
        {
            "name": "ds",
            "input": {"uri": str(tmp_path / "raw")},
            "output": {"uri": str(tmp_path / "out")},
            "tokenize": {"tokenizer": "unused.json"},
        }
    )
    root = Location.from_uri(str(tmp_path / "out")) / "ds"
    (root / "_work/runs/r/stats.json").write_bytes(json.dumps(STATS).encode())
    # the run's input manifest: the raw files this dataset read (retention's raw scope)
    listed, _ = list_inputs(Location.from_uri(str(tmp_path / "raw")), ["**"], [])
    (root / "_work/runs/r/inputs.parquet").write_parquet(listed)
    (root / "_work/tokens/t/u.bin").write_bytes(b"t" * 6000)
    (root / f"{V2}/shard-00000.bin").write_bytes(b"s" * 40_000_000)
    (root / f"{V2}/shard-00000.idx").write_bytes(b"i" * 100)
    counts = dict.fromkeys(
        ("docs_in", "docs_out", "removed_exact", "removed_near", "quarantined", "tokens"), 1000
    )
    commit_manifest(
        root / V2,
        {
            "format": FORMAT_V1,  # hand-written: no block checksums
            "name": "ds",
            "version": V2,
            "counts": counts,
            "tokenizer": {"vocab_size": 8000, "dtype": "uint16"},
            "run": {"run_id": "r"},
            "lineage": {},
            "shards": [
                {
                    "bin": "shard-00000.bin",
                    "idx": "shard-00000.idx",
                    "bin_bytes": 40_000_000,
                    "idx_bytes": 100,
                    "tokens": 1,
                    "documents": 1000,
                    "bin_xxh3_128": "0" * 32,
                    "idx_xxh3_128": "0" * 32,
                }
            ],
        },
    )
    return cfg, root


def test_report_from_dataset_stats_and_training_estimate(dataset):
    cfg, root = dataset
    report = build_report(cfg, runs_per_month=2, epochs_per_month=3, range_bytes=16 * 2**20)
    assert report["assumptions"]["stats"].endswith("_work/runs/r/stats.json")
    # pipeline: 2 runs x 10,000 B; training: 3 epochs x (40,000,000 + 100) B
    assert report["before"]["read_bytes_per_month"] == 2 * 10_000 + 3 * 40_000_100
    reads = {s["stream"]: s for s in report["after"]["reads"]}
    assert reads["pipeline read+hash"]["data_class"] == "raw"
    assert reads["pipeline tokenize"]["data_class"] == "read_docs"
    assert reads["pipeline pack"]["data_class"] == "token_parts"
    # 40 MB in 16 MiB ranges: 3 GETs + 1 for the .idx, per epoch
    assert reads["training"]["requests"] == {"get": 12}
    assert report["requests"]["get"] == {"pipeline": 2 * 13, "training": 12}
    assert report["requests"]["list"] == {"pipeline": 6}
    by_class = {x["data_class"]: x for x in report["by_class"]}
    assert by_class["raw"]["retained_before"] == 10_000
    assert by_class["versions"]["read_per_month"] == 3 * 40_000_100
    assert report["napkin"]["small_files"]["get_requests_per_epoch"] == 1000
    assert report["napkin"]["shards"]["get_requests_per_epoch"] == 4
    md = format_markdown(report)
    assert "## Monthly cost" in md and "| pipeline read+hash | raw |" in md


@pytest.mark.parametrize(
    ("counters", "requests"),
    [
        (
            {"epochs": 2, "bytes_read": 80_000_200, "get_requests": 10, "head_requests": 2},
            {"get": 5, "head": 1},
        ),
        ({"epochs": 2, "io": {"bytes_read": 80_000_200, "get_requests": 10}}, {"get": 5}),
        ({"epochs": 2, "requests": 10, "bytes": 80_000_200, "max_buffered_bytes": 7}, {"get": 5}),
    ],
)
def test_reader_counters_replace_the_estimate(dataset, tmp_path, counters, requests):
    cfg, _ = dataset
    reader = tmp_path / "reader.json"
    reader.write_text(json.dumps(counters))
    report = build_report(cfg, reader_stats_uri=str(reader), epochs_per_month=1)
    training = next(s for s in report["before"]["reads"] if s["stream"] == "training")
    assert training["bytes_per_month"] == 40_000_100
    assert training["requests"] == requests
    assert report["assumptions"]["training_reads"] == "reader counters"


def test_html_is_self_contained_and_carries_the_chart_data(dataset):
    cfg, _ = dataset
    report = build_report(cfg)
    page = format_html(report)
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert "<svg" in page
    bars = {
        (m[0], m[1]): float(m[2])
        for m in re.findall(
            r'data-class="([^"]+)" data-series="([^"]+)" data-bytes="([^"]+)"', page
        )
    }
    for row in report["by_class"]:
        for series in ("retained_before", "retained_after", "read_per_month"):
            assert bars[(row["data_class"], series)] == pytest.approx(row[series], abs=0.5)
    # the default policy deletes nothing here yet (all fresh): before == after
    assert bars[("token_parts", "retained_after")] == 6000


def config_file(cfg: Config, tmp_path: Path) -> Path:
    """The dataset fixture's config as a file, for the report command."""
    config = tmp_path / "c.yaml"
    config.write_text(
        json.dumps(
            {
                "name": "ds",
                "input": {"uri": cfg.input.uri},
                "output": {"uri": cfg.output.uri},
                "tokenize": {"tokenizer": str(REPO / "configs" / "tokenizer.json")},
            }
        )
    )
    return config


def test_report_command_writes_json_html_and_stores(dataset, tmp_path, capsys):
    cfg, root = dataset
    config = config_file(cfg, tmp_path)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    assert (
        main(
            [
                "report",
                "--config",
                str(config),
                "--json",
                str(out_json),
                "--html",
                str(out_html),
                "--epochs",
                "2",
                "--store",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("# Cost report:") and "stored " in printed
    assert json.loads(out_json.read_text())["assumptions"]["epochs_per_month"] == 2
    assert out_html.read_text().startswith("<!DOCTYPE html>")
    stored = sorted(p.name.rsplit(".", 1)[1] for p in Path(root.path, "_reports").iterdir())
    assert stored == ["html", "json", "md"]
    assert write_report  # also callable at the end of a run


def test_a_stats_file_the_model_rejects_is_exit_2_naming_file_and_field(dataset, tmp_path, capsys):
    cfg, root = dataset
    bad = tmp_path / "stats.json"
    bad.write_text(json.dumps({"stages": [{"stage": "pack", "io": {"bytes_read": -5}}]}))
    config = config_file(cfg, tmp_path)
    assert main(["report", "--config", str(config), "--stats", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "stats file rejected" in err and str(bad) in err and "stages.0.io.bytes_read" in err

"""bench scaling: its packaged config, its corpus cache and one real run (W=1)."""

import json
import math
from pathlib import Path

from support import REPO, SAMPLE_CONFIG

from pipeline.bench import scaling
from pipeline.config.loader import load_config


def test_packaged_config_is_the_single_sample_config(tmp_path):
    """Found without a checkout (package data), with the same settings and tokenizer bytes."""
    data = Path(scaling.__file__).parent / "data"
    assert (data / "tokenizer.json").read_bytes() == (REPO / "configs/tokenizer.json").read_bytes()
    args = {"input_uri": str(tmp_path), "output_uri": str(tmp_path / "out")}
    packaged = load_config(str(scaling.SAMPLE_CONFIG), **args).output_config()
    shipped = load_config(str(SAMPLE_CONFIG), **args).output_config()
    assert packaged == shipped


def test_mb_corpus_is_built_once_and_reused(tmp_path, monkeypatch):
    first = scaling.cached_corpus(0.2, tmp_path)
    files = sorted(first.iterdir())
    assert files and sum(f.stat().st_size for f in files) > 150_000
    stamps = [f.stat().st_mtime_ns for f in files]
    import pipeline.tools.make_corpus as make_corpus

    monkeypatch.setattr(make_corpus, "build", None)  # a second build would fail
    assert scaling.cached_corpus(0.2, tmp_path) == first
    assert [f.stat().st_mtime_ns for f in sorted(first.iterdir())] == stamps
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial folder left


def test_one_worker_run_reports_per_stage_rates_on_one_core(own_ray, tmp_path, capsys):
    scaling.main(
        [
            "--mb",
            "0.3",
            "--corpus-cache",
            str(tmp_path / "cache"),
            "--workers",
            "1",
            "--work",
            str(tmp_path / "work"),
            "--set",
            "curate=[{length: {min_words: 1}}]",
        ]
    )
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["workers"] == [1] and figures["speedup"] == 1.0
    assert figures["pinned"]["1"] is not None and len(figures["pinned"]["1"]) == 1
    rates = figures["stage_mb_s_per_core"]["1"]
    assert {"read+hash", "select", "pack", "total"} <= set(rates)
    assert all(math.isfinite(v) and v > 0 for v in rates.values())
    assert figures["worker_env"]["PIPELINE_TASK_THREADS"] == "1"
    assert set(figures["per_core"]["1"]) >= {
        "pipeline_mb_s_per_core",
        "read_hash_mb_s_per_core",
        "read_hash_untokenized_mb_s_per_core",
        "tokenize_mb_s_per_core",
    }
    assert all(math.isfinite(v) and v > 0 for v in figures["per_core"]["1"].values())
    # the curation chain's own seconds, out of the read pass's: a share, however fast the chain
    assert 0 < figures["per_core"]["1"]["curate_share_of_read_pass"] <= 1


def test_small_shares_and_rates_are_not_rounded_to_zero():
    """A fast machine's curation share and a slow one's rates stay above 0 in the JSON line."""
    run = {
        "workers": 1,
        "wall_s": 4000.0,
        "stages": {"read+hash": 3000.0, "pack": 1000.0},
        "tokens": 10_000,
        "tokenize_task_s": 500.0,
        "curate_task_s": 0.004,
    }
    figures = scaling.per_core(run, input_bytes=300_000)
    assert figures["curate_share_of_read_pass"] == 1.33e-06
    assert figures["pipeline_mb_s_per_core"] == 7.5e-05
    assert scaling.stage_mb_s_per_core(run, 300_000) == {
        "read+hash": 0.0001,
        "pack": 0.0003,
        "total": 7.5e-05,
    }
    assert scaling.significant(26.716) == 26.72 and scaling.significant(0.7712) == 0.771

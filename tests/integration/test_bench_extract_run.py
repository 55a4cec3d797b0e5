"""bench extract's whole run: configs/crawl.yaml from the crawl sample's WARC files to shards
with one worker, beside the parts; the ratio against resiliparse's extraction alone is
computed from the two measured times (no bound on it: speed is the benchmark's to report)."""

import json
import math

import pytest
from support import SAMPLE

from pipeline.bench import extract

pytest.importorskip("pipeline.extract", reason="needs the WARC reader (pipeline/extract)")


def test_a_whole_run_beside_the_parts_gives_a_finite_ratio(own_ray, capsys):
    extract.main(["--input", str(SAMPLE / "crawl"), "--repeat", "1", "--no-warcio"])
    out = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(out[-1])
    run = figures["run"]
    assert run["docs_out"] > 0 and run["tokens"] > 0
    assert {"read+hash", "pack"} <= set(run["stages_s"])
    parts = run["read_pass_parts_s"]
    assert {"warc_parse", "http_decode", "extract", "tokenize", "curate", "rest"} <= set(parts)
    assert all(parts[k] > 0 for k in ("warc_parse", "http_decode", "extract"))
    assert math.isfinite(figures["ratio"]) and figures["ratio"] > 0
    assert figures["ratio"] == round(figures["seconds"]["extract"] / run["wall_s"], 3)
    assert figures["meets_target"] == (figures["ratio"] >= extract.TARGET_RATIO)
    assert any(line.startswith("ratio run / resiliparse extraction alone") for line in out)

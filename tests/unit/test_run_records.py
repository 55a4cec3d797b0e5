"""The run's typed records: done markers (run/markers.py) and stats.json (formats/run_stats.py),
each validated on read."""

from __future__ import annotations

import json

import pytest

from pipeline.core.storage import Location
from pipeline.formats.run_stats import RunStats, StatsError, parse_stats
from pipeline.run.markers import load_marker, write_marker
from pipeline.run.results import ReadResult, RegroupResult

READ = ReadResult(
    unit="u1",
    origin="web",
    docs_in=5,
    docs=4,
    text_bytes=100,
    hash_size=64,
    quarantined={"not_json": 1},
    seconds=1.5,
    io={"bytes_read": 10},
)


def test_a_marker_reads_back_as_the_result_it_was_written_from(tmp_path):
    done = Location.from_uri(str(tmp_path / "u1.done.json"))
    write_marker(done, READ.marker())
    earlier = load_marker(done, ReadResult, reused=True)
    assert earlier is not None and earlier.reused
    assert earlier.own_fields() == READ.own_fields()
    assert (earlier.seconds, earlier.io) == (1.5, {"bytes_read": 10})


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"unit": "u1", "docs_in": 5, "do', "Unterminated string"),  # cut short
        (json.dumps({**READ.marker(), "docs": "four"}).encode(), "docs: Input should be"),
        (json.dumps({k: v for k, v in READ.marker().items() if k != "unit"}).encode(), "unit:"),
        (b"[1, 2]", "not an object"),
    ],
)
def test_a_marker_that_does_not_validate_means_redo(tmp_path, capsys, body, why):
    done = Location.from_uri(str(tmp_path / "u1.done.json"))
    done.write_bytes(body)
    assert load_marker(done, ReadResult) is None
    warning = capsys.readouterr().err
    assert "ignoring done marker" in warning and why in warning and done.uri in warning


def test_no_marker_is_none(tmp_path):
    assert load_marker(Location.from_uri(str(tmp_path / "none.json")), RegroupResult) is None


def test_regroup_marker_keeps_its_shape(tmp_path):
    done = Location.from_uri(str(tmp_path / "g00000-k00000.json"))
    marker = {"group": 0, "bucket": 0, "object": "g00000-k00000.bin", "offsets": [0, 10, 25]}
    write_marker(done, marker)
    assert json.loads(done.read_bytes()) == marker
    assert load_marker(done, RegroupResult).own_fields() == marker


STAGES = [
    {
        "stage": "read+hash",
        "tasks": 2,
        "reused": 0,
        "seconds": 1.25,
        "io": {"bytes_read": 100, "get_requests": 2},
        "driver_io": {},
        "peak_rss_mb": 300.0,
        "bytes_moved_per_input_byte": 1.0,
    },
    {"stage": "commit", "tasks": 0, "seconds": 0.0, "io": {"bytes_written": 5}},
]


def test_stats_round_trip_keeps_every_key():
    raw = {
        "format": "pipeline.stats/1",
        "run_id": "r",
        "input_bytes": 100,
        "bytes_read": 100,
        "bytes_written": 5,
        "bytes_moved_per_input_byte": {"total": 1.05, "read+hash": 1.0, "commit": 0.05},
        "stages": STAGES,
    }
    stats = parse_stats(json.dumps(raw).encode())
    again = json.loads(stats.to_json())
    assert again["stages"][0] == STAGES[0]
    assert {k: again[k] for k in raw if k != "stages"} == {k: raw[k] for k in raw if k != "stages"}


def test_a_bare_list_of_stages_is_a_stats_file():
    stats = parse_stats(json.dumps(STAGES))
    assert [s.stage for s in stats.stages] == ["read+hash", "commit"]
    assert stats == RunStats(stages=stats.stages)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"stages": [{"stage": "pack", "io": {"bytes_read": -1}}]}, "stages.0.io.bytes_read"),
        ({"stages": [{"io": {}}]}, "stages.0.stage"),
        ({"stages": [{"stage": "pack", "typo": 1}]}, "stages.0.typo"),
        ({"input_bytes": "lots"}, "input_bytes"),
    ],
)
def test_stats_the_model_rejects_name_the_field(raw, where):
    with pytest.raises(StatsError, match=rf"^{where}:"):
        parse_stats(json.dumps(raw))


def test_stats_that_are_not_json():
    with pytest.raises(StatsError, match="not JSON"):
        parse_stats(b"{")

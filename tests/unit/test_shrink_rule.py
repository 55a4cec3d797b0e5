"""The one shrink rule (run/input_guard.shrinkage): per source of the newest committed version,
against the new version's manifest `sources` (or, at the listing, its bytes only)."""

from __future__ import annotations

from pipeline.run.input_guard import shrinkage

BEFORE = {
    "docs": {"input_bytes": 1000, "docs_out": 10},
    "web": {"input_bytes": 400, "docs_out": 4},
}


def test_sources_that_kept_their_name_and_half_their_bytes_pass():
    after = {
        "docs": {"input_bytes": 500, "docs_out": 5},
        "web": {"input_bytes": 400, "docs_out": 4},
        "new": {"input_bytes": 7, "docs_out": 1},
    }
    assert shrinkage(BEFORE, after, 0.5) == {}
    assert shrinkage({}, after, 0.5) == {}  # no version before: nothing to shrink from


def test_a_renamed_or_dropped_source_shrank_to_0():
    after = {"docs": {"input_bytes": 1000, "docs_out": 10}, "webpages": {"input_bytes": 400}}
    assert shrinkage(BEFORE, after, 0.5) == {
        "web": "not a source of the new version (renamed or dropped: shrunk to 0 from 400 bytes,"
        " 4 documents)"
    }
    assert list(shrinkage(BEFORE, {"docs": BEFORE["docs"]}, 0.5)) == ["web"]


def test_bytes_shrunk_past_the_fraction():
    after = {"docs": {"input_bytes": 499}, "web": {"input_bytes": 1}}
    assert shrinkage(BEFORE, after, 0.5) == {
        "docs": "shrank by more than run.max_input_shrink = 0.5: 499 bytes listed, 1,000 read"
        " (50.1% less)",
        "web": "shrank by more than run.max_input_shrink = 0.5: 1 bytes listed, 400 read"
        " (99.8% less)",
    }
    assert shrinkage(BEFORE, after, 1.0) == {}  # max_input_shrink = 1: bytes never refuse


def test_a_source_with_no_document_out_is_refused_whatever_came_before():
    after = {
        "docs": {"input_bytes": 1000, "docs_in": 12, "docs_out": 0, "removed_takedown": 12},
        "web": {
            "input_bytes": 400,
            "docs_in": 4,
            "docs_out": 0,
            "removed_exact": 3,
            "removed_near": 1,
        },
    }
    assert shrinkage(BEFORE, after, 1.0) == {
        "docs": "0 documents out of 12 read (12 taken down), 10 before",
        "web": "0 documents out of 4 read (4 duplicates), 4 before",
    }
    assert shrinkage({}, {"web": after["web"]}, 0.5) == {
        "web": "0 documents out of 4 read (4 duplicates)"
    }


def test_values_of_another_type_in_the_older_manifest_count_as_absent():
    before = {"docs": {"input_bytes": "1000", "docs_out": None}, "web": {"input_bytes": True}}
    after = {"docs": {"input_bytes": 1, "docs_out": 1}}
    assert shrinkage(before, after, 0.5) == {
        "web": "not a source of the new version (renamed or dropped: shrunk to 0 from 0 bytes,"
        " 0 documents)"
    }

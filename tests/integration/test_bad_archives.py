"""A whole crawl run over the damaged archives of tools/make_bad_archives.py (issue 42, item
5): each damage is one quarantine row with its reason, every record of every file is counted
once (a document, a kind or a quarantine row), and the version verifies."""

from __future__ import annotations

import shutil
from collections import Counter

import pytest
from support import REPO

from pipeline.config.loader import load_config
from pipeline.formats.verify import verify_version
from pipeline.run.driver import run_pipeline
from pipeline.tools import make_bad_archives

# the damaged file of each case, with its own name in the one input folder
DAMAGED = {
    "cut_last_record": "crawl.warc.gz",
    "corrupt_member": "crawl.warc.gz",
    "not_a_warc": "notes.warc.gz",
    "huge_record": "huge.warc.gz",
}


def records_in(data: bytes) -> int:
    """WARC records in a per-record gzip file: its gzip members (a cut one included)."""
    return len(make_bad_archives.member_offsets(data))


@pytest.fixture(scope="module")
def damaged_run(ray_local, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad")
    cases = make_bad_archives.build(tmp / "cases", mb=1.0, huge_mb=20.0)  # 20 MB > 16 MiB cap
    corpus = tmp / "corpus"
    corpus.mkdir()
    for case, name in DAMAGED.items():
        shutil.copy(tmp / "cases" / case / name, corpus / f"{case}.warc.gz")
    cfg = load_config(
        REPO / "configs" / "crawl.yaml", input_uri=str(corpus), output_uri=str(tmp / "out"),
        overrides=['input.include=["**"]', "ingest.max_error_rate=0.5"],
    )  # fmt: skip
    return tmp, cases, run_pipeline(cfg, show_progress=False)


def test_each_damage_is_one_quarantine_row_with_its_reason(damaged_run):
    _, _, result = damaged_run
    manifest = verify_version(result.version)
    counts = manifest["counts"]
    assert counts["quarantined_by_reason"] == {
        "truncated_file": 1, "corrupt_record": 1, "unreadable": 1, "too_large": 1,
    }  # fmt: skip
    filtered = sum((counts.get("removed_filtered") or {}).values())
    removed = counts["removed_exact"] + counts["removed_near"] + filtered
    assert counts["docs_in"] == counts["docs_out"] + removed + counts["quarantined"]


def test_every_record_of_every_file_is_counted_once(damaged_run):
    tmp, _, result = damaged_run
    kinds = Counter(verify_version(result.version)["counts"]["records"])
    # the cut and the corrupt crawl hold the healthy crawl's records (beside notes.warc.gz,
    # which holds none), the huge file its own
    healthy = records_in((tmp / "cases" / "not_a_warc" / "crawl.warc.gz").read_bytes())
    huge = records_in((tmp / "cases" / "huge_record" / "huge.warc.gz").read_bytes())
    assert sum(kinds.values()) == 2 * healthy + huge
    assert kinds["quarantined"] == 3  # the cut, the corrupt and the huge record

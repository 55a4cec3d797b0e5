"""core/layout.py declares every path of a dataset with its retention data class: each path
RunLayout builds is one of PATHS, and retention classes it by that declaration."""

from __future__ import annotations

import inspect

import pytest

from pipeline.core import layout
from pipeline.core.storage import Location
from pipeline.retention.decide import classify
from pipeline.retention.policy import DATA_CLASSES

RUN = layout.RunLayout(Location.from_uri("/data/out/ds"), "r1", "readk", "tokk")
ARGS = {"unit": "u1", "removed": "rm1", "part": 3, "p": 3, "q": 4, "label_part": 5, "bucket": 6}


def built_paths() -> dict[str, str]:
    """Every file path a RunLayout builds, by method name, relative to the dataset."""
    out = {}
    for name, member in inspect.getmembers(layout.RunLayout):
        if name.startswith("_") or name in ("for_config", "version", "work", "run"):
            continue
        if isinstance(member, property):
            loc = getattr(RUN, name)
        elif inspect.isfunction(member):
            params = list(inspect.signature(member).parameters)[1:]
            args = [ARGS.get(p, "x") for p in params]
            loc = getattr(RUN, name)(*args)
        else:
            continue
        out[name] = loc.relative_to(RUN.dataset)
    return out


def test_every_built_path_is_declared_with_a_data_class():
    paths = built_paths()
    assert {
        "read_docs",
        "tokens_bin",
        "exact_removed",
        "near_requests",
        "read_bands",
        "stats",
    } <= set(paths)
    folders = {"exchange", "pack_exchange", "near"}  # their files take the folder's class
    for name, key in paths.items():
        probe = f"{key}/g00000-k00000.bin" if name in folders else key
        cls = layout.data_class(probe)
        assert cls in DATA_CLASSES, (name, key, cls)
        assert classify("dataset", probe)[0] == cls


@pytest.mark.parametrize(
    "key, cls",
    [
        ("_work/units/readk/u1.docs.parquet", "read_docs"),
        ("_work/units/readk/u1.p7.parquet", "exact_hashes"),  # the layout before 3
        ("_work/units/readk/u1.sig-abc.parquet", "near_dedup"),
        ("_work/units/readk/u1.done.json", "work_state"),
        ("_work/runs/r1/exact/xchg/hashes/plan/g00001-k00002.bin", "exact_hashes"),
        ("_work/runs/r1/near/xchg/sigs/plan/g00001-k00002.json", "near_dedup"),
        ("_work/runs/r1/pack/plan-abc/g00001-k00002.bin", "token_parts"),
        ("_work/runs/r1/quarantine.parquet", "quarantine"),
        ("_work/runs/r1/stats.json", "work_state"),
        ("_work/tokens/tokk/u1-rm1.quarantine.parquet", "token_parts"),
        ("_work/lease.json", "work_state"),
        ("_audit/retention-1.jsonl", "reports"),
        ("_reports/cost-1.md", "reports"),
        ("20260101T000000.000000Z-0123abcd/train-00000.bin", "versions"),
        ("_hidden/x", "other"),
        ("notes.txt", "other"),
    ],
)
def test_data_class_of_a_key(key, cls):
    assert layout.data_class(key) == cls


def test_version_names():
    assert layout.is_version_name(layout.new_version_id("0123456789abcdef"))
    for name in ("_work", ".x", "T", "plain", "20260101T000000Z"):
        assert not layout.is_version_name(name), name

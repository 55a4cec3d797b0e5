"""The dedup exchange (formats/sectioned.py, run/exchange.py): same rows as per-partition files,
requests linear in the data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline.core.storage import IO, Location
from pipeline.formats import sectioned
from pipeline.run.exchange import regroup

SCHEMA = pa.schema([("key", pa.int64()), ("writer", pa.int64())])


def _writers(root: Location, w: int, n: int, rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    writers, tables = [], []
    for i in range(w):
        keys = rng.integers(0, 2**40, rows)
        table = pa.table({"key": keys, "writer": np.full(rows, i)}, schema=SCHEMA)
        loc = root / f"w{i}.bin"
        writers.append(sectioned.Writer(loc, sectioned.write_sectioned(loc, table, keys % n, n)))
        tables.append(table)
    return writers, tables


def _exchange(root: Location, writers, n: int, request_bytes: int):
    total = sum(w.size for w in writers)
    plan = sectioned.exchange_plan(n, len(writers), total, request_bytes)
    folder, groups = root / "x" / plan.name, plan.unit_groups(writers)
    done = [
        regroup(folder, plan, g, k, groups[g])
        for g in range(plan.groups)
        for k in range(plan.buckets)
    ]
    return plan, sectioned.part_ranges(folder, plan, done)


@pytest.mark.parametrize("request_bytes", [1, 4096, 10**9])
def test_each_partition_gets_the_rows_of_per_partition_files_in_writer_order(
    tmp_path, request_bytes
):
    root, n = Location.from_uri(str(tmp_path)), 7
    writers, tables = _writers(root, 5, n, 300)
    plan, ranges = _exchange(root, writers, n, request_bytes)
    for p in range(n):
        expected = pa.concat_tables(
            [t.filter(pa.array(t["key"].to_numpy() % n == p)) for t in tables]
        )
        got = sectioned.read_part(ranges[p], SCHEMA)
        assert got.equals(expected)
        assert len(ranges[p]) <= plan.groups
    # a rerun reuses every regrouped object (its marker)
    again = regroup(root / "x" / plan.name, plan, 0, 0, plan.unit_groups(writers)[0])
    assert again.reused


def test_requests_grow_linearly_when_writers_and_partitions_both_follow_the_data(tmp_path):
    def requests(scale: int) -> int:
        root = Location.from_uri(str(tmp_path / f"s{scale}"))
        before = IO.snapshot()
        # writers and partitions both grow with the data, as units and partitions do
        writers, _ = _writers(root, 4 * scale, 4 * scale, 400, seed=scale)
        _, ranges = _exchange(root, writers, 4 * scale, 64 * 1024)
        for p in ranges:
            sectioned.read_part(ranges[p], SCHEMA)
        io = IO.delta(IO.snapshot(), before)
        return sum(v for k, v in io.items() if k.endswith("_requests"))

    small, large = requests(1), requests(8)
    assert large <= 1.3 * 8 * small  # per-partition files: W x N, x 64


def test_unit_buckets_keep_unit_order_and_cover_every_unit():
    units = [f"u{i:03d}" for i in range(10)]
    bounds = sectioned.unit_bounds(units, 4)
    at = sectioned.unit_bucket(bounds, pa.array(units))
    assert list(at) == sorted(at) and set(at) == {0, 1, 2, 3}
    assert sectioned.unit_bounds(units[:2], 4) == ["u000", "u001"]
    assert list(sectioned.unit_bucket(["a"], pa.array([], pa.string()))) == []


def test_plan_caps_what_one_regroup_task_moves_and_balances_the_two_get_terms():
    gib, parts, writers = 2**30, 9314, 37253  # 10 TB: 256 MiB units, 1 GiB partitions
    hashes = 200 * 10**9
    free = sectioned.exchange_plan(parts, writers, hashes, 16 * 2**20)
    assert (free.buckets, free.groups) == (1, 1)  # one task would move all 200 GB
    capped = sectioned.exchange_plan(parts, writers, hashes, 16 * 2**20, 4 * gib)
    assert hashes / (capped.buckets * capped.groups) <= 4 * gib
    gets = writers * capped.buckets + capped.groups * parts
    assert gets < 0.001 * writers * parts  # vs one file per (unit, partition)
    # below the cap (small corpora, the benchmarks) the cap changes nothing
    assert sectioned.exchange_plan(16, 128, 7 * 10**6, 1, 4 * gib) == sectioned.exchange_plan(
        16, 128, 7 * 10**6, 1
    )

"""The exchange (pipeline/exchange/): same rows as per-partition files,
requests linear in the data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline.core.storage import IO, Location
from pipeline.exchange import sections
from pipeline.exchange.plan import exchange_plan
from pipeline.exchange.regroup import regroup

SCHEMA = pa.schema([("key", pa.int64()), ("writer", pa.int64())])


def _writers(root: Location, w: int, n: int, rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    writers, tables = [], []
    for i in range(w):
        keys = rng.integers(0, 2**40, rows)
        table = pa.table({"key": keys, "writer": np.full(rows, i)}, schema=SCHEMA)
        loc = root / f"w{i}.bin"
        size = sections.write_sectioned(loc, table, keys % n, n)
        writers.append(sections.SectionedObject(loc, size))
        tables.append(table)
    return writers, tables


def _exchange(root: Location, writers, n: int, request_bytes: int):
    total = sum(w.size for w in writers)
    plan = exchange_plan(n, len(writers), total, request_bytes)
    folder, groups = root / "x" / plan.name, plan.unit_groups(writers)
    done = [
        regroup(folder, plan, g, k, groups[g])
        for g in range(plan.groups)
        for k in range(plan.buckets)
    ]
    return plan, sections.part_ranges(folder, plan, done)


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
        got = sections.read_part(ranges[p], SCHEMA)
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
            sections.read_part(ranges[p], SCHEMA)
        io = IO.delta(IO.snapshot(), before)
        return sum(v for k, v in io.items() if k.endswith("_requests"))

    small, large = requests(1), requests(8)
    assert large <= 1.3 * 8 * small  # per-partition files: W x N, x 64


def test_unit_buckets_keep_unit_order_and_cover_every_unit():
    units = [f"u{i:03d}" for i in range(10)]
    bounds = sections.unit_bounds(units, 4)
    at = sections.unit_bucket(bounds, pa.array(units))
    assert list(at) == sorted(at) and set(at) == {0, 1, 2, 3}
    assert sections.unit_bounds(units[:2], 4) == ["u000", "u001"]
    assert list(sections.unit_bucket(["a"], pa.array([], pa.string()))) == []


def test_plan_caps_what_one_regroup_task_moves_and_balances_the_two_get_terms():
    gib, parts, writers = 2**30, 9314, 37253  # 10 TB: 256 MiB units, 1 GiB partitions
    hashes = 200 * 10**9
    free = exchange_plan(parts, writers, hashes, 16 * 2**20)
    assert (free.buckets, free.groups) == (1, 1)  # one task would move all 200 GB
    capped = exchange_plan(parts, writers, hashes, 16 * 2**20, 4 * gib)
    assert hashes / (capped.buckets * capped.groups) <= 4 * gib
    gets = writers * capped.buckets + capped.groups * parts
    assert gets < 0.001 * writers * parts  # vs one file per (unit, partition)
    # below the cap (small corpora, the benchmarks) the cap changes nothing
    assert exchange_plan(16, 128, 7 * 10**6, 1, 4 * gib) == exchange_plan(
        16, 128, 7 * 10**6, 1
    )


def test_merge_exact_writes_one_file_sorted_by_unit_one_bucket_at_a_time(tmp_path):
    import pyarrow.parquet as pq

    from pipeline.core.layout import RunLayout
    from pipeline.dedup.exact import REMOVED_SCHEMA
    from pipeline.run.tasks import merge_exact

    layout = RunLayout(Location.from_uri(str(tmp_path)), "r", "k", "t")
    units = [f"u{i}" for i in range(6)]
    bounds = sections.unit_bounds(units, 3)
    rows = [
        {
            "doc_id": f"d{u}{r}",
            "source": f"s{r % 2}",
            "row": r,
            "unit_id": u,
            "rule": "exact",
            "kept_id": "k",
            "kept_source": "s",
            "kept_row": 0,
            "similarity": 1.0,
        }
        for u in reversed(units)
        for r in (3, 1, 2)
    ]
    writers = []
    for part in range(2):  # two partitions' removals, each sectioned by unit bucket
        table = pa.Table.from_pylist(rows[part::2], schema=REMOVED_SCHEMA)
        loc = layout.exact_removed(part)
        at = sections.unit_bucket(bounds, table["unit_id"])
        writers.append(sections.SectionedObject(loc, sections.write_sectioned(loc, table, at, 3)))
    _, ranges = _exchange(Location.from_uri(str(tmp_path / "x")), writers, 3, 1)
    result = merge_exact(layout, [ranges[b] for b in range(3)])
    merged = layout.exact_removed_all.read_parquet()
    expected = pa.Table.from_pylist(rows, schema=REMOVED_SCHEMA).sort_by(
        [("unit_id", "ascending"), ("source", "ascending"), ("row", "ascending")]
    )
    assert merged.equals(expected) and result.removed_exact == len(rows)
    with layout.exact_removed_all.open_read() as f:  # written bucket by bucket
        assert pq.ParquetFile(f).metadata.num_row_groups == 3


def test_pack_cut_caps_what_one_pass_1_task_moves():
    from pipeline.tokens.pack import pack_plan

    tib, mib = 2**40, 2**20
    units = (8 * tib) // (256 * mib)
    free = pack_plan(8 * tib, units, 256 * mib, 16 * mib)
    capped = pack_plan(8 * tib, units, 256 * mib, 16 * mib, 4 * 2**30)
    assert 8 * tib / (free.groups * free.buckets) > 4 * 2**30  # uncapped: ~43 GiB per task
    assert 8 * tib / (capped.groups * capped.buckets) <= 4 * 2**30
    assert capped.shards == free.shards  # the cut moves bytes differently, never other shards
    # below the cap nothing changes
    assert pack_plan(tib // 8, 512, 256 * mib, 16 * mib, 4 * 2**30) == pack_plan(
        tib // 8, 512, 256 * mib, 16 * mib
    )

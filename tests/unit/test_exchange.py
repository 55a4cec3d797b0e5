"""The exchange (pipeline/exchange/): same rows as per-partition files,
requests linear in the data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from pipeline.core.io_counters import IO
from pipeline.core.storage import Location
from pipeline.exchange import sections
from pipeline.exchange.plan import SMALL_GETS, ExchangePlan, direct, exchange_plan
from pipeline.exchange.regroup import regroup
from pipeline.exchange.row_codec import encode_rows

SCHEMA = pa.schema([("key", pa.int64()), ("writer", pa.int64())])
ARROW_ZSTD = pa.Codec("zstd", compression_level=1)  # an Arrow stream's own compression


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
        regroup(folder, plan, g, k, groups[g], SCHEMA)
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
    again = regroup(root / "x" / plan.name, plan, 0, 0, plan.unit_groups(writers)[0], SCHEMA)
    assert again.reused


def test_one_pass_reads_the_writers_sections_same_rows_same_order_and_only_when_pieces_are_big(
    tmp_path,
):
    root, n = Location.from_uri(str(tmp_path)), 7
    writers, _ = _writers(root, 5, n, 300)
    total = sum(w.size for w in writers)
    per_piece = total / (5 * n)
    big = {"small_gets": 0}  # the rule for large pieces alone (not the small exchange's)
    assert direct(n, 5, total, int(2 * per_piece), **big)
    assert not direct(n, 5, total, int(3 * per_piece), **big)
    _, regrouped = _exchange(root, writers, n, 10**9)
    before = IO.snapshot()
    ranges = sections.writer_ranges(writers, n)
    assert IO.delta(IO.snapshot(), before)["get_requests"] == len(writers)  # one index each
    for p in range(n):
        assert all(loc in {w.loc for w in writers} for loc, _, _ in ranges[p])
        assert len(ranges[p]) <= len(writers)
        assert sections.read_part(ranges[p], SCHEMA).equals(
            sections.read_part(regrouped[p], SCHEMA)
        )


def test_row_sections_are_zstd_frames_without_a_schema_and_refuse_another():
    from pipeline.dedup.exact import HASH_SCHEMA, REMOVED_SCHEMA
    from pipeline.exchange.row_codec import decode_rows, encode_rows

    keys = np.repeat(np.arange(1000, dtype=np.int64) * 7919, 8)  # a key per run of 8 rows
    table = pa.table({"key": keys, "writer": np.zeros(len(keys), np.int64)}, schema=SCHEMA)
    data = encode_rows(table)
    assert len(data) < 16 * table.num_rows / 4
    assert decode_rows(data, SCHEMA).equals(table)
    assert decode_rows(encode_rows(table.slice(5, 7)), SCHEMA).equals(table.slice(5, 7))
    # 10 TB's sections: ~7 hash rows of a unit per partition, a removal or two per bucket
    hashes = pa.table(
        {
            "hash": pa.array([bytes([i]) * 16 for i in range(7)], pa.binary(16)),
            "doc_id": [f"doc-{i:09d}" for i in range(7)],
            "source": [f"data/part-{i:05d}.jsonl" for i in range(7)],
            "row": list(range(7)),
            "unit_id": ["u0123456789abcdef"] * 7,
            "origin": ["web"] * 7,
            "origin_rank": pa.array([0] * 7, pa.int32()),
        },
        schema=HASH_SCHEMA,
    )
    arrow = sections.encode(hashes, compression=ARROW_ZSTD)
    assert len(encode_rows(hashes)) < len(arrow) / 3
    removed = pa.Table.from_pylist(
        [{"doc_id": "a", "source": "s", "row": 1, "unit_id": "u", "rule": "near", "kept_id": None,
          "kept_source": None, "kept_row": None, "similarity": 0.9, "origin": "o",
          "kept_origin": None}], schema=REMOVED_SCHEMA)  # fmt: skip
    assert decode_rows(encode_rows(removed), REMOVED_SCHEMA).equals(removed)
    with pytest.raises(ValueError, match="written by other code"):
        decode_rows(encode_rows(removed), HASH_SCHEMA)


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


def test_a_small_exchange_runs_in_one_pass_while_its_gets_stay_under_a_constant():
    tiny, request = 100_000, 16 * 2**20  # pieces far below half a request
    assert direct(8, 32, tiny, request)  # 256 GETs: no pass-1 wave
    assert direct(8, 64, tiny, request) and not direct(8, 65, tiny, request)  # 512 | 520
    assert not direct(8, 32, tiny, request, small_gets=0)
    assert not direct(9314, 37253, 200 * 10**9, request)  # 10 TB: the two passes


def test_a_pass_1_of_too_few_tasks_is_cut_finer_within_a_bound_of_gets():
    request, task = 16 * 2**20, 4 * 2**30
    # the benchmark's band exchange: 32 units, 8 partitions; bytes alone give one task
    assert exchange_plan(8, 32, 5 * 10**6, request, task) == ExchangePlan(8, 1, 1)
    floored = exchange_plan(8, 32, 5 * 10**6, request, task, min_tasks=8)
    assert floored.groups * floored.buckets >= 8
    assert floored.groups * 8 <= SMALL_GETS and 32 * floored.buckets <= SMALL_GETS
    # few writers: buckets too, each writer's index and range GETs within the bound
    few = exchange_plan(64, 3, 10**5, request, task, min_tasks=64)
    assert few.groups == 3 and few.buckets > 1 and 2 * 3 * few.buckets <= SMALL_GETS
    # where the GETs are past the bound, or the tasks are there, the cut is the bytes' one
    assert exchange_plan(9314, 37253, 200 * 10**9, request, task, min_tasks=9314) == (
        exchange_plan(9314, 37253, 200 * 10**9, request, task)
    )
    assert exchange_plan(8, 32, 5 * 10**6, request, task, min_tasks=8, small_gets=0) == (
        ExchangePlan(8, 1, 1)
    )


def test_a_reader_gets_its_ranges_several_at_a_time_in_order():
    """A one-pass reader GETs a range of every writer: FETCHES in flight, not one by one."""
    import threading

    class SlowObject:  # a Location's read_bytes that answers once FETCHES GETs are open
        flight = peak = 0
        both = threading.Condition()

        def __init__(self, data: bytes) -> None:
            self.data = data

        def read_bytes(self, a: int, b: int) -> bytes:
            with SlowObject.both:
                SlowObject.flight += 1
                SlowObject.peak = max(SlowObject.peak, SlowObject.flight)
                SlowObject.both.notify_all()
                # the first GETs wait for each other (a state, not a latency): a reader with
                # fewer in flight keeps them waiting until the guard, and its peak stays low
                SlowObject.both.wait_for(lambda: SlowObject.peak >= sections.FETCHES, 60)
                SlowObject.flight -= 1
            return self.data[a:b]

    tables = [pa.table({"key": [i], "writer": [i]}, schema=SCHEMA) for i in range(40)]
    ranges = [(SlowObject(d), 0, len(d)) for d in map(encode_rows, tables)]
    rows = sections.read_part(ranges, SCHEMA)
    assert rows["key"].to_pylist() == list(range(40))
    assert SlowObject.peak == sections.FETCHES


@pytest.mark.parametrize("named", [True, False])
def test_near_band_groups_read_the_exact_removals_by_unit_bucket_not_per_unit(tmp_path, named):
    """Each near_band_group task reads the exact removals' ranges of the unit buckets that hold
    its units (dedup_stage.group_removals) once, and drops exactly those documents: its GETs
    are its units' band objects plus those ranges, whatever the units per group (a read of the
    removals per unit made them grow with groups x units), as the plan counts them
    (dry_run_stages.exact_removal_spans)."""
    from support import SAMPLE_CONFIG, SOURCES_CONFIG

    from pipeline.config.loader import load_config
    from pipeline.core.layout import RunLayout
    from pipeline.dedup.exact import REMOVED_SCHEMA
    from pipeline.report.dry_run_stages import exact_removal_spans
    from pipeline.run import near_signing, neardup
    from pipeline.run.dedup_stage import Removals, group_removals

    config = SOURCES_CONFIG if named else SAMPLE_CONFIG
    cfg = load_config(config, overrides=["dedup.partitions=4"], check_paths=False)
    assert cfg.named_sources == named  # named: keys take the source name, as the read task's
    layout = RunLayout(Location.from_uri(str(tmp_path)), "r", "k", "t")
    names = [s.name for s in cfg.sources]
    units = [(f"u{i:02d}", i, names[i % len(names)]) for i in range(12)]
    rng, docs, gone = np.random.default_rng(7), 6, (1, 4)
    for unit, i, origin in units:
        sources = [f"{origin}\x00f{i}.jsonl" if named else f"f{i}.jsonl"] * docs
        keys = near_signing.record_keys(sources, list(range(docs)))
        sigs = rng.integers(0, 2**32, (docs, cfg.dedup.near.num_perm), dtype=np.uint32)
        near_signing.write_band_object(
            layout.read_bands(unit, near_signing.band_key(cfg)), keys, sigs, cfg
        )
    removed = pa.Table.from_pylist(
        [
            {"doc_id": f"{u}-{r}", "source": f"f{i}.jsonl", "row": r, "unit_id": u,
             "rule": "exact", "origin": origin}  # fmt: skip
            for u, i, origin in units
            for r in gone
        ],
        schema=REMOVED_SCHEMA,
    )
    bounds = sections.unit_bounds([u for u, _, _ in units], 5)
    writers = []
    for part in range(3):  # three partitions' removals, each sectioned by unit bucket
        table, loc = removed[part::3], layout.exact_removed(part)
        at = sections.unit_bucket(bounds, table["unit_id"])
        size = sections.write_sectioned(loc, table, at, len(bounds))
        writers.append(sections.SectionedObject(loc, size))
    ranges = sections.writer_ranges(writers, len(bounds))
    exact = Removals(bounds, [ranges[b] for b in range(len(bounds))])
    for groups in (2, 3):
        plan = ExchangePlan(cfg.dedup.partitions, 2, groups)
        cut = plan.unit_groups(units)
        spans = [len(group_removals(exact, g)) for g in cut]
        assert spans == exact_removal_spans(len(units), len(bounds), groups)
        for g, group in enumerate(cut):
            for k in range(plan.buckets):
                before = IO.snapshot()
                result = neardup.near_band_group(
                    layout, plan, g, k, group, group_removals(exact, group), cfg
                )
                io = IO.delta(IO.snapshot(), before)
                assert result.docs == len(group) * (docs - len(gone))
                band_gets = 3 * len(group)  # per unit: its index, bucket range, keys section
                removal_gets = sum(len(r) for r in group_removals(exact, group))
                assert removal_gets <= spans[g] * len(writers)
                assert io["get_requests"] == band_gets + removal_gets, (groups, g, k, io)


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


def test_dedup_marker_keeps_its_shape_and_one_writers_section_passes_through(tmp_path):
    import json

    root, n = Location.from_uri(str(tmp_path)), 3
    writers, _ = _writers(root, 1, n, 50)
    plan = exchange_plan(n, 1, writers[0].size, 10**9)
    folder = root / "x" / plan.name
    result = regroup(folder, plan, 0, 0, writers, SCHEMA)
    marker = json.loads((folder / "g00000-k00000.json").read_bytes())
    assert list(marker) == ["group", "bucket", "object", "offsets"]
    assert marker["offsets"] == result.offsets and len(result.offsets) == n + 1
    # one writer: its object's sections, as written, then no index
    data = writers[0].loc.read_bytes(0, writers[0].size)
    assert (folder / result.object).read_bytes() == data[: -sections.index_bytes(n)]


def test_encode_with_a_schema_writes_a_stream_even_without_rows():
    empty = SCHEMA.empty_table()
    assert sections.encode(empty) == b""
    stream = sections.encode(empty, SCHEMA)
    assert stream and sections.decode(stream).schema.equals(SCHEMA)


def test_pack_pass_1_lays_out_each_shard_as_its_units_tokens_then_one_index_stream(tmp_path):
    import json

    from pipeline.core.layout import RunLayout
    from pipeline.run.pack_tasks import exchange_bucket
    from pipeline.tokens import framed, pack

    layout = RunLayout(Location.from_uri(str(tmp_path)), "r", "k", "t")
    rng, shards, units = np.random.default_rng(3), 6, []
    for u in range(3):
        rows = 40 if u != 1 else 0  # a unit with no documents: no sections
        # keys in the lower half only: the second bucket's shards have no rows at all
        keys = np.sort(rng.integers(0, 2**63, rows, dtype=np.uint64))
        lengths = rng.integers(1, 20, rows)
        index = pa.table(
            {
                "doc_id": [f"u{u}d{i}" for i in range(rows)],
                "source": ["s"] * rows,
                "row": np.arange(rows),
                "key": keys,
                "length": lengths,
            },
            schema=pack.TOKEN_INDEX_SCHEMA,
        )
        tokens = np.concatenate([np.full(n, i, np.uint16) for i, n in enumerate(lengths)] or [[]])
        with layout.tokens_bin(f"u{u}").atomic_writer() as out:
            writer = framed.FramedWriter(out, 64)  # small frames: pieces cross their edges
            writer.write(tokens.astype(np.uint16).tobytes())
            frames = writer.close()
        offsets = pa.array(np.cumsum(lengths) - lengths, pa.int64())
        kept = index.append_column("offset", offsets)
        layout.tokens_index(f"u{u}", "").write_parquet(framed.with_table(kept, frames))
        units.append((f"u{u}", "", index, tokens.astype(np.uint16)))
    plan = pack.PackPlan(shards, 2, 1)
    folder = layout.pack_exchange(plan.name)
    for k in range(plan.buckets):
        result = exchange_bucket(layout, plan, 0, k, [(u, r) for u, r, *_ in units], "uint16")
        marker = json.loads((folder / result.object.replace(".bin", ".json")).read_bytes())
        assert list(marker) == ["group", "bucket", "object", "sections"]
        data = (folder / result.object).read_bytes()
        assert sum(t + i for _, t, i in result.sections) == len(data)
        for shard, (at, n_tok, n_idx) in zip(plan.bucket_parts(k), result.sections, strict=True):
            lo, hi = pack.key_range(shard, shards)
            want_tokens, want_rows = [], []
            for _, _, index, tokens in units:
                keys = index["key"].to_numpy()
                inside = (keys >= lo) & (keys < hi) if hi < 2**64 else keys >= lo
                starts = np.concatenate([[0], np.cumsum(index["length"].to_numpy())])
                for i in np.flatnonzero(inside):
                    want_tokens.append(tokens[starts[i] : starts[i + 1]])
                want_rows.append(index.filter(pa.array(inside)))
            raw = framed.decompress_section(data[at : at + n_tok], 2 * sum(map(len, want_tokens)))
            got = np.frombuffer(raw, np.uint16)
            assert np.array_equal(got, np.concatenate(want_tokens or [np.empty(0, np.uint16)]))
            rows = sections.decode(data[at + n_tok : at + n_tok + n_idx])  # a stream, rows or not
            assert rows.equals(pa.concat_tables(want_rows))
        assert exchange_bucket(layout, plan, 0, k, [], "uint16").reused
    assert n_tok == 0 and n_idx > 0  # the last shard: no rows, still an index stream


def test_fewer_writers_make_an_exchange_one_pass_where_a_count_fits_the_task_cap():
    from pipeline.exchange.plan import one_pass_writers

    gib, mib = 2**30, 2**20
    # 10 TB's candidates (~243 GB) into 583 label partitions at 32 MiB requests, 32 GiB a task:
    # 12 writers make pieces of >= 32 MiB (one pass), no fewer than 243 GB / 32 GiB = 8
    writers = one_pass_writers(583, 583, 243 * 10**9, 32 * mib, 32 * gib, small_gets=0)
    assert writers == 12 and direct(583, writers, 243 * 10**9, 32 * mib, small_gets=0)
    # 9,314 partitions at 16 MiB: one pass needs <= 1 writer, the 4 GiB cap >= 57: two passes
    assert one_pass_writers(9314, 9314, 243 * 10**9, 16 * mib, 4 * gib) == 9314
    # already one pass (a small exchange): the writers stay
    assert one_pass_writers(4, 4, 10**5, 16 * mib) == 4


def test_a_writer_of_many_inputs_spills_them_into_one_ordinary_sectioned_object(tmp_path):
    """regroup.sectioned (near_fetch's writer): pieces made input by input, merged part by part,
    give the object write_sectioned gives for all the rows at once, byte for byte: same rows per
    part in input order, whatever part an input has no rows in."""
    from pipeline.exchange.regroup import row_sections, sectioned, span_piece

    root, n = Location.from_uri(str(tmp_path)), 5
    _, tables = _writers(root, 3, n, 40)
    tables.append(SCHEMA.empty_table())  # an input without rows: an empty piece
    parts = [t["key"].to_numpy() % n for t in tables]
    size = sectioned(
        root / "spilled.bin",
        n,
        row_sections(SCHEMA, raw=True),
        (span_piece(t, p, range(n)) for t, p in zip(tables, parts, strict=True)),
    )
    whole = pa.concat_tables(tables)
    once = sections.write_sectioned(root / "once.bin", whole, whole["key"].to_numpy() % n, n)
    spilled, direct_ = (
        sections.writer_ranges([sections.SectionedObject(root / name, s)], n)
        for name, s in (("spilled.bin", size), ("once.bin", once))
    )
    assert size == (root / "spilled.bin").size() == once
    assert (root / "spilled.bin").read_bytes() == (root / "once.bin").read_bytes()
    for p in range(n):
        assert sections.read_part(spilled[p], SCHEMA).equals(
            sections.read_part(direct_[p], SCHEMA)
        )
        assert sections.read_part(spilled[p], SCHEMA).num_rows > 0


def test_a_shard_gathers_its_documents_from_the_pieces_as_from_their_concatenation():
    from pipeline.tokens.pack import gather_pieces, gather_segments

    rng = np.random.default_rng(5)
    sizes = [7, 0, 1, 12, 0, 5, 9]  # empty pieces too; runs cross from one piece into the next
    pieces = [rng.integers(0, 60_000, n).astype(np.uint16) for n in sizes]
    whole = np.concatenate(pieces)
    for _ in range(200):
        cuts = np.sort(rng.choice(np.arange(1, len(whole)), rng.integers(1, 10), replace=False))
        bounds = np.concatenate([[0], cuts, [len(whole)]])
        starts, lengths = bounds[:-1], np.diff(bounds)
        order = rng.permutation(len(starts))
        if rng.random() < 0.3:
            order = np.sort(order)  # in file order: one run over every piece
        want = gather_segments(whole, starts[order], lengths[order])
        got = gather_pieces(pieces, starts[order], lengths[order])
        assert got.dtype == whole.dtype and got.tolist() == want.tolist()
    assert gather_pieces(pieces, np.empty(0, np.int64), np.empty(0, np.int64)).size == 0

"""Band rows as sections hold them (dedup/band_rows.py): lossless, order-free, and smaller than
an Arrow stream of the same rows where a section holds a few hundred rows (10 TB's)."""

import numpy as np
import pyarrow as pa
import pytest

from pipeline.dedup import band_rows
from pipeline.exchange import sections

ARROW_ZSTD = pa.Codec("zstd", compression_level=1)  # an Arrow stream's own compression

RNG = np.random.default_rng(7)


def _rows(n: int, partition: int, partitions: int, shared: bool = True) -> pa.Table:
    """n band rows whose hashes all fall in `partition` of `partitions` (a range of hashes),
    a quarter of them sharing a hash with another row (a candidate bucket) where `shared`."""
    lo, hi = partition * 2**64 // partitions, (partition + 1) * 2**64 // partitions
    hashes = RNG.integers(lo, hi - 1, n, dtype=np.uint64, endpoint=True)
    if shared:
        hashes[: n // 4] = hashes[n // 4 : 2 * (n // 4)]
    keys = RNG.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    return pa.table({"band_hash": hashes, "key": keys}, band_rows.BAND_SCHEMA)


def test_a_partition_is_one_range_of_hashes():
    hashes = RNG.integers(0, 2**64 - 1, 10_000, dtype=np.uint64, endpoint=True)
    hashes[:3] = [0, 2**64 - 1, 2**63]
    for n in (1, 4, 9314):
        parts = band_rows.partition_of(hashes, n)
        assert parts.tolist() == [int(h) * n >> 64 for h in hashes.tolist()]
        order = np.argsort(hashes)
        assert (np.diff(parts[order]) >= 0).all() and parts.min() >= 0 and parts.max() < n


@pytest.mark.parametrize("n", [1, 2, 230, 20_000])
def test_a_section_keeps_every_row_whatever_their_order(n):
    rows = _rows(n, 17, 64)
    data = band_rows.encoded(rows)
    shuffled = rows.take(pa.array(RNG.permutation(n)))
    assert band_rows.encoded(shuffled) == data  # the set of rows decides the bytes
    back = band_rows.decoded(data)
    expected = rows.sort_by([("band_hash", "ascending"), ("key", "ascending")])
    assert back.equals(expected)
    assert band_rows.decoded(b"").num_rows == 0 and band_rows.encoded(rows.slice(0, 0)) == b""


def test_keys_section_round_trips_as_eight_bytes_a_key():
    keys = RNG.integers(-(2**63), 2**63 - 1, 7, dtype=np.int64)
    data = band_rows.keys_encoded(keys)
    assert len(data) == 8 * len(keys)
    assert (band_rows.keys_decoded(data) == keys).all()


def test_sections_of_10tb_size_are_smaller_than_an_arrow_stream_of_the_rows():
    """At configs/s3.yaml's 10 TB cut (9,314 partitions): ~230 rows a read-pass band section,
    ~7 keys a key section, ~226k rows a pass-1 band section."""
    arrow = lambda t: len(sections.encode(t, compression=ARROW_ZSTD))  # noqa: E731
    for n, most in ((230, 14.0), (226_000, 12.6)):
        rows = _rows(n, 4000, 9314)
        assert len(band_rows.encoded(rows)) / n <= most < arrow(rows) / n
    keys = RNG.integers(-(2**63), 2**63 - 1, 7, dtype=np.int64)
    table = pa.table({"band_hash": pa.nulls(7, pa.uint64()), "key": keys}, band_rows.BAND_SCHEMA)
    assert len(band_rows.keys_encoded(keys)) * 8 < arrow(table)


@pytest.mark.parametrize("partitions", [4, 9314])
def test_the_size_model_follows_the_codec(partitions):
    """band_rows.section_bytes, what plan and the band exchange's cut assume, within 6 % of
    what a section takes from 100 rows (10 TB's read-pass sections: ~230) to 200k (its pass-1)."""
    for n in (100, 230, 2_000, 20_000, 200_000):
        written = len(band_rows.encoded(_rows(n, partitions // 2, partitions, shared=False)))
        assert abs(band_rows.section_bytes(n, partitions) / written - 1) < 0.06, (n, written)


@pytest.mark.parametrize(
    ("docs", "partitions", "within"),
    [(2_000, 4, 0.1), (10_000, 3, 0.1), (10_000, 16, 0.1), (3_000, 9314, 0.06)]
    + [(10_000, 1000, 0.06)],
)
def test_plan_sizes_a_band_object_as_the_read_task_writes_it(tmp_path, docs, partitions, within):
    """report/dry_run_stages's model of the read pass's band object against the object itself: close
    where a section's keys are distinct (many partitions: 10 TB's), looser where they repeat."""
    from support import SAMPLE_CONFIG

    from pipeline.config.loader import load_config
    from pipeline.core.storage import Location
    from pipeline.report.dry_run_stages import band_object_doc_bytes
    from pipeline.run.near_signing import write_band_object

    cfg = load_config(
        SAMPLE_CONFIG, overrides=[f"dedup.partitions={partitions}"], check_paths=False
    )
    sigs = RNG.integers(0, 2**32, (docs, cfg.dedup.near.num_perm), dtype=np.uint32)
    keys = RNG.integers(-(2**63), 2**63 - 1, docs, dtype=np.int64)
    size = write_band_object(Location.from_uri(str(tmp_path / "u.bin")), keys, sigs, cfg)
    planned = band_object_doc_bytes(docs, cfg.dedup.near.bands, partitions) * docs
    assert abs(planned / size - 1) < within, (planned, size)


def test_a_section_whose_documents_repeat_keeps_their_keys_once():
    """Few partitions: a document's band rows meet in one section (kind 1, a key dictionary),
    smaller than the same rows as an Arrow stream in document order, where zstd sees each
    document's rows side by side."""
    docs, bands = 2_000, 32
    keys = np.repeat(RNG.integers(-(2**63), 2**63 - 1, docs, dtype=np.int64), bands)
    hashes = RNG.integers(0, 2**62, docs * bands, dtype=np.uint64)  # partition 0 of 4
    rows = pa.table({"band_hash": hashes, "key": keys}, band_rows.BAND_SCHEMA)
    data = band_rows.encoded(rows)
    assert band_rows.encoded(rows.take(pa.array(RNG.permutation(rows.num_rows)))) == data
    back = band_rows.decoded(data)
    assert back.equals(rows.sort_by([("band_hash", "ascending"), ("key", "ascending")]))
    arrow = sections.encode(rows, compression=ARROW_ZSTD)
    assert len(data) < 0.95 * len(arrow)


def test_row_order_is_lexsorts_where_hashes_repeat():
    """Runs of 2 to 40 equal hashes (documents sharing a band) with keys in any order, as the
    read task's band object has them and the band exchange's pass 1 too: its sections' bytes
    are those of np.lexsort's order."""
    hashes = RNG.integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True)
    for at in range(0, 4000, 97):
        hashes[at : at + 2 + at % 39] = hashes[at]
    keys = RNG.integers(0, 300, len(hashes), dtype=np.int64)
    for h, k in ((hashes, keys), (hashes, np.sort(keys)), (hashes[:1], keys[:1])):
        want = np.lexsort((k, h))
        assert band_rows.row_order(h, k).tolist() == want.tolist()
        rows = pa.table({"band_hash": h, "key": k}, band_rows.BAND_SCHEMA)
        assert band_rows.encoded(rows) == band_rows.encoded_sorted(h[want], k[want])

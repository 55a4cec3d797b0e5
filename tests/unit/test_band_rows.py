"""Band rows as sections hold them (dedup/band_rows.py): lossless, order-free, and smaller than
an Arrow stream of the same rows where a section holds a few hundred rows (10 TB's)."""

import numpy as np
import pyarrow as pa
import pytest

from pipeline.dedup import band_rows
from pipeline.exchange import sections

RNG = np.random.default_rng(7)


def _rows(n: int, partition: int, partitions: int) -> pa.Table:
    """n band rows whose hashes all fall in `partition` of `partitions` (a range of hashes)."""
    lo = partition * 2**64 // partitions
    width = (partition + 1) * 2**64 // partitions - lo
    hashes = np.array([lo + int(x * width) for x in RNG.random(n)], dtype=np.uint64)
    hashes[: n // 4] = hashes[n // 4 : 2 * (n // 4)]  # shared band hashes: candidate buckets
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
    arrow = lambda t: len(sections.encode(t, compression=sections.ROWS_COMPRESSION))  # noqa: E731
    for n, most in ((230, 14.0), (226_000, 12.6)):
        rows = _rows(n, 4000, 9314)
        assert len(band_rows.encoded(rows)) / n <= most < arrow(rows) / n
    keys = RNG.integers(-(2**63), 2**63 - 1, 7, dtype=np.int64)
    table = pa.table({"band_hash": pa.nulls(7, pa.uint64()), "key": keys}, band_rows.BAND_SCHEMA)
    assert len(band_rows.keys_encoded(keys)) * 8 < arrow(table)

"""`bench listing --synthetic` feeds the driver what the store's listing gives: the same
objects uploaded to SeaweedFS and listed for real make the same inputs, units, skipped files
and run id as their synthetic metadata."""

from __future__ import annotations

from pipeline.bench import listing as bench
from pipeline.core.storage import Location


def test_synthetic_listing_plans_as_the_store(s3_server, tmp_path):
    n, object_bytes = 40, 300
    cfg = bench.bench_config(s3_server, str(tmp_path / "out"))
    cfg = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"unit_bytes": 4096})})
    bench.upload(Location.from_uri(cfg.sources[0].uri, cfg.storage), n, object_bytes)

    real, real_units, real_first = bench.to_first_task(cfg)
    fake, fake_units, fake_first = bench.to_first_task(
        cfg, bench.synthetic_listing(n, object_bytes)
    )
    assert real.listed.files == n and len(real_units.ids) > 1
    for table in ("inputs", "units", "skipped"):
        assert getattr(fake.listed, table).equals(getattr(real.listed, table)), table
    assert fake.layout.run_id == real.layout.run_id
    assert fake_units.ids == real_units.ids and fake_first == real_first

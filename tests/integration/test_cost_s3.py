"""The request counters the cost report prices are what the S3 server received."""

from __future__ import annotations

from pipeline.config.sections import StorageConfig
from pipeline.core.io_counters import IO
from pipeline.core.storage import Location
from pipeline.testing.s3 import recorded_requests


# -- request counters are what the server received -------------------------------------------
def test_s3_request_counters_match_the_server(s3_bucket, s3_storage, s3_server):
    counts0 = IO.snapshot()
    with recorded_requests(s3_server) as proxy:
        root = Location.from_uri(f"s3://{s3_bucket}/d", StorageConfig(endpoint_url=proxy.endpoint))
        (root / "a.bin").write_bytes(b"a" * 1000)
        (root / "b.bin").write_bytes(b"b" * 10)
        assert (root / "a.bin").read_bytes(0, 100) == b"a" * 100
        with (root / "a.bin").open_read(block_size=256) as f:  # several range GETs
            assert b"".join(iter(lambda: f.read(100), b"")) == b"a" * 1000
        assert sorted(root.find()) == [f"{root.path}/a.bin", f"{root.path}/b.bin"]
        assert not (root / "missing").exists()
        (root / "b.bin").remove()
    counts = IO.delta(IO.snapshot(), counts0)
    requests = proxy.requests
    methods = [m for m, _ in requests]
    lists = sum(1 for m, url in requests if m == "GET" and "list-type=2" in url)
    assert counts.get("list_requests", 0) == lists
    assert counts["get_requests"] == methods.count("GET") - lists
    assert counts["get_requests"] > 2, "open_read with small blocks makes several GETs"
    assert counts["put_requests"] == methods.count("PUT") == 2
    assert counts.get("head_requests", 0) == methods.count("HEAD")
    assert counts["delete_requests"] == methods.count("DELETE") + sum(
        1 for m, url in requests if m == "POST" and url.endswith("?delete")
    )
    assert counts["bytes_read"] == 1100

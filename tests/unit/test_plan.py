
import pytest

from pipeline.cli import main as cli
from pipeline.core.storage import Location
from pipeline.core.units import MB, MiB
from pipeline.stream import plan
from pipeline.testing.synthetic import write_version


def test_brief_worked_example():
    # 2 GB/s with 16 MB ranges, L = 50 ms, B = 100 MB/s -> W = 0.21 s, N ~ 27.
    assert plan.request_time(0.05, 100 * MB, 16 * MB) == pytest.approx(0.21)
    assert plan.inflight_needed(2e9, 0.05, 100 * MB, 16 * MB) == 27
    # 10 % rule: s >= 9 L B = 45 MB, where latency is exactly a tenth of the request time.
    size = plan.latency_bound_size(0.05, 100 * MB)
    assert size == pytest.approx(45 * MB)
    assert 0.05 / plan.request_time(0.05, 100 * MB, size) == pytest.approx(0.10)


def test_inflight_rounds_up_and_is_at_least_one():
    assert plan.inflight_needed(1, 0.05, 100 * MB, 16 * MB) == 1
    assert plan.inflight_needed(125 * 16 * MB, 0.0, 16 * MB, 16 * MB) == 125  # exact: no +1


def test_default_request_size_is_clamped_and_whole_mib():
    assert plan.default_request_bytes(0.05, 100 * MB) == 43 * MiB  # 45 MB rounded up
    assert plan.default_request_bytes(0.0, 100 * MB) == plan.MIN_REQUEST
    assert plan.default_request_bytes(1.0, 1000 * MB) == plan.MAX_REQUEST


def test_read_plan_respects_memory_cap_and_overrides():
    loose = plan.read_plan(0.05, 100 * MB, target=2e9, request_bytes=16 * MB)
    assert loose.inflight == 27 and loose.little_inflight == 27
    tight = plan.read_plan(0.05, 100 * MB, target=2e9, max_buffer_bytes=10 * MiB, request_bytes=MiB)
    assert tight.request_bytes == MiB
    assert tight.inflight == 9  # 10 MiB holds 9 requests in flight + the one being consumed
    assert (tight.inflight + 1) * tight.request_bytes <= tight.max_buffer_bytes
    forced = plan.read_plan(request_bytes=5000, inflight=3)
    assert (forced.request_bytes, forced.inflight) == (4096, 3)  # token-aligned
    small_cap = plan.read_plan(0.05, 100 * MB, max_buffer_bytes=8 * MiB)
    assert small_cap.request_bytes == 2 * MiB  # at most a quarter of the cap


def test_shard_size_and_node_rate():
    assert plan.recommended_shard_bytes(43 * MiB) == 256 * MiB
    assert plan.recommended_shard_bytes(MiB) == 64 * MiB
    assert plan.recommended_shard_bytes(300 * MiB) == 1024 * MiB
    assert plan.node_bytes_per_s(8, 10_000, 2) == 160_000


def _run_plan(argv):
    return cli.main(["plan", *argv])


def test_plan_command_prints_the_brief_figures(capsys):
    assert (
        _run_plan(
            [
                "--latency-ms",
                "50",
                "--bandwidth-mbps",
                "100",
                "--target-gbps",
                "2",
                "--gpus-per-node",
                "8",
                "--tokens-per-s-per-gpu",
                "10000",
                "--nodes",
                "4",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "s >= 9*L*B = 45.00 MB" in out
    assert "W = L + s/B = 0.210 s" in out and "N = X*W/s = 26.25 -> 27" in out
    assert "W = L + s/B = 0.500 s" in out and "-> 23" in out  # 45 MB requests
    assert "recommended 256 MiB" in out
    assert "160.00 kB/s" in out and "4 node(s): 640.00 kB/s" in out


def test_plan_probe_measures_a_version(tmp_path, capsys):
    version = write_version(Location.from_uri(str(tmp_path)) / "ds", [300_000])
    assert _run_plan(["--probe", version.uri]) == 0
    out = capsys.readouterr().out
    assert "(probed)" in out and "in flight for 16 MB ranges" in out

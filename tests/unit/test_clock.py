"""run/clock.py: the phase clock behind the summary's time line."""

from pipeline.run.clock import PHASES, PhaseClock, timing_line


def test_the_phases_and_the_rest_add_up_to_the_total():
    clock = PhaseClock()
    for name in ("stages", "ray start", "stages", "worker start"):
        with clock.phase(name):
            pass
    split = clock.split()
    assert list(split) == ["ray start", "worker start", "stages", "other", "total"]
    assert list(split)[:3] == [p for p in PHASES if p in split]
    assert abs(sum(v for k, v in split.items() if k != "total") - split["total"]) < 0.005
    line = timing_line({"ray start": 4.04, "stages": 2.0, "other": 0.5, "total": 6.54})
    assert line == "time                     6.5 s  (ray start 4.0, stages 2.0, other 0.5)"


def test_bench_startup_reads_back_the_summary_line():
    from pipeline.bench.startup import phases_of

    split = {"ray start": 4.0, "worker start": 1.5, "stages": 2.0, "other": 0.5, "total": 8.0}
    summary = f"tokens  12\n{timing_line(split, '  (dedup kernels compiled: first run here)')}\n"
    assert phases_of(summary) == split

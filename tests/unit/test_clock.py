"""run/clock.py: the phase clock behind the summary's time line."""

import subprocess
import sys

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


_ORPHAN = """
import subprocess, sys
burn = "import time; t = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
subprocess.Popen([sys.executable, "-c", burn])  # outlives this process, as Ray's workers do
"""


def test_bench_startup_counts_the_cpu_of_processes_that_outlive_their_parent():
    """A Ray worker is the raylet's child, not the driver's: bench startup adopts such orphans
    (a child subreaper, in a process of its own here) and counts their CPU once reaped."""
    probe = (
        "import resource, subprocess, sys\n"
        "from pipeline.bench.startup import _adopt_orphans, _reap_orphans\n"
        "_adopt_orphans()\n"
        f"subprocess.run([sys.executable, '-c', {_ORPHAN!r}], check=True)\n"
        "_reap_orphans()\n"
        "used = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(used.ru_utime + used.ru_stime)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert float(done.stdout.split()[-1]) >= 0.6, done.stdout

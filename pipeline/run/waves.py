"""The thin Ray layer under the stages: run a wave of tasks, show its progress, count it.

A stage function (run/*_stage.py) gets a `Waves` and submits its tasks through `waves.task(name)`;
`waves.run(stage, futures)` waits for them and adds them to the stage's report (the summary
table) and its stats.json entry (formats/run_stats.py); a wave the next stage need not wait for
goes through `waves.later`: its tasks are submitted behind the next wave's own (the work the
pipeline waits on gets the workers first) and waited for before the commit (`settle`).
Nothing of a stage's data lives here: stages pass their typed results to each other explicitly
(run/driver.py).

`Waves(inline=True)` runs every task in this process, one after the other, with the same
functions and arguments (benchmarks time a stage without Ray: bench/tokenize.py).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from tqdm import tqdm

from pipeline.core.io_counters import IO
from pipeline.exchange.regroup import regroup
from pipeline.run import (
    exact_dedup_tasks,
    merge_tasks,
    neardup,
    pack_tasks,
    read_tasks,
    tokenize_tasks,
)
from pipeline.run.results import RunError, StageReport, TaskResult

# every Ray task of a run, by name: the functions are the task bodies
TASKS = {
    fn.__name__: fn
    for fn in (
        read_tasks.list_units,
        read_tasks.read_unit_task,
        merge_tasks.merge_quarantine,
        exact_dedup_tasks.exact_partition,
        merge_tasks.merge_audit,
        tokenize_tasks.tokenize_probe,
        tokenize_tasks.select_unit,
        tokenize_tasks.select_bucket,
        pack_tasks.exchange_bucket,
        pack_tasks.pack_shard,
        pack_tasks.pack_shard_direct,
        regroup,
        neardup.near_band_group,
        neardup.near_buckets,
        neardup.near_fetch,
        neardup.star_task,
        neardup.star_fold,
        neardup.members_task,
        neardup.near_keep,
    )
}


class StageBars:
    """One progress bar per stage: a stage's later waves (its steps) add their tasks to the
    bar the stage opened, which shows the step; the next stage closes it."""

    def __init__(self, show: bool) -> None:
        self.show = show
        self.bar: tqdm | None = None
        self.steps = 0

    def wave(self, name: str, tasks: int, new_stage: bool) -> tqdm:
        if new_stage or self.bar is None:
            self.close()
            self.bar = tqdm(
                total=tasks,
                desc=f"{name:>10}",
                unit="task",
                disable=not self.show,
                file=sys.stderr,
                leave=True,
            )
            self.steps = 0
        else:
            self.bar.total += tasks
        self.steps += 1
        self.bar.set_postfix_str(f"step {self.steps}", refresh=False)
        self.bar.refresh()
        return self.bar

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class _Inline:
    """A task run in this process: `.remote(...)` returns its result, not a future."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def options(self, **_):
        return self


class Waves:
    """The run's waves of tasks, their reports (`reports`, the summary's rows) and stats.json
    entries (`stats`), and the lease renewed while they run."""

    def __init__(self, show_progress: bool = False, inline: bool = False) -> None:
        self.inline = inline
        wrap = _Inline if inline else ray.remote
        self._tasks = {name: wrap(fn) for name, fn in TASKS.items()}
        self.reports: list[StageReport] = []
        self.stats: list[dict[str, Any]] = []
        self.bars = StageBars(show_progress)
        self.io_mark = IO.snapshot()  # the driver's own I/O is counted from here (own_io)
        self.lease = None  # held while stages run: renewed well before it expires
        self.wave_docs = 0  # documents of the last wave (a redo wave replaces them)
        self.laters: list[Later] = []  # `later` waves not waited for yet

    def task(self, name: str):
        """The task `name` of TASKS, ready to `.remote(...)` (in this process when inline)."""
        return self._tasks[name]

    def put(self, value: Any) -> Any:
        """A value many tasks of a wave share (the object store; itself when inline)."""
        return value if self.inline else ray.put(value)

    def get(self, refs: list) -> list:
        """Results of futures the stage waits for itself (not counted as a wave)."""
        return refs if self.inline else _got(refs)

    def run(self, name: str, futures: list, merge: bool = False, redo: bool = False) -> list:
        """Wait for one wave of tasks; with merge, count it into the previous report of that
        name. Its report adds up the results' own documents and bytes (stage_docs, stage_bytes);
        a redo wave reruns the previous one's work, so its documents replace that wave's.
        A declared `later` wave is submitted now, behind this wave's tasks."""
        for later in self.laters:
            if later.futures is None:
                later.submit()
        t0 = time.perf_counter()
        self.close_last()
        report, stats, new_stage = self._report(name, merge)
        bar = self.bars.wave(name, len(futures), new_stage)
        results: list[TaskResult] = (
            futures if self.inline else _gather(futures, bar, tick=self.keep_lease)
        )
        return self._count(report, stats, results, t0, redo)

    def later(self, name: str, submit: Callable[[], list]) -> Later:
        """A stage's wave that no later stage needs, only the commit: its report and
        stats.json entry take their place in the stage order now; `submit` (its tasks'
        `.remote` calls) runs in the next `run`, behind that wave's tasks (the work the run
        waits on gets the workers first), and the driver waits for it in `finish` or `settle`.
        Its seconds are those the driver waited there: it ran beside the stages after it."""
        self.close_last()
        report, stats, _ = self._report(name, False)
        self.laters.append(Later(report, stats, submit))
        return self.laters[-1]

    def finish(self, later: Later) -> list:
        """A `later` wave's results: submitted now if it was not yet, waited for once."""
        if later.results is not None:
            return later.results
        if later.futures is None:
            later.submit()
        self.laters = [p for p in self.laters if p is not later]
        t0 = time.perf_counter()
        bar = self.bars.wave(later.report.name, len(later.futures), True)
        results = later.futures if self.inline else _gather(later.futures, bar, self.keep_lease)
        later.results = self._count(later.report, later.stats, results, t0, False)
        return later.results

    def settle(self) -> None:
        """Wait for every `later` wave not waited for yet, in the stage order (before the
        commit)."""
        for later in list(self.laters):
            self.finish(later)

    def _count(self, report: StageReport, stats: dict, results: list, t0: float, redo: bool):
        self.own_io(self.stats[-1])  # lease renewals while it ran
        io: Counter = Counter()
        for r in results:
            io.update(r.io)
        docs = sum(r.stage_docs for r in results)
        report.docs += docs - (self.wave_docs if redo else 0)
        self.wave_docs = docs
        report.files += sum(r.stage_files for r in results)
        report.bytes += sum(r.stage_bytes for r in results)
        report.tasks += len(results)
        report.seconds += time.perf_counter() - t0
        report.reused += sum(1 for r in results if r.reused)
        report.peak_rss_mb = max([report.peak_rss_mb] + [r.peak_rss_mb for r in results])
        report.nodes = dict(Counter(report.nodes) + Counter(r.node for r in results if r.node))
        for r in results:
            for part, seconds in r.part_seconds.items():
                report.part_seconds[part] = report.part_seconds.get(part, 0.0) + seconds
        stats.update(
            tasks=report.tasks,
            reused=report.reused,
            seconds=report.seconds,
            io=dict(Counter(stats["io"]) + io),
            peak_rss_mb=report.peak_rss_mb,
            nodes=report.nodes,
        )
        return results

    def keep_lease(self) -> None:
        if self.lease is not None:
            self.lease.renew_if_due()

    def own_io(self, stats: dict) -> None:
        """Count the driver's own storage I/O since the last call into a stats.json entry: its
        `driver_io`, and its `io` with the tasks' (the listing records, field probe and lease
        under list; the document index and commit checks under commit)."""
        now = IO.snapshot()
        delta = Counter(IO.delta(now, self.io_mark))
        self.io_mark = now
        stats["driver_io"] = dict(Counter(stats.get("driver_io", {})) + delta)
        stats["io"] = dict(Counter(stats["io"]) + delta)

    def close_last(self) -> None:
        """The driver's own I/O since the last wave, into that wave's stage (what the driver
        did after a wave belongs to its stage)."""
        if self.stats:
            self.own_io(self.stats[-1])

    def driver_stage(self, name: str) -> None:
        """A stats.json entry for I/O only the driver does (the commit's), from now on."""
        self.stats.append({"stage": name, "tasks": 0, "seconds": 0.0, "io": {}})
        self.own_io(self.stats[-1])

    def _report(self, name: str, merge: bool) -> tuple[StageReport, dict, bool]:
        """The report and stats.json entry a wave counts into: the last ones, or new ones
        (then True: the wave starts a stage)."""
        if merge and self.reports and self.reports[-1].name == name:
            return self.reports[-1], self.stats[-1], False
        report = StageReport(name)
        stats = {"stage": name, "tasks": 0, "reused": 0, "seconds": 0.0, "io": {}}
        self.reports.append(report)
        self.stats.append(stats)
        return report, stats, True


@dataclass(eq=False)
class Later:
    """A wave of `Waves.later`: its report and stats entry, how its tasks are submitted, then
    their futures and results."""

    report: StageReport
    stats: dict[str, Any]
    submitter: Callable[[], list]
    futures: list | None = None  # None: not submitted yet
    results: list | None = None  # None: not waited for yet

    def submit(self) -> None:
        self.futures = self.submitter()


def _got(refs):
    """ray.get, a task's RunError raised as itself: its one line, not Ray's traceback."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, RunError):
            raise e.cause from None
        raise


def _gather(futures: list, bar: tqdm, tick=None) -> list:
    """Wait for a wave's tasks, advancing the stage's bar; results keep the submission order.

    `tick` is called at least every few seconds while waiting (the driver renews its lease)."""
    results: dict = {}
    pending = list(futures)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=5.0)
        if tick is not None:
            tick()
        for ref in ready:
            results[ref] = _got(ref)
            bar.update(1)
    return [results[f] for f in futures]

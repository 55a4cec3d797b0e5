"""A `later` wave: its place in the stage order is taken when it is declared; its tasks are
submitted behind the next wave's own and waited for by `finish` or `settle` (before the
commit), counted into its own report, once."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.run.results import TaskResult
from pipeline.run.waves import Waves


@dataclass
class Done(TaskResult):
    docs: int = 0

    @property
    def stage_docs(self) -> int:
        return self.docs


def _declared(waves: Waves, calls: list) -> object:
    def submit():
        calls.append("quarantine")
        return [Done(docs=3)]

    return waves.later("quarantine", submit)


def test_a_later_wave_runs_behind_the_next_wave_and_is_waited_for_at_settle():
    waves, calls = Waves(inline=True), []
    merging = _declared(waves, calls)
    assert calls == []  # nothing submitted yet: the next wave's tasks go first
    waves.run("exact", [Done(docs=5), Done(docs=7)])
    assert calls == ["quarantine"]
    waves.run("exact", [Done(docs=1)], merge=True)
    waves.run("near", [Done()])
    assert merging.results is None  # submitted, not waited for: no stage needs it
    waves.settle()
    assert [r.docs for r in merging.results] == [3]
    assert [(r.name, r.tasks, r.docs) for r in waves.reports] == [
        ("quarantine", 1, 3),
        ("exact", 3, 13),
        ("near", 1, 0),
    ]
    assert [s["stage"] for s in waves.stats] == ["quarantine", "exact", "near"]
    waves.settle()
    waves.run("select", [Done()])
    assert calls == ["quarantine"] and waves.reports[0].tasks == 1  # once


def test_finish_submits_a_declared_later_wave_once():
    waves, calls = Waves(inline=True), []
    merging = _declared(waves, calls)
    first = waves.finish(merging)
    assert [r.docs for r in first] == [3]
    assert waves.finish(merging) == first
    waves.run("exact", [Done()])
    assert calls == ["quarantine"]
    assert waves.reports[0].tasks == 1


def test_settle_waits_for_a_wave_no_run_submitted():
    waves, calls = Waves(inline=True), []
    merging = _declared(waves, calls)
    waves.settle()
    assert calls == ["quarantine"] and merging.results is not None

"""Where tasks ran: each result names its node; a stage's report and stats.json entry count the
tasks per node; stats files without the count stay readable."""

from __future__ import annotations

import json

from pipeline.formats.run_stats import parse_stats
from pipeline.run.results import TaskResult
from pipeline.run.timer import TaskTimer
from pipeline.run.waves import Waves


def test_a_stage_counts_its_tasks_per_node_across_waves():
    waves = Waves(inline=True)
    on = [TaskResult(node=ip) for ip in ("10.0.0.3", "10.0.0.3", "10.0.0.4")]
    waves.run("read+hash", on)
    waves.run("read+hash", [TaskResult(node="10.0.0.4"), TaskResult()], merge=True)
    (report,), (entry,) = waves.reports, waves.stats
    assert report.nodes == entry["nodes"] == {"10.0.0.3": 2, "10.0.0.4": 2}
    assert report.tasks == 5  # a result with no node (run outside Ray) is a task, on no node
    assert parse_stats([entry]).stages[0].nodes == {"10.0.0.3": 2, "10.0.0.4": 2}


def test_outside_ray_a_task_names_no_node(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # the suite's Ray may be up
    assert TaskTimer().result(TaskResult).node == ""


def test_stats_without_nodes_still_read():
    (stage,) = parse_stats(json.dumps([{"stage": "pack", "tasks": 2}])).stages
    assert stage.nodes is None

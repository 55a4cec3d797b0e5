"""A run's stats.json (`_work/runs/<run>/stats.json`, core/layout.RUN_STATS): what each stage did
and moved through storage, written by the commit just before the manifest and read by the cost
report (report/build.py), `bench scale` and the tests. Validated on read: a file this model
rejects is a `StatsError` naming the field, never a KeyError deep in the report.

    {"format": "pipeline.stats/1", "run_id": str,
     "input_bytes": int, "bytes_read": int, "bytes_written": int,
     "bytes_moved_per_input_byte": {"total": float, <stage>: float},
     "stages": [{"stage": str, "tasks": int, "reused": int, "seconds": float,
                 "io": {"bytes_read": int, "bytes_written": int, "list_requests": int,
                        "get_requests": int, "head_requests": int, "put_requests": int,
                        "copy_requests": int, "delete_requests": int, "other_requests": int},
                 "driver_io": {...}   (the part of io the run's driver did itself),
                 "peak_rss_mb": float, "bytes_moved_per_input_byte": float,
                 "nodes": {<node IP>: int}   (tasks that ran on each Ray node; optional),
                 "reads_class": str   (optional: the data class the stage reads)}]}

A run's last stage is "commit" (the driver's own I/O for the document index, checks and lease).
A takedown writes only run_id and its one "pack" stage. The report also takes a hand-made file
holding just the list of stages (`report --stats`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, ValidationError

FORMAT = "pipeline.stats/1"


class StatsError(ValueError):
    """A stats file that does not parse or that the model rejects."""


class StageStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stage: str
    tasks: NonNegativeInt = 0
    reused: NonNegativeInt = 0
    seconds: NonNegativeFloat = 0.0
    io: dict[str, NonNegativeInt] = Field(default_factory=dict)
    driver_io: dict[str, NonNegativeInt] = Field(default_factory=dict)
    peak_rss_mb: NonNegativeFloat = 0.0
    nodes: dict[str, NonNegativeInt] | None = None
    bytes_moved_per_input_byte: NonNegativeFloat = 0.0
    reads_class: str | None = None


class RunStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    run_id: str = ""
    input_bytes: NonNegativeInt = 0
    bytes_read: NonNegativeInt = 0
    bytes_written: NonNegativeInt = 0
    bytes_moved_per_input_byte: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    stages: list[StageStats] = Field(default_factory=list)

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=1, exclude_none=True).encode()


def parse_stats(data: bytes | str | Any) -> RunStats:
    """A stats.json's bytes (or its parsed JSON), or a bare list of stages; StatsError if the
    model rejects it, naming the first bad field."""
    try:
        raw = json.loads(data) if isinstance(data, (bytes, str)) else data
    except ValueError as e:
        raise StatsError(f"not JSON: {e}") from None
    if isinstance(raw, list):
        raw = {"stages": raw}
    try:
        return RunStats.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise StatsError(f"{where}: {err['msg']}") from None

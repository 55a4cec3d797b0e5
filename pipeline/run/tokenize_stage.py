"""The driver's side of tokenization: choose the engine, fall back, and select what dedup kept.

The read task tokenizes every document while it holds them (read_tasks.read_unit,
tokenize_tasks.tokenize_docs), so the text is read once and never written back:
1. `tokenize.engine: tokenizers` runs tokenizers. Otherwise a probe task
   (tokenize_tasks.tokenize_probe) loads fastokens on a worker and compares it with tokenizers
   on hard strings, before anything is read: fastokens only if it loads and agrees; else
   tokenizers, with the reason (the first differing string and position, or why it could not
   load).
2. Every read task re-encodes a sample of its documents with tokenizers before committing its
   token file. If any task reports a mismatch, the driver waits for the whole wave, then reruns
   every unit with tokenizers, rewriting the token files that wave wrote: no token file made by
   an engine that disagreed on this data is used.
3. After dedup, the `select` stage writes, per unit, the index of the documents dedup kept
   (tokenize_tasks.select_bucket, a task per unit bucket, beside the audit's task): pack reads
   those documents' tokens from the unit's token file.
The engine and the reason go into the manifest (`tokenizer.engine`, `tokenizer.engine_reason`)
and the run summary.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.exchange.sections import Range, unit_bucket
from pipeline.run.results import ReadResult, RunError, SelectResult, TokenizeResult
from pipeline.run.waves import Waves


@dataclass(frozen=True)
class Tokenized:
    """Every unit's selection of its token file (one result per unit, in unit order) and the
    engine that made them: {"engine", "engine_reason"}, the manifest's tokenizer entry."""

    results: list[TokenizeResult]
    engine: dict[str, Any]


def tokenizer_bytes(waves: Waves, cfg: Config):
    """The tokenizer file for the tasks (they get the bytes, not a driver path)."""
    with open(cfg.tokenize.tokenizer, "rb") as f:
        return waves.put(f.read())


def choose_engine(waves: Waves, cfg: Config, stage: str, tokenizer_json) -> tuple[str, str]:
    """The engine the read tasks start with, and why. RunError when the configured engine
    cannot run (engine fastokens without fastokens)."""
    if cfg.tokenize.engine == "tokenizers":
        return "tokenizers", "configured (tokenize.engine: tokenizers)"
    probe_task = waves.task("tokenize_probe")
    [probe] = waves.run(stage, [probe_task.remote(cfg, tokenizer_json)])
    if probe.error:
        raise RunError(f"{probe.error}; nothing was committed")
    if probe.engine != "fastokens":
        _say(f"tokenize: using tokenizers: {probe.reason}")
    return probe.engine, probe.reason


def with_fallback(
    wave: Callable[[str, bool], list[ReadResult]], engine: str, reason: str
) -> tuple[list[ReadResult], dict[str, Any]]:
    """wave(engine, rewrite), rerun whole with tokenizers (rewrite) when any task's sample
    check found the engine disagreeing; the results and the manifest's engine entry."""
    results = wave(engine, False)
    failed = [r.mismatch for r in results if r.mismatch]
    if failed:
        reason = (
            f"{engine} disagreed with tokenizers in {len(failed)} task(s), first: {failed[0]};"
            " the stage was rerun with tokenizers"
        )
        _say(f"tokenize: {reason}")
        engine = "tokenizers"
        results = wave(engine, True)
        still = [r.mismatch for r in results if r.mismatch]
        if still:  # tokenizers against itself cannot disagree: something else is wrong
            raise RunError(f"tokenize failed with tokenizers: {still[0]}")
    return results, {"engine": engine, "engine_reason": reason}


def select_tasks(
    waves: Waves,
    layout: RunLayout,
    unit_ids: list[str],
    bounds: list[str],
    ranges: list[list[Range]],
    read_pass: list[list[str]],
) -> list:
    """`select`'s tasks, submitted beside the audit's (tokenize_stage waits for them): one per
    unit bucket (`bounds`), each reading its bucket's removals once, where the audit reads
    them (tokenize_tasks.select_bucket): the exact and near removals' `ranges` and the units
    with read-pass audit rows, per bucket (dedup_stage.ByBucket)."""
    task, ids = waves.task("select_bucket"), sorted(unit_ids)
    at = unit_bucket(bounds, pa.array(ids, pa.string())) if ids else []
    units: list[list[str]] = [[] for _ in bounds]
    for unit, bucket in zip(ids, at, strict=True):
        units[bucket].append(unit)
    return [
        task.remote(layout, units[b], ranges[b], read_pass[b])
        for b in range(len(units))
        if units[b]
    ]


def tokenize_stage(
    waves: Waves, submitted: list, unit_ids: list[str], engine: dict[str, Any]
) -> Tokenized:
    """The index of what dedup kept of every unit's token file (`select`), from select_tasks'
    tasks; one result per unit, in `unit_ids` order."""
    batches: list[SelectResult] = waves.run("select", submitted)
    by_unit = {r.unit: r for batch in batches for r in batch.units}
    return Tokenized([by_unit[u] for u in unit_ids], engine)


def _say(line: str) -> None:
    tqdm.write(f"warning: {line}", file=sys.stderr)  # above the open progress bar

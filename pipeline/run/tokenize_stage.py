"""The driver's side of the tokenize stage: choose the engine, run the tasks, fall back.

1. `tokenize.engine: tokenizers` runs tokenizers. Otherwise a probe task
   (tokenize_tasks.tokenize_probe) loads fastokens on a worker and compares it with tokenizers
   on hard strings and the first documents of several units: fastokens only if it loads and
   agrees; else tokenizers, with the reason (the first differing document and position, or why
   it could not load).
2. Every task re-encodes a sample of its documents with tokenizers before committing anything.
   If any task reports a mismatch, the driver waits for the whole wave, then reruns every unit
   with tokenizers, rewriting the token files this wave wrote: no token file made by an engine
   that disagreed on this data is used.
The engine and the reason go into the manifest (`tokenizer.engine`, `tokenizer.engine_reason`)
and the run summary.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from pipeline.config import Config
from pipeline.core.layout import RunLayout
from pipeline.run.results import RunError, TokenizeResult
from pipeline.run.waves import Waves


@dataclass(frozen=True)
class Tokenized:
    """Every unit's token file (one result per unit, in unit order) and the engine that made
    them: {"engine", "engine_reason"}, the manifest's tokenizer entry takes both."""

    results: list[TokenizeResult]
    engine: dict[str, Any]


def tokenize_stage(waves: Waves, cfg: Config, layout: RunLayout, unit_ids: list[str]) -> Tokenized:
    """Token files for every unit. RunError when the configured engine cannot run (engine
    fastokens without fastokens)."""
    with open(cfg.tokenize.tokenizer, "rb") as f:  # tasks get the bytes, not a driver path
        tokenizer_json = waves.put(f.read())
    if cfg.tokenize.engine == "tokenizers":
        engine, reason = "tokenizers", "configured (tokenize.engine: tokenizers)"
    else:
        probe_task = waves.task("tokenize_probe")
        [probe] = waves.run(
            "tokenize", [probe_task.remote(layout, unit_ids, cfg, tokenizer_json)]
        )
        if probe.error:
            raise RunError(f"{probe.error}; nothing was committed")
        engine, reason = probe.engine, probe.reason
        if engine != "fastokens":
            _say(f"tokenize: using tokenizers: {reason}")

    task = waves.task("tokenize_unit_task")

    def wave(engine: str, rewrite: bool) -> list[TokenizeResult]:
        return waves.run(
            "tokenize",
            [task.remote(layout, u, cfg, tokenizer_json, engine, rewrite) for u in unit_ids],
            merge=True,
            redo=rewrite,  # the rerun's documents replace the failed wave's in the report
        )

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
    return Tokenized(results, {"engine": engine, "engine_reason": reason})


def _say(line: str) -> None:
    tqdm.write(f"warning: {line}", file=sys.stderr)  # above the open progress bar

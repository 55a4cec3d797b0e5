"""The pack stage: one pack per (source, split), both passes, into a new
version's shards (tokens/pack.py has the exchange; run/pack_tasks.py the tasks).

A source's units (a unit never mixes sources) go into its own shards, and with
`split.valid_fraction` > 0 its training and validation documents into separate shards
(tokens/split.py). Shard names (accounting.pack_parts): a single `input` writes `shard-00000` ...
(and `valid-00000` ...), named sources `train-<name>-00000` ... and `valid-<name>-00000` ...
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout, new_version_id
from pipeline.core.storage import Location
from pipeline.formats.verify import VerifyError
from pipeline.run.accounting import Parts, pack_parts
from pipeline.run.results import PackResult, RunError
from pipeline.run.tokenize_stage import Tokenized
from pipeline.run.waves import Waves
from pipeline.tokens.encode import load_tokenizer, token_id
from pipeline.tokens.framed import CorruptTokens
from pipeline.tokens.pack import PackPlan, pack_plan, shard_sections

# (source, split, its plan, its unit groups) of each pack of a run, in manifest order
Packs = list[tuple[str, str, PackPlan, list[list]]]


@dataclass(frozen=True)
class Packed:
    """A new version's shards: its id, the manifest's tokenizer entry and each pack's shards
    (source, split, results) in manifest order."""

    version_id: str
    tokenizer: dict[str, Any]
    parts: Parts

    @property
    def shards(self) -> list[PackResult]:
        return [r for _, _, results in self.parts for r in results]


def pack_stage(
    waves: Waves, cfg: Config, layout: RunLayout, origin_of: dict[str, str], tokenized: Tokenized
) -> Packed:
    """Both pack passes of every (source, split) into a new version's shards. `origin_of`:
    each unit's source."""
    tok_entry = tokenizer_entry(cfg, tokenized.engine)
    version_id = new_version_id(layout.run_id)
    packs = _plan_packs(cfg, origin_of, tokenized, np.dtype(tok_entry["dtype"]).itemsize)
    parts = run_packs(waves, layout, layout.version(version_id), packs, tok_entry)
    return Packed(version_id, tok_entry, parts)


def run_packs(
    waves: Waves,
    layout: RunLayout,
    version: Location,
    packs: Packs,
    tokenizer: dict[str, Any],
    error: type[RunError] = RunError,
) -> Parts:
    """Both passes of every pack into `version` (a run's, or a takedown's: run/takedown.py), as
    one stage "pack"; `error` (a RunError) when a shard fails what `verify` checks or a token
    file does not decompress to what its table says (tokens/framed.py)."""
    exchange_task = waves.task("exchange_bucket")
    two_pass = [(plan, groups) for _, _, plan, groups in packs if not plan.one_pass]
    with _stops_run(error):
        exchanged = waves.run(
            "pack",
            [
                exchange_task.remote(layout, plan, g, k, groups[g], tokenizer["dtype"])
                for plan, groups in two_pass
                for g in range(plan.groups)
                for k in range(plan.buckets)
            ],
        )
    futures, owners, at = [], [], 0
    shard_task, direct_task = waves.task("pack_shard"), waves.task("pack_shard_direct")
    for source, split, plan, groups in packs:
        if plan.one_pass:  # the shard tasks read the token files (tokens/pack.py)
            units = [unit for group in groups for unit in group]
            shards = [direct_task.remote(layout, version, plan, k, units, tokenizer)
                      for k in range(plan.shards)]  # fmt: skip
        else:
            mine = exchanged[at : at + plan.groups * plan.buckets]  # results keep their order
            at += len(mine)
            sections = shard_sections(plan, mine)
            shards = [shard_task.remote(layout, version, plan, k, sections[k], tokenizer)
                      for k in range(plan.shards)]  # fmt: skip
        futures += shards
        owners += [(source, split)] * len(shards)
    with _stops_run(error):
        packed = waves.run("pack", futures, merge=True)
    parts: Parts = []
    for (source, split), result in zip(owners, packed, strict=True):
        if not parts or parts[-1][:2] != (source, split):
            parts.append((source, split, []))
        parts[-1][2].append(result)
    return parts


def _plan_packs(
    cfg: Config, origin_of: dict[str, str], tokenized: Tokenized, itemsize: int
) -> Packs:
    packs: Packs = []
    for source, split, prefix, share in pack_parts(cfg):
        mine = [r for r in tokenized.results if origin_of[r.unit] == source]
        live = [(r.unit, r.removed) for r in mine if r.docs]
        if not live and (cfg.named_sources or split):
            continue  # nothing of this source (a single input still writes an empty shard)
        plan = pack_plan(
            # the split's share of the source's tokens: a deterministic estimate that sizes its
            # shards (every document still lands in exactly one shard)
            math.ceil(sum(r.tokens for r in mine) * itemsize * share),
            len(live),
            int(cfg.pack.shard_bytes),
            int(cfg.pack.exchange_request_bytes),
            int(cfg.pack.exchange_task_bytes),
            docs=sum(r.docs for r in mine),  # each pack reads every document's index row
        )
        if split:
            plan = dataclasses.replace(
                plan, prefix=prefix, split=split, valid_fraction=cfg.split.valid_fraction
            )
        else:
            plan = dataclasses.replace(plan, prefix=prefix)
        packs.append((source, split or "train", plan, plan.unit_groups(live)))
    return packs


def tokenizer_entry(cfg: Config, engine: dict[str, Any]) -> dict[str, Any]:
    """The manifest's `tokenizer`: the file's identity, EOS/BOS and the engine that ran."""
    tok = cfg.tokenize
    tokenizer, tok_info = load_tokenizer(tok.tokenizer, tok.eos)
    return {
        **tok_info.as_dict(),
        "special_tokens_in_text": tok.special_tokens_in_text,
        "bos": tok.bos,
        "bos_id": token_id(tokenizer, tok.bos),
        **engine,
    }


@contextmanager
def _stops_run(error: type[RunError]) -> Iterator[None]:
    """A pack task's VerifyError (a shard fails what `verify` checks) or CorruptTokens (a token
    file or exchange section does not decompress to what it should: pass 1 and one-pass shard
    tasks read token files) as `error`, one line; Ray re-raises either as a subclass."""
    try:
        yield
    except VerifyError as e:
        raise error(f"a shard fails verify: {_first_line(e)}; nothing was committed") from None
    except CorruptTokens as e:
        raise error(f"a token file is corrupt: {_first_line(e)}; nothing was committed") from None


def _first_line(e: Exception) -> str:
    """The task's own message (Ray's re-raised error also carries the remote traceback)."""
    return str(getattr(e, "cause", None) or e).strip().splitlines()[0]

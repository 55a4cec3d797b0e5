"""The keys under which a run's intermediates are reused: per stage, from what decides its bytes.

Config.stage_keys, read_key and token_key (and output_hash, the run's key) come from here; where
the keyed intermediates live is in core/layout.py.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.config import Config


# Bumped when the code changes what an intermediate holds (2: quarantine rows carry `records`;
# 3: hash and signature rows carry the source (origin, origin_rank), and a unit's hash rows
#    are one sectioned object (formats/sectioned.py).
LAYOUT_VERSION = 3
# Where data lives, how it is run, and what is kept: never part of any intermediate's bytes.
NEVER_BYTES: dict[str, Any] = {
    "name": True,
    "output": True,
    "storage": True,
    "ray": True,
    "run": True,
    "retention": True,
    "prices": True,
}
# Per stage, the further keys that do not change its bytes (each with the reason).
NOT_BYTES: dict[str, dict[str, Any]] = {
    "read": {
        # a unit id hashes its files, byte ranges and versions: the selection and the unit size
        # decide which units exist, not what a unit's read output holds
        "input": {"uri", "include", "exclude"},
        # weights set the blend line and the reader's mixture, not any intermediate's bytes
        "inputs": {"__all__": {"uri", "include", "exclude", "weight"}},
        "split": True,  # the validation split is drawn at pack time (tokens/split.py)
        "ingest": {"unit_bytes", "max_error_rate"},  # the error rate is checked after reading
        # dedup decisions are made later, from the hashes; partition_bytes only sets the count,
        # which a run resolves into dedup.partitions (Config.for_listing) before any key
        "dedup": {
            "exact",
            "near",
            "partition_bytes",
            "exchange_request_bytes",
            "exchange_task_bytes",
        },
        "tokenize": True,
        "pack": True,
    },
    "tokens": {
        # the read outputs are covered by the read key; dedup's decisions by `<removed>`
        "input": True,
        "inputs": True,
        "split": True,  # token files hold every kept document; pack draws the split
        "ingest": True,
        "dedup": True,
        # the tokenizer by content (tokenizer_sha256), not by path; batch size and engine change
        # speed, not ids; verify_fraction only decides how much is checked
        "tokenize": {"tokenizer", "batch_docs", "engine", "verify_fraction"},
        # shards and the pack exchange are cut from the token files at pack time
        "pack": {"shard_bytes", "exchange_request_bytes", "exchange_task_bytes"},
    },
}

# The read key without the kept fields (inputs[].keep_fields add `keep.<field>` columns to the
# read outputs, never to what tokenize reads from them): what the token key hashes.
READ_TEXT_NOT_BYTES: dict[str, Any] = {
    **NOT_BYTES["read"],
    "input": NOT_BYTES["read"]["input"] | {"keep_fields"},
    "inputs": {"__all__": NOT_BYTES["read"]["inputs"]["__all__"] | {"keep_fields"}},
}


def stage_keys(config: Config) -> dict[str, str]:
    """The key of each reused intermediate, from everything that decides its bytes.

    A stage's key hashes the whole config minus the keys listed in NOT_BYTES for that stage
    (keys known not to change its bytes), so a config key added later counts by default: at
    worst an unchanged output is recomputed, never a stale one reused. The token key also
    hashes the read key (token files are made from the read outputs) and the tokenizer by
    content. What a unit holds is in its id and what dedup removed in `<removed>`
    (core/layout.py).
    """
    keys: dict[str, str] = {}
    for stage, exclude in NOT_BYTES.items():
        data = _stage_data(config, exclude)
        if stage == "tokens":
            # the read outputs' text, ids and rows: the kept fields' columns never reach a
            # token file, so changing inputs[].keep_fields re-reads but does not re-tokenize
            data["read_key"] = _stage_key(config, READ_TEXT_NOT_BYTES)
            data["tokenizer_sha256"] = file_digest(config.tokenize.tokenizer)
        keys[stage] = digest(data)
    return keys


def _stage_data(config: Config, exclude: dict[str, Any]) -> dict[str, Any]:
    data = config.model_dump(mode="json", exclude=_merge_exclude(NEVER_BYTES, exclude))
    data["layout"] = LAYOUT_VERSION
    return data


def _stage_key(config: Config, exclude: dict[str, Any]) -> str:
    return digest(_stage_data(config, exclude))


def _merge_exclude(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
        else:
            out[key] = True if value is True or out[key] is True else set(out[key]) | value
    return out


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]

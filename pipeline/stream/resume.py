"""StreamReader's resume state: its format, the checks on loading one, and merging every rank's.

A state is JSON-able: the stream it belongs to (STREAM_KEYS), the epoch, the set of windows the
assignment started from (`base`, intervals of window ids), world_size, rank and how many windows
the rank consumed. A merged state (merge_states) has world_size and rank None and `base` the
windows no rank consumed; how StreamReader resumes from either is in reader.py's docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.stream.windows import Intervals, WindowOrder, normalize, remaining_after

# The format tag names the reader module because states saved before this split carry it.
STATE_FORMAT = "pipeline.stream.reader/1"
# `layout`: 1 = whole shards in shard_order, or the first weighted mixture (copies adjacent); 2 =
# the spread mixture (mixture.py). A state also names its `shuffle_group` (windows per shuffle
# group, 0: stream order), which a reader loading it adopts: the windows consumed are a prefix of
# that order only.
STREAM_KEYS = ("name", "version", "split", "tokens", "seq_len", "seed", "layout")
# a state saved before splits existed was always of the training stream; before shuffling, in
# stream order and layout 1
STATE_DEFAULTS = {"split": "train", "layout": 1, "shuffle_group": 0}


def window_order(state: dict[str, Any]) -> WindowOrder:
    """The order the state's ranks yield windows in (seed, epoch, shuffle group)."""
    group = state.get("shuffle_group", STATE_DEFAULTS["shuffle_group"])
    return WindowOrder(int(group), int(state["seed"]), int(state["epoch"]))


def check_state(state: dict[str, Any]) -> None:
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise ValueError(f"not a {STATE_FORMAT} state")


def check_same_stream(state: dict[str, Any], mine: dict[str, Any]) -> None:
    """`state` must be of the stream `mine` describes (its STREAM_KEYS)."""
    wrong = [k for k in STREAM_KEYS if state.get(k, STATE_DEFAULTS.get(k)) != mine[k]]
    if wrong:
        raise ValueError(
            f"state is for another stream: {', '.join(wrong)} differ"
            f" ({[state.get(k) for k in wrong]} vs {[mine[k] for k in wrong]})"
        )


def job_remaining(state: dict[str, Any]) -> Intervals:
    """Windows the job has left: a merged state's set, or a rank state read as lockstep."""
    base = normalize(state["base"])
    if state["world_size"] is None:
        return base
    world = state["world_size"]
    return remaining_after(base, world, [state["consumed"]] * world, window_order(state))


def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One job state from every rank's state: exactly the windows no rank has consumed yet."""
    if not states:
        raise ValueError("no states to merge")
    for s in states:
        check_state(s)
    first = states[0]
    same = ("format", *STREAM_KEYS, "epoch", "base", "world_size")
    if any(s.get(k) != first.get(k) for s in states for k in same):
        raise ValueError(f"states disagree on one of {same}: not from one job and epoch")
    world = first["world_size"]
    by_rank = {s["rank"]: s["consumed"] for s in states}
    if sorted(by_rank) != list(range(world)):
        raise ValueError(f"need the state of every rank 0..{world - 1}, got {sorted(by_rank)}")
    remaining = remaining_after(
        normalize(first["base"]), world, [by_rank[r] for r in range(world)], window_order(first)
    )
    return {
        **first,
        "base": [list(iv) for iv in remaining],
        "world_size": None,
        "rank": None,
        "consumed": 0,
    }

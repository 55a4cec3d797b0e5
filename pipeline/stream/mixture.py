"""The weighted mixture of a version's sources: what one epoch of StreamReader's stream is made of.

An epoch is a list of segments, stretches of shards, permuted by (seed, epoch) like shards are.
A source of weight w gives floor(w) copies of each of its shards and the first (w - floor(w)) of
each shard's tokens once more, cut into pieces of at most MIX_TOKENS tokens so that the sources
interleave: a source of weight w yields w times its tokens per epoch (within a token per shard),
the proportions of the manifest's blend line. With all weights 1 (and for versions before
sources), and for the validation split, the segments are the whole shards.
"""

from __future__ import annotations

from typing import Any, NamedTuple

MIX_TOKENS = 1 << 22  # the largest piece of a shard a weighted mixture interleaves


class Segment(NamedTuple):
    """Tokens [first, first + tokens) of the manifest shard entry `shard`, from `source`."""

    shard: dict
    first: int
    tokens: int
    source: str | None


def epoch_segments(manifest: dict[str, Any], shards: list[dict], split: str) -> list[Segment]:
    """The epoch's segments before permutation (see the module docstring)."""
    sources = manifest.get("sources") or {}
    weights = {name: float(e.get("weight", 1.0)) for name, e in sources.items()}
    if split != "train" or all(w == 1.0 for w in weights.values()):
        return [Segment(s, 0, int(s["tokens"]), s.get("source")) for s in shards]
    out = []
    for shard in shards:
        tokens, weight = int(shard["tokens"]), weights.get(shard.get("source"), 1.0)
        spans = [tokens] * int(weight)
        if rest := round((weight - int(weight)) * tokens):
            spans.append(rest)
        for span in spans:
            for first in range(0, span, MIX_TOKENS):
                count = min(MIX_TOKENS, span - first)
                out.append(Segment(shard, first, count, shard.get("source")))
    return out

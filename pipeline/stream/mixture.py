"""The weighted mixture of a version's sources: what one epoch of StreamReader's stream is made of.

Contract: an epoch's segments depend only on the manifest, the weights and the seed; each
source contributes weight x its tokens per epoch; weights outside (0, MAX_WEIGHT] and epochs
of more than a bounded number of segments are refused (WeightError, MixtureTooLarge).
In full: docs/reading.md, "The mixture of an epoch".
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import xxhash

from pipeline.formats.manifest import check_weights
from pipeline.stream.windows import shard_order

MIX_TOKENS = 1 << 22  # the largest piece of a shard a weighted mixture interleaves
LAYOUT_SHARDS, LAYOUT_SPREAD = 1, 2
MAX_SEGMENTS = 10_000_000  # the most segments one epoch may hold (see above)


class MixtureTooLarge(ValueError):
    """The weights ask for more segments per epoch than the reader builds (MAX_SEGMENTS)."""


class Segment(NamedTuple):
    """Tokens [first, first + tokens) of the manifest shard entry `shard`, from `source`."""

    shard: dict
    first: int
    tokens: int
    source: str | None


def mixture_weights(manifest: dict[str, Any], split: str) -> dict[str, float] | None:
    """The sources' weights when the split is read as a weighted mixture, else None."""
    weights = check_weights(manifest)
    if split != "train" or all(w == 1.0 for w in weights.values()):
        return None
    return weights


def layout_version(manifest: dict[str, Any], split: str) -> int:
    return LAYOUT_SHARDS if mixture_weights(manifest, split) is None else LAYOUT_SPREAD


def piece_tokens(shards: list[dict], weights: dict[str, float]) -> int:
    """MIX_TOKENS, or less where the epoch is small: at most E / (2 x max weight x sources)."""
    epoch = sum(weights.get(s.get("source"), 1.0) * int(s["tokens"]) for s in shards)
    used = {s.get("source") for s in shards if int(s["tokens"])}
    top = max([weights.get(name, 1.0) for name in used] or [1.0])
    return max(1, min(MIX_TOKENS, int(epoch // (2 * top * max(len(used), 1)))))


def epoch_segments(
    manifest: dict[str, Any], shards: list[dict], split: str, seed: int, epoch: int
) -> list[Segment]:
    """The epoch's segments in stream order (see the module docstring)."""
    weights = mixture_weights(manifest, split)
    if weights is None:
        whole = [Segment(s, 0, int(s["tokens"]), s.get("source")) for s in shards]
        return [whole[int(k)] for k in shard_order(len(whole), seed, epoch)]
    size = piece_tokens(shards, weights)
    _check_segment_count(shards, weights, size)
    names = list(manifest.get("sources") or {})
    by_source: dict[str | None, list[Segment]] = {}
    for shard in shards:
        tokens = int(shard["tokens"])
        for first in range(0, tokens, size):
            piece = Segment(shard, first, min(size, tokens - first), shard.get("source"))
            by_source.setdefault(shard.get("source"), []).append(piece)
    timed: list[tuple[float, int, int, Segment]] = []
    for name, pieces in by_source.items():
        rank = names.index(name) if name in names else len(names)
        for i, (start, seg) in enumerate(_timeline(pieces, weights.get(name, 1.0), seed, epoch)):
            timed.append((start, rank, i, seg))
    timed.sort(key=lambda t: t[:3])
    return [t[3] for t in timed]


def _check_segment_count(shards: list[dict], weights: dict[str, float], size: int) -> None:
    """At most MAX_SEGMENTS segments: each piece of a source of weight w is taken ceil(w) times
    at most."""
    segments = sum(
        math.ceil(weights.get(s.get("source"), 1.0)) * -(-int(s["tokens"]) // size)
        for s in shards
    )
    if segments > MAX_SEGMENTS:
        raise MixtureTooLarge(
            f"the weights {weights} make an epoch of {segments:,} segments, more than the"
            f" reader builds ({MAX_SEGMENTS:,}): lower the largest weight"
        )


def _timeline(
    pieces: list[Segment], weight: float, seed: int, epoch: int
) -> list[tuple[float, Segment]]:
    """One source's segments for the epoch, each with the fraction of the timeline before it."""
    source_key = xxhash.xxh3_64_intdigest(str(pieces[0].source).encode())
    order = np.random.default_rng([seed, epoch, source_key]).permutation(len(pieces))
    passes, fraction = int(weight), weight - int(weight)
    total = sum(p.tokens for p in pieces)
    out = [pieces[int(k)] for _ in range(passes) for k in order]
    rest = round(fraction * total)
    for k in order:
        if rest <= 0:
            break
        piece = pieces[int(k)]
        out.append(piece._replace(tokens=min(piece.tokens, rest)))
        rest -= piece.tokens
    length = sum(s.tokens for s in out)
    timeline, at = [], 0
    for seg in out:
        timeline.append((at / length if length else 0.0, seg))
        at += seg.tokens
    return timeline

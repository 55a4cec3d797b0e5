"""Megatron's data_path for a version: the blend line its manifest stores (`blend`) and the
`--data-path` words a trainer is given.

Contract: a blend line is "w1 prefix1 w2 prefix2 ...", one pair per shard with tokens, the
weights normalised to sum to 1 and the prefixes relative to the version folder (formats/manifest.py
parse_blend reads one); `data_path_line` joins them under the folder, the weights as written.
"""

from __future__ import annotations

from typing import Any

from pipeline.formats.manifest import parse_blend


def blend_line(shards: list[dict[str, Any]], weights: dict[str, float]) -> str:
    """Megatron's data_path for these shards: "w1 prefix1 w2 prefix2 ...", one pair per shard
    with tokens, w = weights[shard's source] x shard tokens, normalised to sum to 1. Prefixes
    are relative to the version folder (data_path_line makes them absolute)."""
    pairs = [
        (weights.get(s.get("source"), 1.0) * s["tokens"], s["bin"].removesuffix(".bin"))
        for s in shards
        if s["tokens"] > 0
    ]
    total = sum(w for w, _ in pairs)
    return " ".join(f"{w / total:.12g} {name}" for w, name in pairs)


def data_path_line(version_uri: str, blend: str) -> str:
    """Megatron's `--data-path` words for a version: its manifest's blend line (e.g.
    `blend["train"]`) with each prefix joined under the version folder `version_uri` (a local
    folder as a plain path, as Megatron opens it); the weights are kept as written."""
    parse_blend(blend)  # an even number of words, alternately a float and a prefix
    words, root = blend.split(), version_uri.removeprefix("file://").rstrip("/")
    return " ".join(w if i % 2 == 0 else f"{root}/{w}" for i, w in enumerate(words))

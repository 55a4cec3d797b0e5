"""The weighted mixture's layout (stream/mixture.py), checked by counting."""

from collections import Counter, defaultdict

import pytest

from pipeline.stream.mixture import epoch_segments, piece_tokens


def manifest_of(sources: dict[str, tuple[float, list[int]]]) -> tuple[dict, list[dict]]:
    shards = [
        {"bin": f"train-{name}-{k:05d}.bin", "tokens": tokens, "source": name}
        for name, (_, sizes) in sources.items()
        for k, tokens in enumerate(sizes)
    ]
    manifest = {"sources": {name: {"weight": w} for name, (w, _) in sources.items()}}
    return manifest, shards


CASES = {
    "sample 2:1": {"docs": (2.0, [304_437, 281_336]), "web": (1.0, [274_035, 336_622])},
    "weight 3, one small shard": {"a": (3.0, [268_000]), "b": (1.0, [4_000_000])},
    "1.5 and 0.5 over many shards": {
        "a": (1.5, [90_000 + 7_919 * k for k in range(12)]),
        "b": (0.5, [300_000] * 5),
        "c": (1.0, [1_234_567]),
    },
    "big shards": {"a": (2.0, [20_000_000, 9_000_000]), "b": (1.0, [30_000_000] * 3)},
}


def copies_apart(segments) -> dict[str, float]:
    """Per source: the smallest stream distance between two copies of the same stretch, as a
    fraction of the epoch."""
    epoch = sum(s.tokens for s in segments)
    starts, at = defaultdict(list), 0
    for s in segments:
        starts[(s.shard["bin"], s.first)].append((at, s.source))
        at += s.tokens
    closest: dict[str, float] = {}
    for places in starts.values():
        for (a, source), (b, _) in zip(places, places[1:], strict=False):
            closest[source] = min(closest.get(source, 1.0), (b - a) / epoch)
    return closest


@pytest.mark.parametrize("case", CASES)
def test_copies_are_spread_and_proportions_exact(case):
    manifest, shards = manifest_of(CASES[case])
    weights = {n: w for n, (w, _) in CASES[case].items()}
    orders = set()
    for seed, epoch in [(0, 0), (0, 1), (0, 2), (1, 0), (7, 5)]:
        segments = epoch_segments(manifest, shards, "train", seed, epoch)
        assert segments == epoch_segments(manifest, shards, "train", seed, epoch)  # deterministic
        per_source = Counter()
        for s in segments:
            assert s.first >= 0 and s.first + s.tokens <= s.shard["tokens"]
            per_source[s.source] += s.tokens
        for name, (w, sizes) in CASES[case].items():
            assert per_source[name] == int(w) * sum(sizes) + round((w - int(w)) * sum(sizes))
        for source, apart in copies_apart(segments).items():
            assert apart >= 1 / (2 * weights[source]), (source, apart, seed, epoch)
        orders.add(tuple((s.shard["bin"], s.first, s.tokens) for s in segments))
    assert len(orders) == 5  # another order for every (seed, epoch)


def test_sample_weights_no_longer_repeat_back_to_back():
    manifest, shards = manifest_of(CASES["sample 2:1"])
    for epoch in range(10):
        segments = epoch_segments(manifest, shards, "train", 0, epoch)
        pairs = zip(segments, segments[1:], strict=False)
        assert not any((a.shard["bin"], a.first) == (b.shard["bin"], b.first) for a, b in pairs)


def test_pieces_shrink_for_a_small_epoch_only():
    manifest, shards = manifest_of(CASES["big shards"])
    assert piece_tokens(shards, {"a": 2.0, "b": 1.0}) == 1 << 22
    manifest, shards = manifest_of(CASES["sample 2:1"])
    epoch = 2 * (304_437 + 281_336) + 274_035 + 336_622
    assert piece_tokens(shards, {"docs": 2.0, "web": 1.0}) == epoch // (2 * 2 * 2)


def test_unweighted_and_valid_are_whole_shards_in_shard_order():
    manifest, shards = manifest_of({"a": (1.0, [10, 20]), "b": (1.0, [30])})
    segments = epoch_segments(manifest, shards, "train", 0, 0)
    assert sorted(s.tokens for s in segments) == [10, 20, 30]
    assert all(s.first == 0 for s in segments)
    manifest, shards = manifest_of({"a": (2.0, [10, 20])})
    assert len(epoch_segments(manifest, shards, "valid", 0, 0)) == 2

"""Print which stretch of which shard each part of an epoch's token stream comes from.

    python -m pipeline.stream.layout URI [--epoch 0 --epochs 1] [--seed 0] [--split train]

One line per segment, in stream order: stream offset, source, shard, first token, tokens; then,
per source, the closest two copies of a stretch come (as a fraction of the epoch; a source of
weight w keeps them at least 1/(2w) apart, mixture.py).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from pipeline.stream.reader import StreamReader


def closest_copies(layout: list[tuple]) -> dict[str | None, float]:
    epoch = sum(n for *_, n in layout) or 1
    starts: dict[tuple, list] = defaultdict(list)
    at = 0
    for source, bin_name, first, n in layout:
        starts[(bin_name, first)].append((at, source))
        at += n
    closest: dict[str | None, float] = {}
    for places in starts.values():
        for (a, source), (b, _) in zip(places, places[1:], strict=False):
            closest[source] = min(closest.get(source, 1.0), (b - a) / epoch)
    return closest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pipeline.stream.layout", description=__doc__)
    parser.add_argument("uri")
    parser.add_argument("--epoch", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="train")
    args = parser.parse_args(argv)
    reader = StreamReader(args.uri, 1, seed=args.seed, split=args.split)
    weights = {n: e.get("weight", 1.0) for n, e in (reader.manifest.get("sources") or {}).items()}
    for epoch in range(args.epoch, args.epoch + args.epochs):
        reader.set_epoch(epoch)
        layout = reader.epoch_layout()
        print(f"epoch {epoch} (seed {args.seed}): {len(layout)} segments, layout {reader.layout}")
        at = 0
        for source, bin_name, first, n in layout:
            print(f"  {at:>10,}  {source or '-':<8} {bin_name:<24} {first:>9,} +{n:>9,}")
            at += n
        for source, apart in sorted(closest_copies(layout).items()):
            need = 1 / (2 * weights.get(source, 1.0))
            print(f"  closest copies of {source}: {apart:.3f} of the epoch (>= {need:.3f} needed)")


if __name__ == "__main__":
    main()

"""Global seeded shuffle and packing into shards (pure core).

Every kept document has a shuffle key xxh3-64(doc_id, seed); the dataset is all documents
sorted by (key, doc_id, source, row), and S = ceil(token bytes / shard_bytes) shards cut the
64-bit key space into S equal ranges. The units' token files reach the shards through the
two-pass exchange (exchange/: `PackPlan` is its cut with the shards as parts), or in one pass
while the units are few (`one_pass`).

Contract: the order and every shard's bytes depend only on the documents and the seed, never on
how many workers ran, which unit a document came from, or which path (one pass, two passes, any
cut) carried it; no document is split; every request count is linear in the tokens up to the
pass-1 task cap (`pack.exchange_task_bytes`). The token file, the exchange object and the shard
records, and the request arithmetic: docs/formats.md, "Pack: token files, the exchange, shards".
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from itertools import accumulate

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.exchange.plan import ExchangePlan, capped_cut
from pipeline.tokens import framed

TOKEN_INDEX_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("row", pa.int64()),
        ("key", pa.uint64()),
        ("length", pa.int64()),
    ]
)
SORT_KEYS = [
    ("key", "ascending"),
    ("doc_id", "ascending"),
    ("source", "ascending"),
    ("row", "ascending"),
]
# a token file's rows: its split's block, then the shuffle order within it
FILE_SORT_KEYS = [("valid", "ascending"), *SORT_KEYS]
TOKEN_FILE_INDEX_SCHEMA = TOKEN_INDEX_SCHEMA.append(pa.field("valid", pa.bool_()))
_KEY_SPACE = 2**64
# bytes of one document's row in a token index (.parquet), an upper estimate: id, source, row,
# key, length, compressed (a make_corpus corpus in 1 MiB units: 39.8, file overheads included)
INDEX_ROW_BYTES = 48


def shard_count(total_token_bytes: int, shard_bytes: int) -> int:
    return max(1, math.ceil(total_token_bytes / shard_bytes))


def key_range(shard: int, shards: int) -> tuple[int, int]:
    """Half-open key range [lo, hi) of one shard (hi may be 2**64)."""
    width = -(-_KEY_SPACE // shards)
    return shard * width, min((shard + 1) * width, _KEY_SPACE)


def split_block(index: pa.Table, split: str) -> pa.Table:
    """The rows of a token file's index (in file order) that belong to `split` ("train",
    "valid"; "" for every row): one block, since the file holds each split in one piece."""
    if not split:
        return index
    n_train = index.num_rows - int(pc.sum(index["valid"]).as_py() or 0)
    return index.slice(0, n_train) if split == "train" else index.slice(n_train)


def rows_in_range(sorted_keys: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Index range [i0, i1) of keys in [lo, hi) within an ascending uint64 array."""
    i0 = int(np.searchsorted(sorted_keys, np.uint64(lo), side="left"))
    i1 = (
        len(sorted_keys)
        if hi >= _KEY_SPACE
        else int(np.searchsorted(sorted_keys, np.uint64(hi), side="left"))
    )
    return i0, i1


def gather_segments(tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate tokens[starts[i] : starts[i] + lengths[i]] for all i, vectorised."""
    return gather_pieces([tokens], starts, lengths)


def gather_pieces(
    pieces: list[np.ndarray], starts: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """gather_segments over the concatenation of `pieces` (`starts` index into it), without
    making that concatenation: each run is copied from the pieces it lies in."""
    if len(lengths) == 0:
        return pieces[0][:0] if pieces else np.empty(0, np.uint8)
    # Documents that follow each other are copied as one run: a shard built from one unit is a
    # single slice, and the merge of many units costs one slice per run, not per token.
    breaks = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
    run_first = np.concatenate([[0], breaks])
    run_last = np.concatenate([breaks, [len(lengths)]]) - 1
    run_starts = starts[run_first]
    run_ends = starts[run_last] + lengths[run_last]
    bounds = np.fromiter(accumulate((len(p) for p in pieces), initial=0), np.int64)
    piece = np.minimum(np.searchsorted(bounds, run_starts, side="right"), len(pieces)) - 1
    base = bounds[piece]
    runs = [
        pieces[p][a:b]
        for p, a, b in zip(
            piece.tolist(), (run_starts - base).tolist(), (run_ends - base).tolist(), strict=True
        )
    ]
    for r in np.flatnonzero(run_ends > bounds[piece + 1]).tolist():  # goes on into the next
        p, a, b = int(piece[r]), int(run_starts[r]), int(run_ends[r])
        parts = []
        while a < b:
            end = min(b, int(bounds[p + 1]))
            parts.append(pieces[p][a - bounds[p] : end - bounds[p]])
            a, p = end, p + 1
        runs[r] = np.concatenate(parts)
    return np.concatenate(runs)


@dataclass(frozen=True)
class PackPlan(ExchangePlan):
    """How pack cuts its exchange: S shards (the plan's parts) in K buckets, M units in G
    groups (see above).

    One pack writes one set of shards named `<prefix>-00000.bin/.idx`, ... A run packs once per
    (source, split): the units given are one source's (a unit never mixes sources), and with a
    `split` ("train" or "valid", tokens/split.py) pass 1 keeps only that split's rows; "" keeps
    every row (no validation split: the pack of a single `input` is the one before sources).

    `excluded` (a takedown, `without`): document ids pass 1 leaves out. Every other document
    keeps its key, so its shard and its place among the others are those of the plan without
    exclusions: the shards are the parent's with the excluded documents cut out."""

    prefix: str = "shard"
    split: str = ""
    valid_fraction: float = 0.0
    excluded: frozenset[str] = field(default=frozenset(), repr=False)
    removal: str = ""  # ids_digest(excluded), names the plan's exchange objects
    one_pass: bool = False  # shard tasks read the token files themselves (see above)

    @property
    def shards(self) -> int:
        return self.parts

    def without(self, ids) -> PackPlan:
        """The same plan leaving out these document ids (and those it already left out)."""
        excluded = self.excluded | frozenset(ids)
        return replace(self, excluded=excluded, removal=ids_digest(excluded))

    def bucket_range(self, bucket: int) -> tuple[int, int]:
        span = self.bucket_parts(bucket)
        return key_range(span.start, self.shards)[0], key_range(span.stop - 1, self.shards)[1]

    @property
    def name(self) -> str:
        # the token sections' format too (tokens/framed.py): the run id does not change with it,
        # and a rerun must never reuse exchange objects of another format
        cut = f"{super().name}-z{framed.FORMAT}"
        if self.removal:
            cut += f"-r{self.removal[:16]}"
        return cut if self.prefix == "shard" and not self.split else f"{self.prefix}-{cut}"

    def shard_name(self, shard: int) -> str:
        return f"{self.prefix}-{shard:05d}"


def ids_digest(ids) -> str:
    """sha256 of a set of document ids: sorted, one a line, each line ending in a newline."""
    return hashlib.sha256("".join(f"{i}\n" for i in sorted(ids)).encode()).hexdigest()


def pack_plan(
    total_token_bytes: int,
    units: int,
    shard_bytes: int,
    request_bytes: int,
    task_bytes: int | None = None,
    docs: int | None = None,
) -> PackPlan:
    """The exchange's cut: every token piece moved is >= request_bytes where sizes allow, and
    no pass-1 task moves more than `task_bytes` (capped_cut). With `docs` (the documents
    packed), `one_pass` where the units are few enough (see above); without, two passes."""
    shards = shard_count(total_token_bytes, shard_bytes)
    unit_bytes = total_token_bytes / max(1, units)
    buckets = max(1, min(shards, int(unit_bytes // request_bytes)))
    groups = max(1, min(max(1, units), int(shard_bytes // request_bytes)))
    buckets, groups = capped_cut(buckets, groups, shards, units, total_token_bytes, task_bytes)
    one_pass = (
        docs is not None
        and units > 0
        and 2 * total_token_bytes >= units * shards * request_bytes
        and shards * docs * INDEX_ROW_BYTES <= 2 * total_token_bytes
    )
    return PackPlan(shards, buckets, groups, one_pass=one_pass)


def shard_sections(plan: PackPlan, exchanged: list) -> dict[int, list[tuple]]:
    """shard -> (exchange object, offset, token bytes, index bytes) of each group, from the
    pass-1 results (run.results.ExchangeResult: bucket, object, sections; their order is kept;
    the merge sorts by key, so it never shows)."""
    sections: dict[int, list[tuple]] = {k: [] for k in range(plan.shards)}
    for r in exchanged:
        span = plan.bucket_parts(r.bucket)
        for shard, (at, n_tok, n_idx) in zip(span, r.sections, strict=True):
            sections[shard].append((r.object, at, n_tok, n_idx))
    return sections

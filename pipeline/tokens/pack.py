"""Global seeded shuffle and packing into shards (pure core).

Order: every kept document has a shuffle key = xxh3-64(doc_id, seed) (text.shuffle_key); the
dataset is all documents sorted by (key, doc_id, source, row). That order depends only on the
documents and the seed, never on how many workers ran or which unit a document came from.

Shards: with T token bytes in all, S = ceil(T / shard_bytes) shards cut the 64-bit key space into
S equal ranges; shard k holds the documents whose key falls in range k. Keys are uniform hashes, so
shards come out close to T / S bytes (<= the target on average) and no document is ever split.

Token file of a unit (tokens/<unit>.bin + tokens/<unit>.parquet), written by the read task while
it holds the unit's documents (run/tokenize_tasks.tokenize_docs): the .bin holds every document's
tokens (EOS appended), before dedup, in file order: the training documents in shuffle order, then
the validation split's in shuffle order (tokens/split.py; with no split every document is
training), stored as zstd frames (tokens/framed.py: a range is read by one GET of the frames that
hold it); the .parquet has one row per document in the same order: doc_id, source, row, key
uint64, length int64 (tokens), valid bool, and the .bin's frame table in its schema metadata.
Each split is one block of the file, so a split's pack reads only its own block (before, the
validation pack read every token file a second time to find its ~1 %). A token file from
before `valid` (layout 4, a takedown of an older version) is read whole, its split decided row
by row (tokens/split.py). Documents the
tokenizer made the EOS/BOS id from (special_token_text) are in neither: they are listed in
tokens/<unit>.quarantine.parquet (ingest/records.py schema), written before the .parquet index.
After dedup, tokens/<unit>-<removed>.parquet (run/tokenize_tasks.select_unit) holds the rows of
the documents dedup kept, same columns plus offset int64 (the document's first token in the .bin):
pack reads a key range of it and one token range of the .bin covering those documents, and cuts
out the removed documents between them (what dedup removes costs their share of that read,
never a rewrite of the token file).

Exchange (two passes, so that no request shrinks as the corpus grows). Reading one range of every
unit for every shard costs M x S requests of T / (M x S) bytes: quadratic in the corpus, with
requests shrinking toward nothing. Instead, the exchange dedup uses too (exchange/: `PackPlan`
is its cut with the shards as parts; pass 1 is exchange/regroup.py):
- the S shards are cut into K buckets of consecutive shards (a bucket is one key range), with
  K = clamp(T / M / request_bytes, 1, S), so a unit's part of a bucket is >= request_bytes;
- the M units are cut into G groups of consecutive units, G = clamp(shard_bytes / request_bytes,
  1, M), so a group's part of a shard is >= request_bytes;
- pass 1, one task per (group, bucket): reads each of its units' index and the unit's bucket range
  of tokens (one GET each; spilled to local disk, so memory holds one piece), and writes one
  exchange object laid out shard by shard (format below);
- pass 2, one task per shard: reads one contiguous section from each of the G exchange objects
  of its bucket, merges by the sort keys and writes the shard.
Requests, M units, S shards (K, G fixed by unit, shard and request sizes, not by T):
  pass 1: 2·M·K GETs (index + token range) + G·K exchange objects (1 + ceil(size / part) PUTs);
  pass 2: G·S GETs + 2·S shard PUTs (+ the verify GETs of each written shard).
Both grow as T at fixed unit and shard sizes; token GETs average T / (M·K) and T / (G·S) bytes
of tokens, >= request_bytes whenever units and shards are at least that big. (T and every size
here are raw token bytes, what the shards hold; the token files and exchange sections store them
compressed, r ~ 0.37-0.55 of that, so a GET moves r·T / (M·K) bytes plus, for a token file's
range, the compressed frames it reads past its ends: one frame on average, tokens/framed.py.)
Local disk per pass-1 task: T / (G·K) (spilled raw), capped at `pack.exchange_task_bytes`
(64 GiB; at production sizes K and G stop growing near 16 x 12, so the cap is reached past ~13 TB
of tokens): past it K and G grow together (exchange/plan.capped_cut) and requests grow as
sqrt(M·S·T / task_bytes) instead of linearly, so that no task's disk and time grow without
bound. Shard bytes are the same as a one-pass pack (the
merge sorts by the same keys), whatever the cut.

One pass where the units are few: reading one range of every unit for every shard is only
quadratic when both grow with the corpus. While each unit's part of a shard, T / (M·S), is at
least request_bytes / 2 (as large as pass 2's own pieces T / (G·S) get: a shard is more than half
full), the plan says `one_pass`: each shard task reads, per unit, its index and the shard's token
range straight from the token file (2·M·S GETs <= 4·T / request_bytes, still linear in T; no
exchange object), so the tokens cross storage once on their way to the shards instead of three
times. Reading a unit's index once per shard must not cost more than the copy it saves: one_pass
also needs S x (index bytes, estimated at INDEX_ROW_BYTES a document) <= 2·T. Up to about
2·shard_bytes / request_bytes units (32 at the defaults: ~2 GB of input in 64 MiB units) the
pack runs in one pass; at production sizes the two passes run. The shards are the same bytes
either way.

Exchange object (runs/<run>/pack/<plan>/g<group>-k<bucket>.bin, + .json written last; <plan> names
the cut and the sections' format, PackPlan.name): for each shard of the bucket in order, a section
of two fields = the tokens of the group's documents in that shard (unit by unit, each in shuffle
order; one zstd frame, tokens/framed.py, none when empty) followed by an Arrow IPC stream of their
index rows (the token index schema, same order; a stream even with no rows). The .json lists each
section as [offset, token_bytes, index_bytes] (run/pack_tasks.TOKEN_SECTIONS), token_bytes as
stored (compressed).

Pass 2 also records each shard's documents (runs/<run>/pack/docs/<shard>.parquet: doc_id,
source, row, length, in shard order), the record of which split and source a document went to.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace

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
    if len(lengths) == 0:
        return tokens[:0]
    # Documents that follow each other in `tokens` are copied as one run: a shard built from one
    # unit is a single slice, and the merge of many units costs one slice per run, not per token.
    breaks = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
    run_first = np.concatenate([[0], breaks])
    run_last = np.concatenate([breaks, [len(lengths)]]) - 1
    run_starts = starts[run_first]
    run_ends = starts[run_last] + lengths[run_last]
    return np.concatenate([tokens[a:b] for a, b in zip(run_starts, run_ends, strict=True)])


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

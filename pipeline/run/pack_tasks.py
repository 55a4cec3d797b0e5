"""Pack tasks: the two passes of tokens/pack.py (exchange objects, then shards).

Like every task module (run/read_tasks.py): picklable descriptions in, a small typed
result out; an exchange object's done marker and a shard's verified write are what a rerun reuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import accumulate

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.exchange.regroup import Codec, Section, grouped
from pipeline.exchange.sections import concat, decode, encode
from pipeline.formats.megatron import ShardWriter
from pipeline.formats.verify import WrittenBoundaries, check_written
from pipeline.run.results import ExchangeResult, PackResult
from pipeline.run.timer import TaskTimer
from pipeline.tokens import framed, pack
from pipeline.tokens.split import split_mask


def exchange_bucket(
    layout: RunLayout,
    plan: pack.PackPlan,
    group: int,
    bucket: int,
    units: list[tuple[str, str]],
    dtype_name: str,
) -> ExchangeResult:
    """Pass 1 of pack (exchange/regroup.py): the bucket's key range of each unit of the group,
    laid out by shard (tokens/pack.py). Each unit costs one index GET and one token-range GET;
    its piece is cut by shard here, the rest is the exchange's."""
    itemsize = np.dtype(dtype_name).itemsize
    lo, hi = plan.bucket_range(bucket)
    span = plan.bucket_parts(bucket)
    shard_lows = np.array([pack.key_range(k, plan.shards)[0] for k in span], dtype=np.uint64)
    pieces = (
        _unit_piece(layout, unit, removed, lo, hi, shard_lows, itemsize, plan)
        for unit, removed in units
    )
    folder = layout.pack_exchange(plan.name)
    return grouped(folder, plan, group, bucket, TOKEN_SECTIONS, pieces)


def _merged_index(chunks: Iterator[bytes]) -> list[bytes]:
    """A shard's index rows of every unit of the group, as one IPC stream even with no rows."""
    schema = pack.TOKEN_INDEX_SCHEMA
    return [encode(concat([decode(c) for c in chunks], schema), schema)]


def _sections(sizes: list[list[int]]) -> dict:
    """The marker's [offset, token bytes, index bytes] of each shard's section."""
    starts = accumulate((tokens + index for tokens, index in sizes), initial=0)
    return {"sections": [[at, *s] for at, s in zip(starts, sizes, strict=False)]}


# pack's exchange object (tokens/pack.py): per shard the tokens (one zstd frame:
# tokens/framed.py), then their index rows
TOKEN_SECTIONS = Codec((framed.compress_section, _merged_index), _sections, ExchangeResult)


def _unit_piece(
    layout, unit, removed, lo, hi, shard_lows, itemsize, plan: pack.PackPlan
) -> list[Section]:
    """One unit's rows in [lo, hi) cut by shard: per shard its token bytes and index rows, or
    None; no sections when it has no rows there."""
    rows = _unit_rows(layout, unit, removed, lo, hi, itemsize, plan)
    if rows is None:
        return []
    raw, piece = rows
    cuts = np.searchsorted(piece["key"].to_numpy(), shard_lows, side="left")
    cuts = np.append(cuts, piece.num_rows)
    rel = np.concatenate([[0], np.cumsum(piece["length"].to_numpy())]) * itemsize
    view, out = memoryview(raw), []
    for j in range(len(shard_lows)):
        j0, j1 = int(cuts[j]), int(cuts[j + 1])
        if j0 == j1:
            out.append(None)
            continue
        index_rows = encode(piece.slice(j0, j1 - j0), pack.TOKEN_INDEX_SCHEMA)
        out.append((view[int(rel[j0]) : int(rel[j1])], index_rows))
    return out


def _unit_rows(
    layout, unit, removed, lo, hi, itemsize, plan: pack.PackPlan
) -> tuple[bytes | memoryview | np.ndarray, pa.Table] | None:
    """One unit's kept documents with keys in [lo, hi): their token bytes and index rows (one
    index GET, one GET of the token file's frames that hold a range over them:
    tokens/framed.py; the documents dedup removed between them are cut out here), or None when
    it has none there. When the plan names a split, only that split's rows (tokens/split.py);
    never its excluded documents (a takedown)."""
    index = layout.tokens_index(unit, removed).read_parquet()
    blocked = "valid" in index.column_names  # each split one block (tokens/pack.py)
    rows = pack.split_block(index, plan.split) if blocked else index
    i0, i1 = pack.rows_in_range(rows["key"].to_numpy(), lo, hi)
    if i0 == i1:
        return None
    piece = rows.slice(i0, i1 - i0)
    at, lengths = piece["offset"].to_numpy(), piece["length"].to_numpy()
    first, end = int(at[0]), int(at[-1] + lengths[-1])
    raw = framed.read_range(
        layout.tokens_bin(unit), framed.table_of(index), first * itemsize, end * itemsize
    )
    piece = piece.drop_columns(["offset", "valid"] if blocked else ["offset"])
    keep = np.ones(piece.num_rows, dtype=bool)
    if plan.split and not blocked:  # a token file from before the blocks: row by row
        keep &= split_mask(piece["doc_id"], plan.split, plan.valid_fraction)
    if plan.excluded:  # a takedown (PackPlan.without)
        value_set = pa.array(sorted(plan.excluded), pa.string())
        keep &= ~pc.is_in(piece["doc_id"], value_set=value_set).to_numpy(zero_copy_only=False)
    if keep.all() and end - first == int(lengths.sum()):  # no gap: the range is the pieces
        return raw, piece
    raw = pack.gather_segments(  # uint8: its buffer is the bytes
        np.frombuffer(raw, np.uint8), (at[keep] - first) * itemsize, lengths[keep] * itemsize
    )
    piece = piece.filter(pa.array(keep))
    return (raw, piece) if piece.num_rows else None


def pack_shard(
    layout: RunLayout,
    version: Location,
    plan: pack.PackPlan,
    shard: int,
    sections: list[tuple[str, int, int, int]],
    tokenizer: dict,
) -> PackResult:
    """Pass 2 of pack: write shard `shard` from its section of each group's exchange object
    ((object name, offset, token bytes, index bytes) per group): one GET per group. `tokenizer`
    is the manifest's entry (dtype, EOS, BOS): before the task returns, the shard passes what
    `verify` checks, on the bytes as they are written, not read back (formats/verify:
    WrittenBoundaries, check_written); VerifyError otherwise."""
    timer = TaskTimer()
    dtype = np.dtype(tokenizer["dtype"])
    parts = _Parts(dtype)
    for name, at, token_bytes, index_bytes in sections:
        if token_bytes == 0:
            continue
        loc = layout.pack_exchange(plan.name) / name
        raw = loc.read_bytes(at, at + token_bytes + index_bytes)
        index = decode(raw[token_bytes:])
        size = int(pc.sum(index["length"]).as_py() or 0) * dtype.itemsize
        parts.add(framed.decompress_section(memoryview(raw)[:token_bytes], size), index)
    return _write_shard(layout, version, plan, shard, parts, tokenizer, timer)


def pack_shard_direct(
    layout: RunLayout,
    version: Location,
    plan: pack.PackPlan,
    shard: int,
    units: list[tuple[str, str]],
    tokenizer: dict,
) -> PackResult:
    """A one-pass pack's shard (plan.one_pass, tokens/pack.py): the shard's key range of every
    unit ((unit, removals digest) each) read from its token file, one index GET and one
    token-range GET a unit; then written and checked as pack_shard writes it."""
    timer = TaskTimer()
    dtype = np.dtype(tokenizer["dtype"])
    lo, hi = pack.key_range(shard, plan.shards)
    parts = _Parts(dtype)
    for unit, removed in units:
        rows = _unit_rows(layout, unit, removed, lo, hi, dtype.itemsize, plan)
        if rows is not None:
            parts.add(*rows)
    return _write_shard(layout, version, plan, shard, parts, tokenizer, timer)


class _Parts:
    """A shard's pieces as they are read: their tokens, and their index rows with each
    document's start in the pieces' concatenation."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype, self.tokens, self.index, self.offset = dtype, [], [], 0

    def add(self, raw, index: pa.Table) -> None:
        tokens = np.frombuffer(raw, dtype=self.dtype)
        starts = np.concatenate([[0], np.cumsum(index["length"].to_numpy())[:-1]]) + self.offset
        self.tokens.append(tokens)
        self.index.append(index.append_column("start", pa.array(starts, pa.int64())))
        self.offset += len(tokens)


def _write_shard(
    layout: RunLayout,
    version: Location,
    plan: pack.PackPlan,
    shard: int,
    parts: _Parts,
    tokenizer: dict,
    timer: TaskTimer,
) -> PackResult:
    """The shard from its pieces, merged by the sort keys, checked as it is written."""
    dtype, index_parts, token_parts = parts.dtype, parts.index, parts.tokens
    name = plan.shard_name(shard)
    bin_loc, idx_loc = version / f"{name}.bin", version / f"{name}.idx"
    merged = pack.TOKEN_INDEX_SCHEMA.empty_table()
    where = f"{version.uri}: shard {name}"
    boundaries = WrittenBoundaries(bin_loc.name, tokenizer, where)
    with bin_loc.atomic_writer() as bin_f, idx_loc.atomic_writer() as idx_f:
        writer = ShardWriter(bin_f, idx_f, dtype)
        if index_parts:
            merged = pa.concat_tables(index_parts).sort_by(pack.SORT_KEYS)
            lengths = merged["length"].to_numpy()
            starts = merged["start"].to_numpy()
            for i in range(0, len(lengths), 4096):  # bounded gather buffers
                sl = slice(i, i + 4096)
                batch = pack.gather_pieces(token_parts, starts[sl], lengths[sl])
                boundaries.add(batch, lengths[sl])  # before a byte of it is written
                writer.add(batch, lengths[sl])
        info = writer.close()
    # which documents the shard holds, in its order: the record of each document's split
    layout.shard_docs(name).write_parquet(merged.select(["doc_id", "source", "row", "length"]))
    names = {"bin": bin_loc.name, "idx": idx_loc.name}
    # a shard counts as written only once it passes what `verify` would check, on the bytes
    # written (checksummed as written and, on S3, by the store on the PUT) and the stored sizes
    entry = {**names, **dataclasses.asdict(info)}
    check_written(version, entry, writer.index, tokenizer, where)
    return timer.result(PackResult, shard=shard, info=info, **names)

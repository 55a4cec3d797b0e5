"""Pack tasks: the two passes of tokens/pack.py (exchange objects, then shards).

Like every task module (run/tasks.py): picklable descriptions in, a small typed result out; an
exchange object's done marker and a shard's verified write are what a rerun reuses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.formats.megatron import ShardWriter
from pipeline.formats.verify import WrittenBoundaries, check_written
from pipeline.run.results import ExchangeResult, PackResult
from pipeline.run.tasks import concat
from pipeline.run.timer import TaskTimer
from pipeline.tokens import pack
from pipeline.tokens.split import split_mask


def exchange_bucket(
    layout: RunLayout,
    plan: pack.PackPlan,
    group: int,
    bucket: int,
    units: list[tuple[str, str]],
    dtype_name: str,
) -> ExchangeResult:
    """Pass 1 of pack: the bucket's key range of each unit of the group, laid out by shard.

    Each unit costs one index GET and one token-range GET. Its piece waits in a local temporary
    file already cut by shard (tokens and index rows), so memory holds one unit's index and the
    piece offsets, not the group's rows; then the pieces go out shard by shard as one object."""
    timer = TaskTimer()
    folder, name = layout.pack_exchange(plan.name), f"g{group:05d}-k{bucket:05d}"
    done = folder / f"{name}.json"
    if done.exists():  # its marker holds the earlier result's own fields
        return timer.result(ExchangeResult, **json.loads(done.read_bytes()), reused=True)
    itemsize = np.dtype(dtype_name).itemsize
    lo, hi = plan.bucket_range(bucket)
    span = plan.bucket_shards(bucket)
    shard_lows = np.array([pack.key_range(k, plan.shards)[0] for k in span], dtype=np.uint64)
    # per unit with rows in the bucket: (shards in span, 4) = token offset, token bytes, index
    # offset, index bytes of its piece of each shard in the spill file
    placed: list[np.ndarray] = []
    with tempfile.TemporaryFile() as spill:
        for unit, removed in units:
            where = _spill_unit(layout, unit, removed, lo, hi, shard_lows, itemsize, spill, plan)
            if where is not None:
                placed.append(where)
        spill.flush()
        with (folder / f"{name}.bin").atomic_writer() as out:
            sections = _write_sections(out, spill.fileno(), placed, len(span))
    marker = {"group": group, "bucket": bucket, "object": f"{name}.bin", "sections": sections}
    done.write_bytes(json.dumps(marker).encode())  # written last: the exchange object is whole
    return timer.result(ExchangeResult, **marker)


def _spill_unit(
    layout, unit, removed, lo, hi, shard_lows, itemsize, spill, plan: pack.PackPlan
) -> np.ndarray | None:
    """One unit's rows in [lo, hi) into the spill file, cut by shard: (shards, 4) offsets and
    sizes of its token bytes and index rows per shard, or None when it has no rows there.
    When the plan names a split, only that split's rows (tokens/split.py); never its excluded
    documents (a takedown)."""
    index = layout.tokens_index(unit, removed).read_parquet()
    i0, i1 = pack.rows_in_range(index["key"].to_numpy(), lo, hi)
    if i0 == i1:
        return None
    starts = np.concatenate([[0], np.cumsum(index["length"].to_numpy())])
    raw = layout.tokens_bin(unit, removed).read_bytes(
        int(starts[i0]) * itemsize, int(starts[i1]) * itemsize
    )
    piece = index.slice(i0, i1 - i0)
    keep = np.ones(piece.num_rows, dtype=bool)
    if plan.split:
        keep &= split_mask(piece["doc_id"], plan.split, plan.valid_fraction)
    if plan.excluded:  # a takedown (PackPlan.without)
        value_set = pa.array(sorted(plan.excluded), pa.string())
        keep &= ~pc.is_in(piece["doc_id"], value_set=value_set).to_numpy(zero_copy_only=False)
    if not keep.all():
        lengths = piece["length"].to_numpy() * itemsize
        offsets = (starts[i0:i1] - starts[i0]) * itemsize
        raw = pack.gather_segments(
            np.frombuffer(raw, np.uint8), offsets[keep], lengths[keep]
        ).tobytes()
        piece = piece.filter(pa.array(keep))
        if piece.num_rows == 0:
            return None
    rows = np.searchsorted(piece["key"].to_numpy(), shard_lows, side="left")
    rows = np.append(rows, piece.num_rows)
    rel = np.concatenate([[0], np.cumsum(piece["length"].to_numpy())]) * itemsize
    at = spill.tell()
    spill.write(raw)
    where = np.zeros((len(shard_lows), 4), dtype=np.int64)
    for j in range(len(shard_lows)):
        j0, j1 = int(rows[j]), int(rows[j + 1])
        if j0 == j1:
            continue
        ipc = pack.index_to_ipc(piece.slice(j0, j1 - j0))
        where[j] = (at + rel[j0], rel[j1] - rel[j0], spill.tell(), len(ipc))
        spill.write(ipc)
    return where


def _write_sections(out, fd: int, placed: list[np.ndarray], shards: int) -> list[list[int]]:
    """The exchange object: per shard, every unit's token bytes then their index rows as one
    Arrow IPC table; returns each section's [offset, token bytes, index bytes]."""
    sections, offset = [], 0
    for j in range(shards):
        token_bytes, tables = 0, []
        for where in placed:
            tok_at, tok_n, idx_at, idx_n = (int(v) for v in where[j])
            if tok_n == 0:
                continue
            out.write(os.pread(fd, tok_n, tok_at))
            token_bytes += tok_n
            tables.append(pack.index_from_ipc(os.pread(fd, idx_n, idx_at)))
        ipc = pack.index_to_ipc(concat(tables, pack.TOKEN_INDEX_SCHEMA))
        out.write(ipc)
        sections.append([offset, token_bytes, len(ipc)])
        offset += token_bytes + len(ipc)
    return sections


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
    index_parts, token_parts, offset = [], [], 0
    for name, at, token_bytes, index_bytes in sections:
        if token_bytes == 0:
            continue
        loc = layout.pack_exchange(plan.name) / name
        raw = loc.read_bytes(at, at + token_bytes + index_bytes)
        tokens = np.frombuffer(raw, dtype=dtype, count=token_bytes // dtype.itemsize)
        index = pack.index_from_ipc(raw[token_bytes:])
        lengths = index["length"].to_numpy()
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) + offset
        token_parts.append(tokens)
        index_parts.append(index.append_column("start", pa.array(starts, pa.int64())))
        offset += len(tokens)
    name = plan.shard_name(shard)
    bin_loc, idx_loc = version / f"{name}.bin", version / f"{name}.idx"
    merged = pack.TOKEN_INDEX_SCHEMA.empty_table()
    where = f"{version.uri}: shard {name}"
    boundaries = WrittenBoundaries(bin_loc.name, tokenizer, where)
    with bin_loc.atomic_writer() as bin_f, idx_loc.atomic_writer() as idx_f:
        writer = ShardWriter(bin_f, idx_f, dtype)
        if index_parts:
            merged = pa.concat_tables(index_parts).sort_by(pack.SORT_KEYS)
            tokens = np.concatenate(token_parts)
            lengths = merged["length"].to_numpy()
            starts = merged["start"].to_numpy()
            for i in range(0, len(lengths), 4096):  # bounded gather buffers
                sl = slice(i, i + 4096)
                batch = pack.gather_segments(tokens, starts[sl], lengths[sl])
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

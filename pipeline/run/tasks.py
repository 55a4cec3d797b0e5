"""The work of each Ray task: read storage, call a pure core, write storage, return a small result.

Every function here takes only picklable descriptions (Locations, configs, unit ids) and returns
a small typed result (run/results.py), never document text: the driver sees counts. Each
unit-level output is committed atomically and then marked done, so a rerun skips finished
units (resume).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from pipeline.config import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.core.text import shuffle_key
from pipeline.dedup import exact
from pipeline.formats import sectioned
from pipeline.formats.megatron import ShardWriter
from pipeline.formats.verify import verify_shard
from pipeline.ingest.listing import cut_units, inside, list_inputs, skipped_once, with_origin
from pipeline.ingest.readers import (
    DOCS_SCHEMA,
    QUARANTINE_SCHEMA,
    ObjectChanged,
    changed_quarantine,
    read_piece,
)
from pipeline.run.results import (
    AuditResult,
    ExactResult,
    ExchangeResult,
    ListResult,
    MergeExactResult,
    PackResult,
    ProbeResult,
    QuarantineResult,
    ReadResult,
    TokenizeResult,
)
from pipeline.run.timer import TaskTimer
from pipeline.tokens import pack
from pipeline.tokens.check import (
    EngineMismatch,
    SampleCheck,
    compare_engines,
    hard_strings,
    sample_rows,
)
from pipeline.tokens.encode import (
    Batch,
    EngineUnavailable,
    cached_encoder,
    token_id,
    tokenize_batches,
    tokenizer_info,
)
from pipeline.tokens.split import split_mask

DOCS_PARQUET = {"compression": "zstd", "row_group_size": 16384}


# -- ingest ----------------------------------------------------------------------------------
def list_stage(input_root: Location, cfg: Config) -> ListResult:
    """The listing and its work units (metadata only: they are small tables), source by source.

    Each source is listed under its own root with its own include/exclude and cut into units of
    its own, so a unit never mixes sources: every table gets an `origin` column (the source's
    name; ingest/listing.py). `input_root` is the first source's (kept for callers)."""
    timer = TaskTimer()
    inputs, units, skipped, roots = [], [], [], []
    for src in cfg.sources:
        root = Location.from_uri(src.uri, cfg.storage)
        roots.append(root.uri)
        own = inside(root, Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name)
        listed, passed = list_inputs(root, src.include, src.exclude, own)
        cut = cut_units(listed, int(cfg.ingest.unit_bytes))
        if cfg.named_sources:  # two sources may hold the same relative paths: ids differ
            cut = cut.set_column(0, "unit_id", _salted(cut["unit_id"], src.name))
        inputs.append(with_origin(listed, src.name, root.uri))
        units.append(with_origin(cut, src.name))
        skipped.append(with_origin(passed, src.name))
    inputs_t, units_t = pa.concat_tables(inputs), pa.concat_tables(units)
    return timer.result(
        ListResult,
        inputs=inputs_t,
        units=units_t,
        files=inputs_t.num_rows,
        skipped=skipped_once(roots, inputs, skipped),
        listed_bytes=int(pc.sum(inputs_t["size"]).as_py() or 0),
        unit_count=len(set(units_t["unit_id"].to_pylist())),
    )


def _salted(unit_ids: pa.ChunkedArray, name: str) -> pa.Array:
    ids = [xxhash.xxh3_64_hexdigest(f"{name}\x00{u}".encode()) for u in unit_ids.to_pylist()]
    return pa.array(ids, pa.string())


def read_unit(
    layout: RunLayout, input_root: Location, unit_id: str, pieces: list[dict], cfg: Config
) -> ReadResult:
    timer = TaskTimer()
    done = layout.read_done(unit_id)
    if done.exists():  # its marker is the earlier result (ReadResult.marker)
        earlier = ReadResult.from_dict(json.loads(done.read_bytes()))
        return timer.result(ReadResult, **earlier.own_fields(), reused=True)
    origin = pieces[0].get("origin") if pieces else None
    rank, src = cfg.source_rank(origin)
    docs, bad = _read_pieces(input_root, pieces, cfg, src)
    if cfg.named_sources:  # ids unique across sources: "<source name>/<id>"
        prefixed = pc.binary_join_element_wise(f"{src.name}/", docs["doc_id"], "")
        docs = docs.set_column(0, "doc_id", prefixed)
    layout.read_docs(unit_id).write_parquet(docs, **DOCS_PARQUET)
    layout.read_quarantine(unit_id).write_parquet(bad)
    if cfg.dedup.near.enabled:  # signed while the documents are in memory: never read again
        from pipeline.run import neardup  # neardup imports this module

        sigs = neardup.signature_rows(docs, unit_id, cfg, src.name, rank)
        layout.read_sigs(unit_id, neardup.signature_key(cfg)).write_parquet(sigs)
    hashes, n = exact.hash_rows(docs, unit_id, src.name, rank), cfg.dedup.partitions
    hash_parts = exact.hash_partition(hashes.column("hash").combine_chunks(), n)
    # one object, sectioned by hash partition: 1 PUT, not one per partition (formats/sectioned.py)
    hash_size = sectioned.write_sectioned(layout.exact_hashes(unit_id), hashes, hash_parts, n)
    text_bytes = int(pc.sum(pc.binary_length(docs["text"])).as_py() or 0)
    quarantined: Counter = Counter()
    for reason, records in zip(bad["reason"].to_pylist(), bad["records"].to_pylist(), strict=True):
        quarantined[reason] += records  # a file rejected whole counts its records (readers.py)
    result = timer.result(
        ReadResult,
        unit=unit_id,
        origin=src.name,
        docs_in=docs.num_rows + sum(quarantined.values()),
        docs=docs.num_rows,
        text_bytes=text_bytes,
        hash_size=hash_size,
        quarantined=dict(quarantined),
        quarantined_bytes=int(pc.sum(bad["bytes"]).as_py() or 0),
    )
    done.write_bytes(json.dumps(result.marker()).encode())
    return result


def _read_pieces(
    input_root: Location, pieces: list[dict], cfg: Config, src
) -> tuple[pa.Table, pa.Table]:
    """A unit's documents and quarantine rows; a piece whose object changed since the listing
    keeps none of its documents and is quarantined whole."""
    doc_parts, bad_parts = [], []
    for piece in pieces:
        piece_docs, piece_bad = [], []
        try:
            for docs, bad in read_piece(
                input_root,
                piece,
                src.text_field,
                src.id_field,
                max_doc_bytes=int(cfg.ingest.max_doc_bytes),
            ):
                piece_docs.append(docs)
                piece_bad.append(bad)
        except ObjectChanged as changed:  # not the object listed: nothing of it is kept
            piece_docs = []
            piece_bad = [changed_quarantine(changed, piece["end"] - piece["start"])]
        doc_parts += piece_docs
        bad_parts += piece_bad
    return _concat(doc_parts, DOCS_SCHEMA), _concat(bad_parts, QUARANTINE_SCHEMA)


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="default")


# -- exact dedup -----------------------------------------------------------------------------
def exact_partition(
    layout: RunLayout,
    part: int,
    ranges: list[sectioned.Range],
    bounds: list[str],
    enabled: bool = True,
) -> ExactResult:
    """Exact dedup of one hash partition, its rows read as one range per writer group (the
    exchange: formats/sectioned.py); its removals go out sectioned by unit bucket (`bounds`)."""
    timer = TaskTimer()
    rows = sectioned.read_part(ranges if enabled else [], exact.HASH_SCHEMA)
    removed = exact.exact_removals(rows)
    buckets = sectioned.unit_bucket(bounds, removed.column("unit_id"))
    size = sectioned.write_sectioned(layout.exact_removed(part), removed, buckets, len(bounds))
    return timer.result(
        ExactResult, part=part, rows=rows.num_rows, removed=removed.num_rows, size=size
    )


def merge_exact(layout: RunLayout, by_bucket: list[list[sectioned.Range]]) -> MergeExactResult:
    """All exact removals in one file sorted by unit, so a unit's task reads only its rows.

    Written bucket of units by bucket (`by_bucket`: each bucket's ranges, buckets in unit
    order), so memory holds one bucket's removals, never the corpus's."""
    timer = TaskTimer()
    with _RemovedWriter(layout.exact_removed_all) as out:
        for ranges in by_bucket:
            out.write(sectioned.read_part(ranges, exact.REMOVED_SCHEMA))
    return timer.result(MergeExactResult, removed_exact=out.rules.get("exact", 0))


def merge_quarantine(
    layout: RunLayout, units: list[str], origins: dict[str, str] | None = None
) -> QuarantineResult:
    """Every unit's bad records in one listing, sorted by source and row. With `origins` (unit
    id -> source name; named sources) every row also has `origin`, the source it came from,
    and rows sort by origin first (two sources may hold the same relative path). A listing
    without the column (a single `input:`, or a run from before) is the one source's."""
    timer = TaskTimer()
    parts = [layout.read_quarantine(u).read_parquet() for u in units]
    schema, order = QUARANTINE_SCHEMA, [("source", "ascending"), ("row", "ascending")]
    if origins is not None:
        parts = [
            with_origin(t.drop_columns(["origin"]) if "origin" in t.column_names else t, origins[u])
            for u, t in zip(units, parts, strict=True)
        ]
        schema = QUARANTINE_SCHEMA.append(pa.field("origin", pa.string()))
        order = [("origin", "ascending"), *order]
    bad = _concat(parts, schema)
    layout.quarantine.write_parquet(bad.sort_by(order))
    return timer.result(QuarantineResult, quarantined=bad.num_rows)


def merge_audit(
    layout: RunLayout,
    exact_by_bucket: list[list[sectioned.Range]],
    near_by_bucket: list[list[sectioned.Range]] | None = None,
) -> AuditResult:
    """removed.parquet: every removal, exact and near, sorted by unit: the run's audit. Written
    one bucket of units at a time (buckets in unit order), as merge_exact."""
    timer = TaskTimer()
    near_by_bucket = near_by_bucket or [[] for _ in exact_by_bucket]
    with _RemovedWriter(layout.removed) as out:
        for exact_ranges, near_ranges in zip(exact_by_bucket, near_by_bucket, strict=True):
            out.write(sectioned.read_part(exact_ranges + near_ranges, exact.REMOVED_SCHEMA))
    return timer.result(
        AuditResult,
        removed_exact=out.rules.get("exact", 0),
        removed_near=out.rules.get("near", 0),
        by_origin=out.by_origin,
    )


class _RemovedWriter:
    """A removal listing written batch by batch, each batch sorted by unit (batches arrive in
    unit order, so the file is sorted by unit) with row groups of at most 65,536 rows. Counts
    removals per rule, and per source (`by_origin`: per rule, and those whose kept copy sits in
    another source)."""

    def __init__(self, loc: Location) -> None:
        self.loc, self.rules = loc, Counter()
        self.by_origin: dict[str, dict] = {}

    def __enter__(self) -> _RemovedWriter:
        self._file = self.loc.atomic_writer()
        self._writer = pq.ParquetWriter(self._file.__enter__(), exact.REMOVED_SCHEMA)
        return self

    def write(self, removed: pa.Table) -> None:
        if removed.num_rows:
            self.rules.update(removed["rule"].to_pylist())
            self._count_origins(removed)
            batch = removed.cast(exact.REMOVED_SCHEMA).sort_by(_BY_UNIT)
            self._writer.write_table(batch, row_group_size=65536)

    def _count_origins(self, removed: pa.Table) -> None:
        for origin, rule, kept in zip(
            removed["origin"].to_pylist(),
            removed["rule"].to_pylist(),
            removed["kept_origin"].to_pylist(),
            strict=True,
        ):
            entry = self.by_origin.setdefault(origin, {"exact": 0, "near": 0, "in_favour_of": {}})
            entry[rule] += 1
            if kept != origin:
                entry["in_favour_of"][kept] = entry["in_favour_of"].get(kept, 0) + 1

    def __exit__(self, *exc) -> None:
        self._writer.close()
        self._file.__exit__(*exc)


_BY_UNIT = [("unit_id", "ascending"), ("source", "ascending"), ("row", "ascending")]


# -- tokenize --------------------------------------------------------------------------------
PROBE_UNITS = 8  # the probe reads the first documents of this many units ...
PROBE_BYTES_PER_UNIT = 128 * 1024  # ... up to this much text from each: 1 MiB at most


def tokenize_probe(
    layout: RunLayout, unit_ids: list[str], cfg: Config, tokenizer_json: bytes
) -> ProbeResult:
    """Choose the engine for the run: fastokens if it loads here and gives tokenizers' ids on
    the hard strings and the first documents of several units, else tokenizers with the reason.
    `tokenize.engine: fastokens` that cannot load is an error (`error` in the result)."""
    timer = TaskTimer()
    special_as_text = cfg.tokenize.special_tokens_in_text == "text"
    try:
        fast = cached_encoder("fastokens", tokenizer_json, special_as_text)
    except EngineUnavailable as e:
        if cfg.tokenize.engine == "fastokens":
            return timer.result(ProbeResult, error=f"tokenize.engine is fastokens but {e}")
        return timer.result(ProbeResult, engine="tokenizers", reason=str(e), probe_docs=0)
    reference = cached_encoder("tokenizers", tokenizer_json, special_as_text)
    specials = [t.content for t in reference.tokenizer.get_added_tokens_decoder().values()]
    named = [(f"probe string {name}", text) for name, text in hard_strings(specials)]
    for unit in unit_ids[:PROBE_UNITS]:
        named += _first_documents(layout, unit, PROBE_BYTES_PER_UNIT)
    names, texts = [n for n, _ in named], [t for _, t in named]
    diff = compare_engines(reference, fast, texts, names)
    if diff is not None:
        return timer.result(
            ProbeResult,
            engine="tokenizers",
            reason=f"equality probe failed: {diff}",
            probe_docs=len(texts),
        )
    return timer.result(ProbeResult, engine="fastokens", reason=None, probe_docs=len(texts))


def _first_documents(layout: RunLayout, unit_id: str, max_bytes: int) -> list[tuple[str, str]]:
    out, size = [], 0
    with layout.read_docs(unit_id).open_read() as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=64, columns=["doc_id", "text"]):
            for doc_id, text in zip(batch["doc_id"].to_pylist(), batch["text"].to_pylist(),
                                    strict=True):
                if size >= max_bytes:
                    return out
                out.append((doc_id, text))
                size += len(text)
    return out


def tokenize_unit_task(
    layout: RunLayout,
    unit_id: str,
    cfg: Config,
    tokenizer_json: bytes,
    engine: str,
    rewrite: bool = False,
) -> TokenizeResult:
    """tokenize_unit for the driver: an engine that disagrees with tokenizers (or cannot run on
    this worker) fails the unit with `mismatch` set instead of an exception, so the driver sees
    every unit's outcome and can rerun the stage with tokenizers. Nothing was committed."""
    try:
        return tokenize_unit(layout, unit_id, cfg, tokenizer_json, engine, rewrite)
    except (EngineMismatch, EngineUnavailable) as e:
        return TokenizeResult(unit=unit_id, mismatch=f"unit {unit_id}: {e}")


def tokenize_unit(
    layout: RunLayout,
    unit_id: str,
    cfg: Config,
    tokenizer_json: bytes,
    engine: str = "tokenizers",
    rewrite: bool = False,
) -> TokenizeResult:
    """Tokenize one unit's kept documents into its token file (tokens/pack.py) with `engine`.

    Unless the engine is tokenizers itself, a sample of the documents (tokenize.verify_fraction)
    is re-encoded with tokenizers before anything is committed: EngineMismatch on a difference.
    `rewrite` ignores a token file already committed (the driver's rerun after a mismatch)."""
    timer = TaskTimer()
    with layout.removed.open_read() as f:
        removed = pq.read_table(f, columns=["source", "row"], filters=[("unit_id", "=", unit_id)])
    removed = removed.sort_by([("source", "ascending"), ("row", "ascending")])
    digest = xxhash.xxh3_64_hexdigest(json.dumps(removed.to_pylist()).encode())
    index_loc = layout.tokens_index(unit_id, digest)
    if not rewrite and index_loc.exists():
        index = index_loc.read_parquet(columns=["length"])
        return timer.result(
            TokenizeResult,
            unit=unit_id,
            removed=digest,
            docs=index.num_rows,
            tokens=int(pc.sum(index["length"]).as_py() or 0),
            reused=True,
        )
    if rewrite and index_loc.exists():
        index_loc.remove()  # the unit stays not-done until the new index lands
    docs = exact.drop_removed(layout.read_docs(unit_id).read_parquet(), removed)
    keys = [shuffle_key(d, cfg.pack.seed) for d in docs["doc_id"].to_pylist()]
    docs = docs.append_column("key", pa.array(keys, pa.uint64())).sort_by(pack.SORT_KEYS)
    length, checked = _encode_tokens(
        docs, layout.tokens_bin(unit_id, digest), cfg, tokenizer_json, engine
    )
    index_loc.write_parquet(_token_index(docs, length))  # last: its presence marks the unit done
    return timer.result(
        TokenizeResult,
        unit=unit_id,
        removed=digest,
        docs=docs.num_rows,
        tokens=int(length.sum()),
        engine=engine,
        checked=checked,
    )


def _encode_tokens(
    docs: pa.Table, out_loc: Location, cfg: Config, tokenizer_json: bytes, engine: str
) -> tuple[np.ndarray, int]:
    """The documents' tokens, in their order, into `out_loc` with `engine`; unless the engine is
    tokenizers, a sample is re-encoded with tokenizers meanwhile, on a thread of its own, and
    compared before the token file is committed (EngineMismatch). Returns the token count of
    each document and how many documents were checked."""
    tok = cfg.tokenize
    special_as_text = tok.special_tokens_in_text == "text"
    reference = cached_encoder("tokenizers", tokenizer_json, special_as_text)
    encoder = cached_encoder(engine, tokenizer_json, special_as_text)
    _, info = tokenizer_info(reference.tokenizer, tokenizer_json, tok.eos)
    bos_id = token_id(reference.tokenizer, tok.bos)
    dtype = np.dtype(info.dtype)
    checked = np.empty(0, np.int64)
    sample = None
    if engine != "tokenizers":  # the reference need not check itself
        checked = sample_rows(docs["key"].to_numpy(), tok.verify_fraction)
    if len(checked):
        rows = pa.array(checked, pa.int64())
        sample = SampleCheck(  # starts re-encoding now, alongside the engine
            reference,
            encoder.name,
            docs["text"].take(rows).to_pylist(),
            docs["doc_id"].take(rows).to_pylist(),
        )
    lengths = []
    texts, step = docs["text"], tok.batch_docs

    def batches():
        at = 0
        for i in range(0, docs.num_rows, step):
            check = []
            while at < len(checked) and checked[at] < i + step:
                check.append((int(checked[at]) - i, at))
                at += 1
            yield Batch(texts.slice(i, step).to_pylist(), check)

    with out_loc.atomic_writer() as out:
        for flat, lens in tokenize_batches(encoder, batches(), info.eos_id, bos_id, dtype, sample):
            out.write(flat.view(np.uint8))  # the array's own buffer: no copy to bytes
            lengths.append(lens)
        if sample is not None:
            sample.finish()  # inside the writer: a mismatch discards the token file
    length = np.concatenate(lengths) if lengths else np.empty(0, np.int64)
    return length, len(checked)


def _token_index(docs: pa.Table, length: np.ndarray) -> pa.Table:
    """The token file's index: each document's ids, shuffle key and token count, in order."""
    return pa.table(
        {
            "doc_id": docs["doc_id"],
            "source": docs["source"],
            "row": docs["row"],
            "key": docs["key"],
            "length": pa.array(length, pa.int64()),
        },
        schema=pack.TOKEN_INDEX_SCHEMA,
    )


# -- pack ------------------------------------------------------------------------------------
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
    folder, name = layout.run / f"pack/{plan.name}", f"g{group:05d}-k{bucket:05d}"
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
    layout, unit, removed, lo, hi, shard_lows, itemsize, spill, plan=None
) -> np.ndarray | None:
    """One unit's rows in [lo, hi) into the spill file, cut by shard: (shards, 4) offsets and
    sizes of its token bytes and index rows per shard, or None when it has no rows there.
    With a plan naming a split, only that split's rows (tokens/split.py)."""
    index = layout.tokens_index(unit, removed).read_parquet()
    i0, i1 = pack.rows_in_range(index["key"].to_numpy(), lo, hi)
    if i0 == i1:
        return None
    starts = np.concatenate([[0], np.cumsum(index["length"].to_numpy())])
    raw = layout.tokens_bin(unit, removed).read_bytes(
        int(starts[i0]) * itemsize, int(starts[i1]) * itemsize
    )
    piece = index.slice(i0, i1 - i0)
    if plan is not None and plan.split:
        keep = split_mask(piece["doc_id"], plan.split, plan.valid_fraction)
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
        ipc = pack.index_to_ipc(_concat(tables, pack.TOKEN_INDEX_SCHEMA))
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
    dtype_name: str,
) -> PackResult:
    """Pass 2 of pack: write shard `shard` from its section of each group's exchange object
    ((object name, offset, token bytes, index bytes) per group): one GET per group."""
    timer = TaskTimer()
    dtype = np.dtype(dtype_name)
    index_parts, token_parts, offset = [], [], 0
    for name, at, token_bytes, index_bytes in sections:
        if token_bytes == 0:
            continue
        loc = layout.run / f"pack/{plan.name}/{name}"
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
    with bin_loc.atomic_writer() as bin_f, idx_loc.atomic_writer() as idx_f:
        writer = ShardWriter(bin_f, idx_f, dtype)
        if index_parts:
            merged = pa.concat_tables(index_parts).sort_by(pack.SORT_KEYS)
            tokens = np.concatenate(token_parts)
            lengths = merged["length"].to_numpy()
            starts = merged["start"].to_numpy()
            for i in range(0, len(lengths), 4096):  # bounded gather buffers
                sl = slice(i, i + 4096)
                writer.add(pack.gather_segments(tokens, starts[sl], lengths[sl]), lengths[sl])
        info = writer.close()
    # which documents the shard holds, in its order: the record of each document's split
    layout.shard_docs(name).write_parquet(merged.select(["doc_id", "source", "row", "length"]))
    names = {"bin": bin_loc.name, "idx": idx_loc.name}
    # a shard counts as written only once storage returns what the manifest will claim
    entry = {**names, **dataclasses.asdict(info)}
    verify_shard(version, entry, dtype, f"{version.uri}: shard {shard}")
    return timer.result(PackResult, shard=shard, info=info, **names)


def pack_in_process(
    layout: RunLayout,
    version: Location,
    units: list[tuple[str, str]],
    token_bytes: int,
    cfg: Config,
    dtype_name: str,
) -> list[PackResult]:
    """Both pack passes one task after the other in this process (benchmarks, no Ray): the same
    plan and sections as the driver (run/driver.py) builds."""
    plan = pack.pack_plan(
        token_bytes, len(units), int(cfg.pack.shard_bytes), int(cfg.pack.exchange_request_bytes)
    )
    groups = plan.unit_groups(units)
    exchanged = [
        exchange_bucket(layout, plan, g, k, groups[g], dtype_name)
        for g in range(plan.groups)
        for k in range(plan.buckets)
    ]
    sections = pack.shard_sections(plan, exchanged)
    return [
        pack_shard(layout, version, plan, k, sections[k], dtype_name) for k in range(plan.shards)
    ]

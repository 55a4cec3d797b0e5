"""The read pass's Ray tasks: the listing cut into work units (list_units), then each unit read
once, its documents curated, tokenized, signed and hashed while in memory (read_unit).

The work of each Ray task: read storage, call a pure core, write storage, return a small result.
Every task function takes only picklable descriptions (Locations, configs, unit ids) and returns
a small typed result (run/results.py), never document text: the driver sees counts. Each
unit-level output is committed atomically and then marked done, so a rerun skips finished
units (resume).
"""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.curate import chain
from pipeline.curate.chain import REMOVED_SCHEMA as REMOVED
from pipeline.curate.chain import Outcome
from pipeline.curate.user import HookError
from pipeline.dedup import exact
from pipeline.exchange import sections
from pipeline.exchange.sections import concat
from pipeline.formats.megatron import TokenIdOutOfRange
from pipeline.ingest.listing import (
    StoreListing,
    cut_units,
    inside,
    list_inputs,
    skipped_once,
    store_listing,
    with_origin,
)
from pipeline.ingest.read_guards import ObjectChanged
from pipeline.ingest.readers import read_piece
from pipeline.ingest.records import QUARANTINE_SCHEMA, changed_quarantine, docs_schema
from pipeline.run.markers import load_marker, write_marker
from pipeline.run.results import ListResult, ReadResult, RunError
from pipeline.run.timer import TaskTimer
from pipeline.run.tokenize_tasks import tokenize_docs
from pipeline.tokens.check import EngineMismatch
from pipeline.tokens.encode import EngineUnavailable

DOCS_PARQUET = {"compression": "zstd", "row_group_size": 16384}


CURATE_BATCH = 4096  # documents a curation step holds its per-document values for at once


def write_docs(loc: Location, docs: pa.Table) -> None:
    """A unit's documents file (core/layout.READ_DOCS): ids, rows and kept fields, no text (the
    read task tokenized it; the document index takes the kept fields from here)."""
    loc.write_parquet(docs.drop_columns(["text"]), **DOCS_PARQUET)


# -- ingest ----------------------------------------------------------------------------------
def list_units(
    input_root: Location, cfg: Config, listing: StoreListing = store_listing
) -> ListResult:
    """The listing and its work units (metadata only: they are small tables), source by source.

    Each source is listed under its own root with its own include/exclude and cut into units of
    its own, so a unit never mixes sources: every table gets an `origin` column (the source's
    name; ingest/listing.py). `input_root` is the first source's (kept for callers); `listing`
    lists an object store's root (ingest/listing.store_listing)."""
    timer = TaskTimer()
    inputs, units, skipped, roots = [], [], [], []
    for src in cfg.sources:
        root = Location.from_uri(src.uri, cfg.storage)
        roots.append(root.uri)
        own = inside(root, Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name)
        listed, passed = list_inputs(root, src.include, src.exclude, own, listing)
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
        unit_count=pc.count_distinct(units_t["unit_id"]).as_py(),
    )


def _salted(unit_ids: pa.ChunkedArray, name: str) -> pa.Array:
    ids = [xxhash.xxh3_64_hexdigest(f"{name}\x00{u}".encode()) for u in unit_ids.to_pylist()]
    return pa.array(ids, pa.string())


def read_unit_task(
    layout: RunLayout,
    input_root: Location,
    unit_id: str,
    pieces: list[dict],
    cfg: Config,
    tokenizer_json: bytes,
    engine: str,
    rewrite: bool = False,
    takedown: list[str] | None = None,
) -> ReadResult:
    """read_unit for the driver: an engine that disagrees with tokenizers (or cannot run on
    this worker, or emits an id outside the tokenizer's range, which tokenizers cannot) fails
    the unit with `mismatch` set instead of an exception, so the driver sees every unit's
    outcome and can rerun the wave with tokenizers; the same failure with tokenizers stops the
    run with that line. No done marker was written."""
    try:
        return read_unit(
            layout, input_root, unit_id, pieces, cfg, tokenizer_json, engine, rewrite, takedown
        )
    except (EngineMismatch, EngineUnavailable, TokenIdOutOfRange) as e:
        return ReadResult(unit=unit_id, docs_in=0, docs=0, text_bytes=0, hash_size=0,
                          quarantined={}, mismatch=f"unit {unit_id}: {e}")  # fmt: skip


def read_unit(
    layout: RunLayout,
    input_root: Location,
    unit_id: str,
    pieces: list[dict],
    cfg: Config,
    tokenizer_json: bytes,
    engine: str = "tokenizers",
    rewrite: bool = False,
    takedown: list[str] | None = None,
) -> ReadResult:
    """Read a unit's pieces once and, while its documents are in memory, curate them (the
    source's chain, curate/chain.py: what a filter removes is never tokenized; a transform's
    text is what the rest sees), tokenize them into the unit's token file
    (tokenize_tasks.tokenize_docs), then sign and hash those the tokenizer did not quarantine
    and the `takedown` list (the dataset's active ids, formats/takedowns.py) does not name.
    Curation's and the takedown list's removals are the unit's read-pass audit rows, which the
    audit merges into removed.parquet (select leaves them out of what pack reads). Nothing
    writes the text back: no later stage reads it. `rewrite`: the driver's rerun with
    tokenizers (every output is made again)."""
    timer = TaskTimer()
    done = layout.read_done(unit_id)
    earlier = None if rewrite else load_marker(done, ReadResult)  # ReadResult.marker
    if earlier is not None and _outputs_present(layout, unit_id, cfg, earlier):
        return timer.result(ReadResult, **earlier.own_fields(), reused=True)
    origin = pieces[0].get("origin") if pieces else None
    rank, src = cfg.source_rank(origin)
    kinds: Counter = Counter()  # web archive records by kind
    reading: Counter = Counter()  # seconds in the web archive reader's parts
    docs, bad = read_pieces(input_root, pieces, cfg, src, kinds, reading)
    curating = time.perf_counter()
    try:
        curated = curate(docs, cfg.chain_of(src), cfg)
    except HookError as e:  # the user's function misbehaved: stop the run, say where
        raise RunError(f"{e} (unit {unit_id} of source {src.name}); nothing was committed"
                       ) from None  # fmt: skip
    curating = time.perf_counter() - curating
    docs = curated.kept
    tokenizing = time.perf_counter()
    tokens = tokenize_docs(layout, unit_id, docs, cfg, tokenizer_json, engine, rewrite)
    tokenizing = time.perf_counter() - tokenizing
    if tokens.quarantine.num_rows:  # never hashed or signed: they can neither win nor lose
        docs = exact.drop_removed(docs, tokens.quarantine)
        bad = concat([bad, tokens.quarantine], QUARANTINE_SCHEMA)
    down = None
    if takedown:  # after the tokenizer's quarantine: a document is counted once
        docs, down = _take_down(docs, takedown)
    removals = _audit_rows(unit_id, src.name, curated.removed, down)
    if removals.num_rows:
        layout.read_removed(unit_id).write_parquet(removals)
    write_docs(layout.read_docs(unit_id), docs)
    layout.read_quarantine(unit_id).write_parquet(bad)
    from pipeline.dedup import text_kernel  # here: importing numba costs ~1 s, only workers pay

    known = text_kernel.normal_form(docs["text"])  # the NFC both dedup rules start from, once
    if cfg.dedup.near.enabled:  # signed while the documents are in memory: never read again
        from pipeline.run import near_signing as near

        # the signatures, and what banding reads instead of them: sectioned by partition
        near.write_unit_files(layout, unit_id, docs, cfg, src.name, rank, known)
    hashes, n = exact.hash_rows(docs, unit_id, src.name, rank, known), cfg.dedup.partitions
    hash_parts = exact.hash_partition(hashes.column("hash").combine_chunks(), n)
    # one object, sectioned by hash partition: 1 PUT, not one per partition (exchange/sections.py)
    hash_size = sections.write_sectioned(layout.exact_hashes(unit_id), hashes, hash_parts, n)
    text_bytes = int(pc.sum(pc.binary_length(docs["text"])).as_py() or 0)
    quarantined: Counter = Counter()
    for reason, records in zip(bad["reason"].to_pylist(), bad["records"].to_pylist(), strict=True):
        quarantined[reason] += records  # a file rejected whole counts its records (records.py)
    result = timer.result(
        ReadResult,
        unit=unit_id,
        origin=src.name,
        docs_in=docs.num_rows + removals.num_rows + sum(quarantined.values()),
        docs=docs.num_rows,
        removed_takedown=0 if down is None else down.num_rows,
        removed_filtered=dict(curated.removed_by_rule),
        curated=dict(curated.changed_by_rule),
        curated_spans=dict(curated.spans),
        text_bytes=text_bytes,
        hash_size=hash_size,
        quarantined=dict(quarantined),
        records=dict(sorted(kinds.items())),
        quarantined_bytes=int(pc.sum(bad["bytes"]).as_py() or 0),
        tokens=tokens.tokens,
        engine=tokens.engine,
        checked=tokens.checked,
        tokenize_seconds=tokenizing,
        curate_seconds=curating,
        reader_seconds=dict(sorted(reading.items())),
    )
    write_marker(done, result.marker())
    result.io = timer.io_delta()  # the marker's own write too: stats.json counts every byte
    return result


def curate(docs: pa.Table, steps: list, cfg: Config) -> Outcome:
    """The source's chain over the unit's documents, a batch at a time (what a batch holds
    never depends on another: the decisions are those of one pass over all)."""
    if not steps:
        return Outcome(kept=docs, removed=REMOVED.empty_table())
    built = chain.build(chain.parse(steps), read=_storage_reader(cfg))
    parts = [chain.apply(built, docs.slice(at, CURATE_BATCH))
             for at in range(0, max(docs.num_rows, 1), CURATE_BATCH)]  # fmt: skip
    return chain.merged(parts, docs.schema)


def _storage_reader(cfg: Config):
    def read(uri: str) -> bytes:
        return Location.from_uri(uri, cfg.storage).read_bytes()

    return read


def _take_down(docs: pa.Table, takedown: list[str]) -> tuple[pa.Table, pa.Table]:
    """`docs` less those the takedown list names, and those it named (doc_id, source, row)."""
    hit = pc.is_in(docs["doc_id"], value_set=pa.array(takedown, pa.string()))
    return docs.filter(pc.invert(hit)), docs.filter(hit).select(["doc_id", "source", "row"])


def _audit_rows(
    unit_id: str, origin: str, filtered: pa.Table, down: pa.Table | None
) -> pa.Table:
    """The unit's read-pass removals as audit rows (exact.AUDIT_SCHEMA): curation's, rule =
    the step and detail = its reason, then the takedown list's, rule "takedown"."""
    parts = [filtered.select(["doc_id", "source", "row", "rule", "detail"])]
    if down is not None and down.num_rows:
        n = down.num_rows
        parts.append(down.append_column("rule", pa.array(["takedown"] * n, pa.string()))
                     .append_column("detail", pa.nulls(n, pa.string())))  # fmt: skip
    rows = pa.concat_tables(parts)
    n = rows.num_rows
    given = {
        **{name: rows[name] for name in rows.column_names},
        "unit_id": pa.array([unit_id] * n, pa.string()),
        "origin": pa.array([origin] * n, pa.string()),
    }
    return pa.table(
        [given.get(f.name, pa.nulls(n, f.type)) for f in exact.AUDIT_SCHEMA],
        schema=exact.AUDIT_SCHEMA,
    )


def _outputs_present(layout: RunLayout, unit_id: str, cfg: Config, earlier: ReadResult) -> bool:
    """Whether a done unit's outputs are all there: its token file (the token key may be new,
    e.g. after inputs[].keep_fields changed), its read-pass audit rows when it had any, and,
    with near dedup on, its signatures and band object (a run without near dedup, or retention,
    may have left none). Otherwise the unit is read again."""
    if not layout.tokens_all(unit_id).exists():
        return False
    removed = earlier.removed_takedown + sum(earlier.removed_filtered.values())
    if removed and not layout.read_removed(unit_id).exists():
        return False
    if cfg.dedup.near.enabled:
        from pipeline.run import near_signing as near

        return (
            layout.read_sigs(unit_id, near.signature_key(cfg)).exists()
            and layout.read_bands(unit_id, near.band_key(cfg)).exists()
        )
    return True


def read_pieces(
    input_root: Location,
    pieces: list[dict],
    cfg: Config,
    src,
    records: Counter | None = None,
    seconds: Counter | None = None,
) -> tuple[pa.Table, pa.Table]:
    """A unit's documents (ids as the run names them: "<source>/<id>" with named sources) and
    quarantine rows; a piece whose object changed since the listing keeps none of its documents
    and is quarantined whole. `records`: where web archive records that are not documents are
    counted by kind (ingest/web_archive.py); `seconds`: where the web archive reader adds the
    seconds of its parts (web_archive.PARTS)."""
    doc_parts, bad_parts = [], []
    extract = None
    if any(p["format"] in ("warc", "html") for p in pieces):
        from pipeline.extract.html import extractor

        extract = extractor(cfg.extract)
    for piece in pieces:
        piece_records: Counter = Counter()
        piece_docs, piece_bad = [], []
        try:
            for docs, bad in read_piece(
                input_root,
                piece,
                src.text_field,
                src.id_field,
                max_doc_bytes=int(cfg.ingest.max_doc_bytes),
                keep_fields=tuple(src.keep_fields),
                extract=extract,
                records=piece_records,
                seconds=seconds,
            ):
                piece_docs.append(docs)
                piece_bad.append(bad)
        except ObjectChanged as changed:  # not the object listed: nothing of it is kept
            piece_docs, piece_records = [], Counter()
            piece_bad = [changed_quarantine(changed, piece["end"] - piece["start"])]
        if records is not None:
            records.update(piece_records)
        doc_parts += piece_docs
        bad_parts += piece_bad
    docs = concat(doc_parts, docs_schema(tuple(src.keep_fields)))
    bad = concat(bad_parts, QUARANTINE_SCHEMA)
    if cfg.named_sources:  # ids unique across sources: "<source name>/<id>"
        prefixed = pc.binary_join_element_wise(f"{src.name}/", docs["doc_id"], "")
        docs = docs.set_column(0, "doc_id", prefixed)
        column = bad.schema.get_field_index("doc_id")  # a null id stays null
        bad = bad.set_column(
            column, "doc_id", pc.binary_join_element_wise(f"{src.name}/", bad["doc_id"], "")
        )
    return docs, bad

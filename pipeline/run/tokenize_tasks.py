"""Tokenize tasks: the engine equality probe, a unit's documents to its token file (called by
the read task, which holds them), and the index of what dedup kept of it.

Like every task module (run/read_tasks.py): picklable descriptions in, a small typed result
out, each unit's output committed atomically, its index last (resume). The token file's format
is documented in tokens/pack.py (its compression in tokens/framed.py); the engine choice and
fallback in run/tokenize_stage.py.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from pipeline.config.model import Config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.core.text import shuffle_key
from pipeline.dedup import exact
from pipeline.exchange import sections
from pipeline.ingest.records import QUARANTINE_SCHEMA, SPECIAL_TOKEN_TEXT
from pipeline.run.results import ProbeResult, SelectResult, TokenizeResult
from pipeline.run.timer import TaskTimer
from pipeline.tokens import framed, pack
from pipeline.tokens.check import (
    SampleCheck,
    compare_engines,
    confirm_with_reference,
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
from pipeline.tokens.pieces import leading_piece
from pipeline.tokens.split import in_valid


def tokenize_probe(cfg: Config, tokenizer_json: bytes) -> ProbeResult:
    """Choose the engine for the run before anything is read: fastokens if it loads here and
    gives tokenizers' ids on the hard strings, else tokenizers with the reason.
    `tokenize.engine: fastokens` that cannot load is an error (`error` in the result). Each read
    task then checks a sample of its own documents (tokenize_docs)."""
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


@dataclass(frozen=True)
class TokenFile:
    """What tokenize_docs made (or found made) of a unit: the documents and tokens in its
    token file, the engine and how many documents tokenizers checked (None, 0 when reused), and
    the quarantine rows of the documents left out (special_token_text)."""

    docs: int
    tokens: int
    quarantine: pa.Table
    engine: str | None = None
    checked: int = 0


def tokenize_docs(
    layout: RunLayout,
    unit_id: str,
    docs: pa.Table,
    cfg: Config,
    tokenizer_json: bytes,
    engine: str = "tokenizers",
    rewrite: bool = False,
) -> TokenFile:
    """Tokenize every document of a unit, as the read task holds them (before dedup), into its
    token file (tokens/pack.py) with `engine`; pack later leaves out what dedup removed.

    Unless the engine is tokenizers itself, a sample of the documents (tokenize.verify_fraction,
    at most tokenize.verify_bytes of text) is re-encoded with tokenizers before anything is
    committed: EngineMismatch on a difference. A token file already made for this token key is
    reused unless `rewrite` (the driver's rerun with tokenizers after a mismatch)."""
    index_loc, bad_loc = layout.tokens_all(unit_id), layout.tokens_quarantine(unit_id)
    if not rewrite and index_loc.exists() and bad_loc.exists():
        index = index_loc.read_parquet(columns=["length"])
        return TokenFile(
            index.num_rows, int(pc.sum(index["length"]).as_py() or 0), bad_loc.read_parquet()
        )
    if index_loc.exists():  # a rewrite: the unit's token file is not complete until it lands
        index_loc.remove()
    ids = docs["doc_id"].to_pylist()
    keys = [shuffle_key(d, cfg.pack.seed) for d in ids]
    meta = docs.select(["doc_id", "source", "row"])
    meta = meta.append_column("key", pa.array(keys, pa.uint64()))
    # each split one block of the file, so that its pack reads only its own (tokens/pack.py)
    meta = meta.append_column("valid", pa.array(in_valid(ids, cfg.split.valid_fraction)))
    order = pc.sort_indices(meta, sort_keys=pack.FILE_SORT_KEYS)
    texts = InOrder(docs["text"], order)  # the text is not copied whole in shuffle order
    docs = meta.take(order)
    length, checked, special, frames = _encode_tokens(
        docs, texts, layout.tokens_bin(unit_id), cfg, tokenizer_json, engine
    )
    keep = np.ones(docs.num_rows, dtype=bool)
    keep[list(special)] = False
    bad = _special_quarantine(docs, special)
    bad_loc.write_parquet(bad)
    # last: its presence marks the token file complete; it carries the .bin's frame table
    index_loc.write_parquet(
        framed.with_table(_token_index(docs.filter(pa.array(keep)), length), frames)
    )
    return TokenFile(int(keep.sum()), int(length.sum()), bad, engine, checked)


def select_unit(layout: RunLayout, unit_id: str) -> TokenizeResult:
    """The index of the documents of a unit's token file that dedup kept, each with its offset
    (in tokens) into the file (tokens/pack.py): what pack reads. Named by the digest of the
    unit's removals, so a takedown or another dedup outcome writes its own. Its removals come
    from the run's removed.parquet (select_bucket reads them where the audit does)."""
    timer = TaskTimer()
    with layout.removed.open_read() as f:
        removed = pq.read_table(f, columns=["source", "row"], filters=[("unit_id", "=", unit_id)])
    return _select(layout, unit_id, removed, timer)


def select_bucket(
    layout: RunLayout, unit_ids: list[str], ranges: list[sections.Range], read_pass: list[str]
) -> SelectResult:
    """select_unit for the units of one unit bucket (exchange/sections.unit_bounds), their
    removals read once from where the audit (merge_tasks.merge_audit) reads this bucket's:
    the exact and near removals' `ranges` and the read-pass audit rows of the units in
    `read_pass`. The same rows as removed.parquet's for these units, so select need not wait
    for the audit."""
    timer = TaskTimer()
    rows = sections.read_part(ranges, exact.REMOVED_SCHEMA).select(_BY_UNIT)
    own = [layout.read_removed(u).read_parquet(columns=_BY_UNIT) for u in read_pass]
    removed = pa.concat_tables([rows, *own]) if own else rows
    units = removed["unit_id"].to_numpy(zero_copy_only=False).astype(str)
    selected = [
        _select(layout, u, removed.filter(pa.array(units == u)).select(["source", "row"]))
        for u in unit_ids
    ]
    return timer.result(SelectResult, units=selected, reused=all(r.reused for r in selected))


_BY_UNIT = ["unit_id", "source", "row"]


def _select(
    layout: RunLayout, unit_id: str, removed: pa.Table, timer: TaskTimer | None = None
) -> TokenizeResult:
    """A unit's kept index from its removals (source, row); reused when already written."""
    timer = timer or TaskTimer()
    removed = removed.sort_by([("source", "ascending"), ("row", "ascending")])
    digest = removals_digest(removed)
    kept_loc = layout.tokens_index(unit_id, digest)
    reused = kept_loc.exists()
    if reused:
        kept = kept_loc.read_parquet(columns=["length"])
    else:
        index = layout.tokens_all(unit_id).read_parquet()
        lengths = index["length"].to_numpy()
        offsets = (np.cumsum(lengths) - lengths).astype(np.int64)
        with_offsets = index.append_column("offset", pa.array(offsets, pa.int64()))
        kept = exact.drop_removed(with_offsets, removed).sort_by("offset")  # in file order
        # the .bin's frame table goes with the rows that locate documents in it
        kept_loc.write_parquet(framed.with_table(kept, framed.table_of(index)))
    return timer.result(
        TokenizeResult,
        unit=unit_id,
        removed=digest,
        docs=kept.num_rows,
        tokens=int(pc.sum(kept["length"]).as_py() or 0),
        reused=reused,
    )


def removals_digest(removed: pa.Table) -> str:
    """The `<removed>` part of a unit's token file names: xxh3-64 of its removals (source, row),
    sorted. A takedown (run/takedown.py) recomputes it from the run's removed.parquet."""
    rows = removed.select(["source", "row"]).to_pylist()
    return xxhash.xxh3_64_hexdigest(json.dumps(rows).encode())


def _special_quarantine(docs: pa.Table, special: dict[int, str]) -> pa.Table:
    """The quarantine rows (ingest/records.py) of the documents whose ids held the EOS or BOS
    id: row in `docs` -> detail."""
    rows = sorted(special)
    taken = docs.take(pa.array(rows, pa.int64()))
    return pa.table(
        [
            taken["source"],
            taken["row"],
            [SPECIAL_TOKEN_TEXT] * len(rows),
            [special[r] for r in rows],
            [1] * len(rows),
            [0] * len(rows),
            taken["doc_id"],
        ],
        schema=QUARANTINE_SCHEMA,
    )


@dataclass(frozen=True)
class InOrder:
    """A unit's text column read in shuffle order a batch at a time: a sorted copy of the whole
    column would hold the unit's text twice while the read task also holds it."""

    column: pa.ChunkedArray
    order: pa.Array  # row of the column at each position of the order

    def slice(self, start: int, n: int) -> list[str]:
        """The texts at positions [start, start + n) of the order."""
        rows = self.order.slice(start, n)
        strings = self._strings
        if strings is None:
            return self.column.take(rows).to_pylist()
        offsets, data = strings
        # each text decoded from the column's own buffer: no taken copy of the batch first
        return [str(data[offsets[r] : offsets[r + 1]], "utf-8") for r in rows.to_pylist()]

    @functools.cached_property
    def _strings(self) -> tuple[list[int], memoryview] | None:
        return _utf8_slices(self.column)

    def take(self, positions: pa.Array) -> pa.Array:
        return self.column.take(self.order.take(positions))

    def sizes(self) -> np.ndarray:
        """Each text's UTF-8 bytes, in the order."""
        return pc.binary_length(self.column).take(self.order).to_numpy(zero_copy_only=False)


def _utf8_slices(column: pa.ChunkedArray) -> tuple[list[int], memoryview] | None:
    """(offsets, data) of a one-chunk string column without nulls: text i is
    data[offsets[i] : offsets[i + 1]]; None for any other column."""
    if column.num_chunks != 1 or column.null_count:
        return None
    array = column.chunk(0)
    width = {pa.string(): "<i4", pa.large_string(): "<i8"}.get(array.type)
    if width is None:
        return None
    _, offsets, data = array.buffers()
    at = np.frombuffer(offsets, width, len(array) + 1, array.offset * np.dtype(width).itemsize)
    return at.tolist(), memoryview(data) if data is not None else memoryview(b"")


def _encode_tokens(
    docs: pa.Table,
    texts: InOrder,
    out_loc: Location,
    cfg: Config,
    tokenizer_json: bytes,
    engine: str,
) -> tuple[np.ndarray, int, dict[int, str], framed.FrameTable]:
    """The documents' tokens (`docs`: their ids and keys, `texts`: their text, both in the same
    order), in their order, into `out_loc` (framed: tokens/framed.py) with
    `engine`; unless the engine is tokenizers, a sample is re-encoded with tokenizers meanwhile,
    on a thread of its own, and compared before the token file is committed (EngineMismatch).
    With special tokens' text as text, a document whose ids hold the EOS/BOS id is left out of
    the file (and, unless the engine is tokenizers, confirmed by tokenizers first). Returns the
    token count of each document written, how many documents were checked, the documents left
    out (row -> what was found where) and the file's frame table."""
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
        sizes = texts.sizes()
        checked = sample_rows(
            docs["key"].to_numpy(), tok.verify_fraction, sizes, int(tok.verify_bytes)
        )
    if len(checked):
        rows = pa.array(checked, pa.int64())
        budget = int(tok.verify_bytes)
        whole = texts.take(rows).to_pylist()
        # a document over the budget (checked because none fits) is checked on its leading piece
        sampled = [
            leading_piece(text, reference.cut_before, budget) if size > budget else text
            for text, size in zip(whole, sizes[checked].tolist(), strict=True)
        ]
        sample = SampleCheck(  # starts re-encoding now, alongside the engine
            reference,
            encoder.name,
            sampled,
            docs["doc_id"].take(rows).to_pylist(),
            leading=[len(s) < len(t) for s, t in zip(sampled, whole, strict=True)],
        )
    lengths = []
    step = tok.batch_docs
    special: dict[int, np.ndarray] = {}

    def batches():
        at = 0
        for i in range(0, docs.num_rows, step):
            check = []
            while at < len(checked) and checked[at] < i + step:
                check.append((int(checked[at]) - i, at))
                at += 1
            yield Batch(texts.slice(i, step), check)

    encoded = tokenize_batches(
        encoder, batches(), info.eos_id, bos_id, dtype, sample, forbid_in_text=special_as_text
    )
    with out_loc.atomic_writer() as out:
        writer = framed.FramedWriter(out)
        for n, batch in enumerate(encoded):
            writer.write(batch.tokens.view(np.uint8))  # the array's own buffer: no copy to bytes
            lengths.append(batch.lengths)
            special.update({n * step + row: ids for row, ids in batch.special.items()})
        # inside the writer: a mismatch discards the token file
        if sample is not None:
            sample.finish()
        rows = sorted(special)
        if rows and engine != "tokenizers":
            taken = pa.array(rows, pa.int64())
            confirm_with_reference(
                reference,
                encoder.name,
                texts.take(taken).to_pylist(),
                docs["doc_id"].take(taken).to_pylist(),
                [special[r] for r in rows],
            )
        frames = writer.close()
    length = np.concatenate(lengths) if lengths else np.empty(0, np.int64)
    names = {info.eos_id: tok.eos, **({bos_id: tok.bos} if bos_id is not None else {})}
    found = {}
    for row, ids in special.items():
        pos = int(np.flatnonzero(np.isin(ids, np.array(list(names), ids.dtype)))[0])
        found[row] = (
            f"the tokenizer made {names[int(ids[pos])]!r} (id {int(ids[pos])}) from the"
            f" document's text, at token {pos}"
        )
    return length, len(checked), found, frames


def _token_index(docs: pa.Table, length: np.ndarray) -> pa.Table:
    """The token file's index: each document's ids, shuffle key, token count and split, in
    file order."""
    return pa.table(
        {
            "doc_id": docs["doc_id"],
            "source": docs["source"],
            "row": docs["row"],
            "key": docs["key"],
            "length": pa.array(length, pa.int64()),
            "valid": docs["valid"],
        },
        schema=pack.TOKEN_FILE_INDEX_SCHEMA,
    )



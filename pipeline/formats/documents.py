"""The document index of a version, `<version>/documents.parquet`: its schema, how it is built
from the run's per-shard records, written (before the manifest), read and checked.

Contract: one row per document of the version, in manifest shard order; `verify` holds it to
every shard's .idx (`index_problem`); `read_index` reads every format written so far as the
current one (FORMAT). Format: docs/formats.md, "The document index".
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from pipeline.core.storage import Location
from pipeline.ingest.listing import detect_format

INDEX_FILE = "documents.parquet"
INDEX_SCHEMA = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("split", pa.string()),
        ("shard", pa.string()),
        ("first_token", pa.int64()),
        ("tokens", pa.int64()),
        ("input_path", pa.string()),
        ("input_offset", pa.int64()),
        ("input_row", pa.int64()),
    ]
)
FORMAT = 2


def shard_rows(shard_docs: pa.Table, source: str, split: str, shard: str) -> pa.Table:
    """Index rows of one shard from its pack record (doc_id, source = input path, row, length,
    in shard order)."""
    lengths = shard_docs["length"].to_numpy().astype(np.int64)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    n = shard_docs.num_rows
    return pa.table(
        [
            shard_docs["doc_id"],
            pa.array([source] * n, pa.string()),
            pa.array([split] * n, pa.string()),
            pa.array([shard] * n, pa.string()),
            pa.array(first[:n], pa.int64()),
            pa.array(lengths, pa.int64()),
            shard_docs["source"],
            *_offset_and_row(shard_docs["source"], shard_docs["row"]),
        ],
        schema=INDEX_SCHEMA,
    )


def _offset_and_row(paths: pa.ChunkedArray, rows: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """A reader's `row` (ingest/records.py) as the index's input_offset and input_row columns:
    a Parquet file's rows are rows, every other format's are byte offsets."""
    # a shard's documents come from a few files: each distinct path's format is detected once
    coded = paths.combine_chunks().dictionary_encode()
    formats = [(detect_format(p) or ("", ""))[0] for p in coded.dictionary.to_pylist()]
    parquet = pa.array([f == "parquet" for f in formats], pa.bool_()).take(coded.indices)
    null = pa.nulls(len(parquet), pa.int64())
    return pc.if_else(parquet, null, rows), pc.if_else(parquet, rows, null)


# what locates a document's input record: its source, file and the reader's row (both columns)
FIELD_KEYS = ["source", "input_path", "row"]


def _record_key(index: pa.Table) -> pa.Table:
    row = pc.coalesce(index["input_offset"], index["input_row"])
    return index.append_column("row", row)


def fields_of(index: pa.Table, names: list[str]) -> pa.Table:
    """The kept fields `names` of an index, keyed as with_fields takes them."""
    return _record_key(index).select([*FIELD_KEYS, *names])


def with_fields(index: pa.Table, fields: pa.Table) -> pa.Table:
    """The index with the kept input fields (`inputs[].keep_fields`) as more columns, in its
    own row order: `fields` has FIELD_KEYS and one column per field; a document without a row
    there gets nulls."""
    extra = [c for c in fields.column_names if c not in FIELD_KEYS]
    if not extra:
        return index
    keyed = _record_key(index)
    numbered = keyed.append_column("_at", pa.array(range(index.num_rows), pa.int64()))
    joined = numbered.join(fields, FIELD_KEYS, join_type="left outer", coalesce_keys=True)
    joined = joined.sort_by("_at").drop_columns(["_at"])
    return joined.select([*INDEX_SCHEMA.names, *extra])


def read_fields(layout, origin_of: dict[str, str], keep: dict[str, list[str]]) -> pa.Table | None:
    """The kept fields of every document the run read (`layout`: run.RunLayout), from the units'
    read outputs (`keep.<field>` columns, ingest/records.py): FIELD_KEYS and one string column
    per field any source keeps (config order; null where its source does not keep it); None when
    no source keeps a field. `origin_of`: unit -> source, `keep`: source -> its keep_fields."""
    from pipeline.ingest.records import KEEP_PREFIX

    names = list(dict.fromkeys(n for fields in keep.values() for n in fields))
    if not names:
        return None
    parts = []
    for unit, origin in sorted(origin_of.items()):
        mine = keep.get(origin, [])
        docs = layout.read_docs(unit).read_parquet(
            columns=["source", "row", *(KEEP_PREFIX + n for n in mine)]
        )
        n = docs.num_rows
        columns = [pa.array([origin] * n, pa.string()), docs["source"], docs["row"]]  # FIELD_KEYS
        columns += [
            docs[KEEP_PREFIX + name] if name in mine else pa.nulls(n, pa.string())
            for name in names
        ]
        parts.append(pa.table(columns, names=[*FIELD_KEYS, *names]))
    return pa.concat_tables(parts)


def write_index(version: Location, tables: list[pa.Table]) -> dict:
    """Write the index; returns the manifest's `documents` entry."""
    table = pa.concat_tables(tables) if tables else INDEX_SCHEMA.empty_table()
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue()
    (version / INDEX_FILE).write_bytes(data)
    return {
        "file": INDEX_FILE,
        "format": FORMAT,
        "bytes": len(data),
        "xxh3_128": xxhash.xxh3_128_hexdigest(data),
        "rows": table.num_rows,
    }


def read_index(version: Location, entry: dict | None = None) -> pa.Table:
    """The index; with the manifest's entry, ValueError unless size and checksum match."""
    data = (version / INDEX_FILE).read_bytes()
    if entry is not None and (
        len(data) != entry["bytes"] or xxhash.xxh3_128_hexdigest(data) != entry["xxh3_128"]
    ):
        raise ValueError(f"{INDEX_FILE} does not have the size and xxh3-128 the manifest says")
    return _as_current(pq.read_table(io.BytesIO(data)))


def _as_current(index: pa.Table) -> pa.Table:
    """A format 1 index (one `input_row` column for offsets and rows) as format 2."""
    if "input_offset" in index.column_names or "input_row" not in index.column_names:
        return index
    at = index.column_names.index("input_row")
    offset, row = _offset_and_row(index["input_path"], index["input_row"])
    index = index.set_column(at, "input_row", row)
    return index.add_column(at, "input_offset", offset)


def index_problem(index: pa.Table, shard: str, pointers: np.ndarray, lengths: np.ndarray,
                  itemsize: int) -> str | None:
    """Where the index rows of `shard` disagree with its .idx (pointers in bytes), or None."""
    mine = index.filter(pc.equal(index["shard"], shard))
    if mine.num_rows != len(lengths):
        return f"the index lists {mine.num_rows} documents in {shard}, its .idx {len(lengths)}"
    if not np.array_equal(mine["tokens"].to_numpy(), lengths.astype(np.int64)):
        return f"the index's token counts for {shard} differ from its .idx lengths"
    if not np.array_equal(mine["first_token"].to_numpy() * itemsize, pointers.astype(np.int64)):
        return f"the index's first_token offsets for {shard} differ from its .idx pointers"
    return None


def find(index: pa.Table, doc_id: str) -> list[dict]:
    """The index rows of one document id (one, or none)."""
    return index.filter(pc.equal(index["doc_id"], doc_id)).to_pylist()

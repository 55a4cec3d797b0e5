"""The document index of a version: `<version>/documents.parquet`, written before the manifest.

One row per document of the version, in manifest shard order (training shards, then the
validation shards; within a shard, the shard's own document order):

    doc_id       string  the document's id (named sources: "<source>/<id>")
    source       string  the named source it came from (a single `input`: named like the dataset)
    split        string  "train" or "valid"
    shard        string  the shard's path prefix (its .bin name without ".bin")
    first_token  int64   offset, in tokens, of its first token within the shard's .bin
    tokens       int64   its token count (EOS, and BOS when configured, included)
    input_path   string  the input file it was read from (relative to its source's root)
    input_row    int64   where in that file (ingest/records.py: JSONL byte offset, Parquet row)
    <field> ...  string  one column per `inputs[].keep_fields` entry of any source, in config
                         order: the record's value (a string as is, a number as its JSON text),
                         null when the record has no such field or its source does not keep it

The manifest's `documents` entry names the file with its size, xxh3-128 and row count; `verify`
checks it against every shard's .idx (documents per shard, first_token = the .idx pointer /
itemsize, tokens = the .idx length). It is built from the run's per-shard records
(`_work/runs/<run>/pack/docs/<shard>.parquet`) and held in memory once while written.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from pipeline.core.storage import Location

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
        ("input_row", pa.int64()),
    ]
)


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
            shard_docs["row"],
        ],
        schema=INDEX_SCHEMA,
    )


FIELD_KEYS = ["source", "input_path", "input_row"]  # what locates a document's input record


def with_fields(index: pa.Table, fields: pa.Table) -> pa.Table:
    """The index with the kept input fields (`inputs[].keep_fields`) as more columns, in its
    own row order: `fields` has FIELD_KEYS and one column per field; a document without a row
    there gets nulls."""
    extra = [c for c in fields.column_names if c not in FIELD_KEYS]
    if not extra:
        return index
    numbered = index.append_column("_at", pa.array(range(index.num_rows), pa.int64()))
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
        columns = [pa.array([origin] * n, pa.string()), docs["source"], docs["row"]]
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
    return pq.read_table(io.BytesIO(data))


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

"""Ingest planning: list the input from metadata alone, then cut it into byte-balanced work units.

Contract: listing reads metadata only on S3 (sizes, ETags) and a cheap fingerprint of a
local file (its first and last 64 KiB); units are cut by bytes, content-defined, so a unit's
id and pieces do not depend on the number of workers, and an unchanged object keeps its
unit; `inputs.parquet` and `units.parquet` are the run's record of what it read (the
manifest's lineage holds the digest of `inputs.parquet`: `table_digest`).
In full: docs/formats.md, "The listing and its work units".
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from fsspec.utils import glob_translate

from pipeline.core.layout import MANIFEST, WORK_DIR, is_version_name
from pipeline.core.storage import Location
from pipeline.ingest.local_listing import head_tail_xxh3, walk_local
from pipeline.ingest.work_units import UNITS_SCHEMA, cut_units  # noqa: F401 - callers import here

INPUTS_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("etag", pa.string()),
        ("mtime", pa.float64()),
        ("format", pa.string()),
        ("compression", pa.string()),
        ("head_tail_xxh3", pa.string()),
    ]
)
SKIPPED_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("reason", pa.string())])

_COMPRESSION_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_FORMAT_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".parquet": "parquet",
    ".warc": "warc",  # .warc, .warc.gz (a gzip member per record, or one stream)
    ".warc.wet": "warc",  # Common Crawl's extracted text: conversion records
    ".html": "html",
    ".htm": "html",
}


# -- listing ---------------------------------------------------------------------------------
def detect_format(name: str) -> tuple[str, str] | None:
    """(format, compression) from a file name, or None when the extension is not supported."""
    lower = name.lower()
    compression = "none"
    for suffix, codec in _COMPRESSION_SUFFIXES.items():
        if lower.endswith(suffix):
            compression, lower = codec, lower[: -len(suffix)]
            break
    for suffix, fmt in _FORMAT_SUFFIXES.items():
        if lower.endswith(suffix) and len(lower) > len(suffix):
            if fmt == "parquet" and compression != "none":
                return None
            return fmt, compression
    return None


def _compile_globs(patterns: Iterable[str]) -> list[re.Pattern[str]]:
    return [re.compile(glob_translate(p)) for p in patterns]


def skip_reason(
    rel: str, include: list[re.Pattern[str]], exclude: list[re.Pattern[str]]
) -> str | None:
    parts = rel.split("/")
    if any(part.startswith(".") for part in parts):
        return "hidden"
    name = parts[-1]
    if name.startswith("_") or name.lower().endswith(".crc"):
        return "marker"
    if not any(p.match(rel) for p in include) or any(p.match(rel) for p in exclude):
        return "excluded"
    if detect_format(name) is None:
        return "unsupported_format"
    return None


StoreListing = Callable[[Location], Iterable[tuple[str, dict[str, Any]]]]


def store_listing(root: Location) -> Iterator[tuple[str, dict[str, Any]]]:
    """(full path, info) of every object under `root`: the store's own recursive listing."""
    yield from root.find(detail=True).items()


def list_inputs(
    root: Location,
    include: list[str],
    exclude: list[str],
    own_output: str | None = None,
    listing: StoreListing = store_listing,
) -> tuple[pa.Table, pa.Table]:
    """(inputs, skipped) of the folder or prefix `root`, from one recursive listing (no reads on
    S3; locally the head and tail of each accepted file).

    `own_output`: the run's output dataset folder relative to `root`, when it lies inside it.
    `listing`: what lists an object store's root (bench listing feeds synthetic metadata).
    The listing is taken in Arrow batches of LIST_BATCH objects and classified column by
    column (the same rules as `skip_reason`), so the driver never holds a Python object per file.
    """
    rules = _Rules(_compile_globs(include), _compile_globs(exclude), include)
    batches = [_classified(batch, rules) for batch in _batched(_listing(root, listing))]
    listed = pa.concat_tables(batches) if batches else _LISTED_SCHEMA.empty_table()
    reason = _without_datasets(listed["path"], listed["reason"], own_output)
    accepted = listed.filter(pc.is_null(reason))
    accepted = accepted.take(pc.sort_indices(accepted["path"]))
    skipped = listed.set_column(listed.schema.get_field_index("reason"), "reason", reason)
    skipped = skipped.filter(pc.is_valid(reason))
    skipped = skipped.take(pc.sort_indices(skipped["path"]))
    fingerprints = pa.nulls(accepted.num_rows, pa.string())
    if _is_local_folder(root):
        fingerprints = pa.array(
            [
                head_tail_xxh3(f"{root.path}/{path}", size)
                for path, size in zip(
                    accepted["path"].to_pylist(), accepted["size"].to_pylist(), strict=True
                )
            ],
            pa.string(),
        )
    inputs = accepted.select(INPUTS_SCHEMA.names[:-1]).append_column("head_tail_xxh3", fingerprints)
    return (
        inputs.cast(INPUTS_SCHEMA).combine_chunks(),
        skipped.select(SKIPPED_SCHEMA.names).cast(SKIPPED_SCHEMA).combine_chunks(),
    )


LIST_BATCH = 1 << 16  # objects per Arrow batch while listing
_LISTED_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("etag", pa.string()),
        ("mtime", pa.float64()),
        ("reason", pa.string()),
        ("format", pa.string()),
        ("compression", pa.string()),
    ]
)


@dataclass(frozen=True)
class _Rules:
    include: list[re.Pattern[str]]
    exclude: list[re.Pattern[str]]
    include_globs: list[str]

    def excluded(self, paths: list[str]) -> pa.Array:
        """Per path: not matched by an include glob, or matched by an exclude glob."""
        if "**" in self.include_globs and not self.exclude:  # the default: nothing to test
            return pa.array([False] * len(paths), pa.bool_())
        include, exclude = self.include, self.exclude
        return pa.array(
            [
                not any(p.match(rel) for p in include) or any(p.match(rel) for p in exclude)
                for rel in paths
            ],
            pa.bool_(),
        )


def _batched(
    entries: Iterator[tuple[str, dict[str, Any], str | None]],
) -> Iterator[tuple[list[str], list[int], list, list, list]]:
    """The listing as columns, LIST_BATCH objects at a time."""
    columns: tuple[list, ...] = ([], [], [], [], [])
    for rel, info, listed_reason in entries:
        columns[0].append(rel)
        columns[1].append(int(info["size"]))
        columns[2].append(_etag(info))
        columns[3].append(_mtime(info))
        columns[4].append(listed_reason)
        if len(columns[0]) == LIST_BATCH:
            yield columns
            columns = ([], [], [], [], [])
    if columns[0]:
        yield columns


def _classified(columns: tuple[list, ...], rules: _Rules) -> pa.Table:
    """One batch of the listing with each file's skip reason (null: accepted), format and
    compression: `skip_reason` and `detect_format` over Arrow columns."""
    paths, sizes, etags, mtimes, listed_reasons = columns
    path = pa.array(paths, pa.string())
    name = pc.replace_substring_regex(path, r"^.*/", "")
    lower = pc.ascii_lower(name)
    fmt, compression = _formats(lower)
    reason = pa.array(listed_reasons, pa.string())
    for mask, why in (
        (pc.match_substring_regex(path, r"(^|/)\."), "hidden"),
        (pc.or_(pc.starts_with(name, "_"), pc.ends_with(lower, ".crc")), "marker"),
        (rules.excluded(paths), "excluded"),
        (pc.is_null(fmt), "unsupported_format"),
    ):
        reason = pc.if_else(pc.and_(pc.is_null(reason), mask), why, reason)
    return pa.table(
        [
            path,
            pa.array(sizes, pa.int64()),
            pa.array(etags, pa.string()),
            pa.array(mtimes, pa.float64()),
            reason,
            fmt,
            compression,
        ],  # fmt: skip
        schema=_LISTED_SCHEMA,
    )


def _formats(lower: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(format, compression) of lower-cased file names: `detect_format` column by column."""
    comp_keys = list(_COMPRESSION_SUFFIXES)
    parts = pc.extract_regex(
        lower, "^(?P<stem>.*?)(?P<comp>" + "|".join(re.escape(k) for k in comp_keys) + ")?$"
    )
    stem, comp = pc.struct_field(parts, [0]), pc.struct_field(parts, [1])
    compression = pc.take(
        pa.array(["none", *_COMPRESSION_SUFFIXES.values()]),
        pc.add(pc.fill_null(pc.index_in(comp, pa.array(comp_keys)), -1), 1),
    )
    fmt_keys = list(_FORMAT_SUFFIXES)
    found = pc.extract_regex(
        stem, "^.+(?P<suffix>" + "|".join(re.escape(k) for k in fmt_keys) + ")$"
    )
    suffix = pc.struct_field(found, [0])
    fmt = pc.take(
        pa.array(list(_FORMAT_SUFFIXES.values())), pc.index_in(suffix, pa.array(fmt_keys))
    )
    compressed_parquet = pc.and_(pc.equal(fmt, "parquet"), pc.not_equal(compression, "none"))
    fmt = pc.if_else(pc.fill_null(compressed_parquet, False), None, fmt)
    compression = pc.if_else(pc.is_null(fmt), None, compression)
    return fmt, compression


def _is_local_folder(root: Location) -> bool:
    return root.is_local and os.path.isdir(root.path)


def single_object(root: Location) -> str | None:
    """The line refusing an object store root that names one object (the listing walks a
    prefix; a local file is refused when the config loads), or None: one metadata request."""
    if root.is_local or not root.fs.isfile(root.path):
        return None
    return _single_object_line(root.uri)


def _single_object_line(uri: str) -> str:
    prefix, name = uri.rstrip("/").rsplit("/", 1)
    return (f"input {uri} is an object, not a prefix: give its prefix ({prefix}) and, to read"
            f" only this object, include: [{name!r}]")  # fmt: skip


def _listing(
    root: Location, listing: StoreListing
) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(relative path, info, skip reason or None) of every file under root. A local folder
    is walked with the symlink and file-name policy of ingest/local_listing.py."""
    if _is_local_folder(root):
        for e in walk_local(root.path):
            yield e.rel, {"size": e.size, "mtime": e.mtime}, e.reason
        return
    prefix = root.path.rstrip("/") + "/"
    for full_path, info in listing(root):
        if not full_path.startswith(prefix):
            raise ValueError(_single_object_line(root.uri))
        yield full_path[len(prefix) :], info, None


OWN_OUTPUT = "own_output"
PIPELINE_DATASET = "pipeline_dataset"


def dataset_folders(paths: Iterable[str]) -> set[str]:
    """Folders ('' is the root) holding a pipeline dataset, from relative file paths alone: the
    parent of a `_work/` folder, and the parent of a version folder with a manifest."""
    found = set()
    for rel in paths:
        parts = rel.split("/")
        if WORK_DIR in parts[:-1]:
            found.add("/".join(parts[: parts.index(WORK_DIR)]))
        if len(parts) >= 2 and parts[-1] == MANIFEST and is_version_name(parts[-2]):
            found.add("/".join(parts[:-2]))
    return found


def _without_datasets(
    paths: pa.ChunkedArray, reasons: pa.ChunkedArray, own_output: str | None
) -> pa.ChunkedArray:
    """The skip reasons with every file under a pipeline dataset (own_output first) given that
    as its reason, whatever it had."""
    hint = pc.or_(
        pc.match_substring(paths, f"{WORK_DIR}/"), pc.ends_with(paths, MANIFEST)
    )  # the few paths dataset_folders can name a folder from
    for folder in sorted(dataset_folders(paths.filter(hint).to_pylist())):
        reasons = pc.if_else(_under(paths, folder), PIPELINE_DATASET, reasons)
    if own_output is not None:
        reasons = pc.if_else(_under(paths, own_output), OWN_OUTPUT, reasons)
    return reasons


def _under(paths: pa.ChunkedArray, folder: str) -> pa.ChunkedArray:
    if folder == "":
        return pc.is_valid(paths)
    return pc.or_(pc.equal(paths, folder), pc.starts_with(paths, folder + "/"))


def inside(root: Location, other: Location) -> str | None:
    """`other`'s path relative to `root` when it is `root` or lies under it ('' for root)."""
    if type(root.fs) is not type(other.fs):
        return None
    a, b = root.path.rstrip("/"), other.path.rstrip("/")
    if root.is_local:
        a, b = os.path.realpath(a), os.path.realpath(b)
    if b == a:
        return ""
    return b[len(a) + 1 :] if b.startswith(a + "/") else None


def _etag(info: dict[str, Any]) -> str | None:
    etag = info.get("ETag") or info.get("etag")
    return str(etag).strip('"') if etag else None


def _mtime(info: dict[str, Any]) -> float | None:
    mtime = info.get("mtime")
    return float(mtime) if isinstance(mtime, (int, float)) else None


def skipped_once(roots: list[str], listed: list[pa.Table], skipped: list[pa.Table]) -> pa.Table:
    """The sources' skipped tables as one, each file counted once per root.

    Sources may share a root with different globs (one reads docs/, another web/): a file
    one of them reads is not skipped, and a file all of them skip is reported once, under the
    first source that skipped it. `roots[i]`, `listed[i]` and `skipped[i]` belong to source i."""
    kept = []
    for i, (root, table) in enumerate(zip(roots, skipped, strict=True)):
        same_root = [j for j, other in enumerate(roots) if other == root and j != i]
        seen = [listed[j]["path"] for j in same_root] + [
            skipped[j]["path"] for j in same_root if j < i
        ]
        chunks = [chunk for column in seen for chunk in column.chunks]
        if chunks:
            table = table.filter(pc.invert(pc.is_in(table["path"], pa.concat_arrays(chunks))))
        kept.append(table)
    return pa.concat_tables(kept)


def with_origin(table: pa.Table, name: str, root: str | None = None) -> pa.Table:
    """`table` with the `origin` column: every row from the source called `name` (and, given
    `root`, the `root` column: the uri the source was listed under)."""
    table = table.append_column("origin", pa.repeat(pa.scalar(name, pa.string()), table.num_rows))
    if root is not None:
        table = table.append_column("root", pa.repeat(pa.scalar(root, pa.string()), table.num_rows))
    return table


DIGEST_BATCH = 1 << 16  # rows turned into Python objects at once


def table_digest(table) -> str:
    """xxh3-128 of the JSON list of a table's rows, keys sorted (the input manifest's digest in
    `lineage`); taken a batch at a time, so a million rows are never Python objects at once."""
    h, separator = xxhash.xxh3_128(), ""
    h.update(b"[")
    for batch in table.to_batches(max_chunksize=DIGEST_BATCH):
        if batch.num_rows:
            h.update((separator + json.dumps(batch.to_pylist(), sort_keys=True)[1:-1]).encode())
            separator = ", "
    h.update(b"]")
    return h.hexdigest()

"""Ingest planning: list the input from metadata alone, then cut it into byte-balanced work units.

Contract: listing reads metadata only on S3 (sizes, ETags) and a cheap fingerprint of a
local file (its first and last 64 KiB); units are cut by bytes, content-defined, so a unit's
id and pieces do not depend on the number of workers, and an unchanged object keeps its
unit; `inputs.parquet` and `units.parquet` are the run's record of what it read.
In full: docs/formats.md, "The listing and its work units".
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import xxhash
from fsspec.utils import glob_translate

from pipeline.core.layout import MANIFEST, WORK_DIR, is_version_name
from pipeline.core.storage import Location
from pipeline.ingest.local_listing import head_tail_xxh3, walk_local

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
UNITS_SCHEMA = pa.schema(
    [
        ("unit_id", pa.string()),
        ("path", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("size", pa.int64()),
        ("format", pa.string()),
        ("compression", pa.string()),
        ("etag", pa.string()),
        ("mtime", pa.float64()),
    ]
)

_COMPRESSION_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_FORMAT_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".parquet": "parquet",
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
    `listing`: what lists an object store's root (bench listing feeds synthetic metadata)."""
    include_res, exclude_res = _compile_globs(include), _compile_globs(exclude)
    accepted: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for rel, info, listed_reason in _listing(root, listing):
        size = int(info["size"])
        reason = listed_reason or skip_reason(rel, include_res, exclude_res)
        if reason is not None:
            skipped.append({"path": rel, "size": size, "reason": reason})
            continue
        fmt, compression = detect_format(rel)
        accepted.append(
            {
                "path": rel,
                "size": size,
                "etag": _etag(info),
                "mtime": _mtime(info),
                "format": fmt,
                "compression": compression,
            }
        )
    accepted, skipped = _without_datasets(accepted, skipped, own_output)
    accepted.sort(key=lambda r: r["path"])
    if _is_local_folder(root):
        for row in accepted:
            row["head_tail_xxh3"] = head_tail_xxh3(f"{root.path}/{row['path']}", row["size"])
    skipped.sort(key=lambda r: r["path"])
    return (
        pa.Table.from_pylist(accepted, schema=INPUTS_SCHEMA),
        pa.Table.from_pylist(skipped, schema=SKIPPED_SCHEMA),
    )


def _is_local_folder(root: Location) -> bool:
    return root.is_local and os.path.isdir(root.path)


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
            raise ValueError(f"input {root.uri} is a single object; give its folder or prefix")
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


def _under(rel: str, folder: str) -> bool:
    return folder == "" or rel == folder or rel.startswith(folder + "/")


def _without_datasets(
    accepted: list[dict[str, Any]], skipped: list[dict[str, Any]], own_output: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every file under a pipeline dataset moves to skipped, with that as its reason."""
    rows = accepted + skipped
    folders = dataset_folders(r["path"] for r in rows)
    if not folders and own_output is None:
        return accepted, skipped
    kept, dropped = [], []
    for row in rows:
        if own_output is not None and _under(row["path"], own_output):
            reason = OWN_OUTPUT
        elif any(_under(row["path"], folder) for folder in folders):
            reason = PIPELINE_DATASET
        else:
            (kept if "reason" not in row else dropped).append(row)
            continue
        dropped.append({"path": row["path"], "size": row["size"], "reason": reason})
    return kept, dropped


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


def _version_tag(file: dict[str, Any]) -> str | None:
    """What says an object changed: its ETag, or its mtime and head_tail_xxh3 where the store
    has no ETag."""
    if file.get("etag"):
        return file["etag"]
    if file.get("mtime") is None:
        return None
    fingerprint = file.get("head_tail_xxh3")
    return repr(file["mtime"]) + ("" if fingerprint is None else f":{fingerprint}")


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
    read = {(root, p) for root, t in zip(roots, listed, strict=True) for p in t["path"].to_pylist()}
    seen: set[tuple[str, str]] = set()
    kept = []
    for root, table in zip(roots, skipped, strict=True):
        mask = []
        for path in table["path"].to_pylist():
            mask.append((root, path) not in read and (root, path) not in seen)
            seen.add((root, path))
        kept.append(table.filter(pa.array(mask, pa.bool_())))
    return pa.concat_tables(kept)


def with_origin(table: pa.Table, name: str, root: str | None = None) -> pa.Table:
    """`table` with the `origin` column: every row from the source called `name` (and, given
    `root`, the `root` column: the uri the source was listed under)."""
    table = table.append_column("origin", pa.array([name] * table.num_rows, pa.string()))
    if root is not None:
        table = table.append_column("root", pa.array([root] * table.num_rows, pa.string()))
    return table


# -- work units (pure) -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Piece:
    path: str
    start: int
    end: int
    size: int
    version: str | None  # ETag or mtime: changes when the object does
    format: str
    compression: str
    etag: str | None = None
    mtime: float | None = None

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def is_splittable(fmt: str, compression: str) -> bool:
    """Byte ranges can be read independently: uncompressed JSONL (newlines) and Parquet."""
    return compression == "none" and fmt in ("jsonl", "parquet")


def _pieces(file: dict[str, Any], unit_bytes: int) -> Iterator[_Piece]:
    size = file["size"]
    n = 1
    if size > unit_bytes and is_splittable(file["format"], file["compression"]):
        n = math.ceil(size / unit_bytes)  # equal pieces, each in (unit_bytes/2, unit_bytes]
    bounds = [size * i // n for i in range(n + 1)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        yield _Piece(
            file["path"],
            start,
            end,
            size,
            _version_tag(file),
            file["format"],
            file["compression"],
            file.get("etag"),
            file.get("mtime"),
        )


def _cut_after(piece: _Piece, unit_bytes: int) -> bool:
    """A cut point that depends on the piece alone: its path hash against its share of a unit.

    The chance of a cut after a piece is 2·size/unit_bytes, so, past the half-unit minimum, units
    end after unit_bytes/2 more bytes on average. Because the decision is local, a file added to
    or removed from the listing moves only the unit boundaries next to it (content-defined
    chunking over the file list), and the other units keep their ids: incremental runs reuse them.
    """
    threshold = min(1.0, 2 * piece.nbytes / unit_bytes) * 2.0**64
    return xxhash.xxh3_64_intdigest(f"{piece.path}\x00{piece.start}".encode()) < threshold


def _pack(pieces: Iterable[_Piece], unit_bytes: int) -> Iterator[list[_Piece]]:
    """Pack pieces in path order into units. Each piece of a file larger than unit_bytes is a
    unit alone (split pieces are within (unit_bytes/2, unit_bytes]). Small files are packed: a
    unit ends at a content-defined cut point (_cut_after) once it holds unit_bytes/2, and is
    closed before a file that would take it past 1.5·unit_bytes. Every unit of small files but
    the last is thus within [unit_bytes/2, 1.5·unit_bytes], whatever the mix of file sizes."""
    current: list[_Piece] = []
    current_bytes = 0
    for piece in pieces:
        if piece.size > unit_bytes:
            yield [piece]
            continue
        if current and current_bytes + piece.nbytes > 1.5 * unit_bytes:
            yield current
            current, current_bytes = [], 0
        current.append(piece)
        current_bytes += piece.nbytes
        if current_bytes * 2 >= unit_bytes and _cut_after(piece, unit_bytes):
            yield current
            current, current_bytes = [], 0
    if current:
        yield current


def unit_id(pieces: list[_Piece]) -> str:
    h = xxhash.xxh3_64()
    for p in pieces:
        h.update(f"{p.path}\x00{p.start}\x00{p.end}\x00{p.size}\x00{p.version or ''}\n".encode())
    return h.hexdigest()


def cut_units(inputs: pa.Table, unit_bytes: int) -> pa.Table:
    """Work units of about `unit_bytes` each from an input manifest (pure: sizes only)."""
    if unit_bytes <= 0:
        raise ValueError(f"unit_bytes must be positive, got {unit_bytes}")
    files = sorted(inputs.to_pylist(), key=lambda r: r["path"])
    pieces = (piece for file in files for piece in _pieces(file, unit_bytes))
    rows = []
    for unit in _pack(pieces, unit_bytes):
        uid = unit_id(unit)
        rows += [
            {
                "unit_id": uid,
                "path": p.path,
                "start": p.start,
                "end": p.end,
                "size": p.size,
                "format": p.format,
                "compression": p.compression,
                "etag": p.etag,
                "mtime": p.mtime,
            }
            for p in unit
        ]
    return pa.Table.from_pylist(rows, schema=UNITS_SCHEMA)

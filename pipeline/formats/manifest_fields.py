"""The typed values of the manifest's fields (formats/manifest.py's model): counts and sizes,
numbers, file names, the dataset's and the version's names, splits, the document index's file and
xxh3 digests.

Contract: each type refuses what a reader could not trust (a count outside int64, a bool or a
string for a number, a name that leaves the version folder or breaks core/layout.py's rules) with
a ValueError naming the value, which the model reports as a ManifestError naming the field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

from pipeline.core.layout import MANIFEST, SPLITS, is_dataset_name, is_version_name
from pipeline.formats.documents import INDEX_FILE


def _count(value: Any) -> Any:
    """A count or size: what numpy and Arrow hold in an int64 (readers sum and index with it)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValueError(f"{value!r} must be a non-negative integer below 2**63")
    return value


def _number(value: Any) -> Any:
    """A weight's type (its range is the weight rule's): an int or a float, not a string."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    return value


def _file_name(name: Any) -> Any:
    """A name that stays in the version folder."""
    if (
        not isinstance(name, str)
        or not name
        or any(c in name for c in "/\\\0")
        or name.startswith(".")
        or name == MANIFEST
    ):
        raise ValueError(f"{name!r} is not a file name")
    return name


def _dataset_name(name: Any) -> Any:
    """The dataset's folder name, by the layout's rule (core/layout.py DATASET_NAME_PATTERN)."""
    if not isinstance(name, str) or not is_dataset_name(name):
        raise ValueError(f"{name!r} is not a dataset name (one path part, as config.name)")
    return name


def _version_id(name: Any) -> Any:
    """The version's folder name, by the layout's rule (core/layout.py VERSION_PATTERN)."""
    if not isinstance(name, str) or not is_version_name(name):
        raise ValueError(f"{name!r} is not a version id (one path part, as new_version_id)")
    return name


def _split(name: Any) -> Any:
    if name not in SPLITS:
        raise ValueError(f"{name!r} is not a split ({' or '.join(SPLITS)})")
    return name


def _index_file(name: Any) -> Any:
    """The document index is the version folder's INDEX_FILE, the one file the writer writes."""
    if name != INDEX_FILE:
        raise ValueError(f"{name!r} is not {INDEX_FILE!r} (the version folder's index)")
    return name


def _hex128(value: Any) -> Any:
    if not isinstance(value, str) or not _HEX128.fullmatch(value):
        raise ValueError(f"{value!r} is not an xxh3-128 hex digest")
    return value


def _hex64(value: Any) -> Any:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise ValueError(f"{value!r} is not an xxh3-64 hex digest")
    return value


_HEX128 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{16}")
Count = Annotated[int, BeforeValidator(_count)]
Number = Annotated[float, BeforeValidator(_number)]
FileName = Annotated[str, BeforeValidator(_file_name)]
Hex128 = Annotated[str, BeforeValidator(_hex128)]
Hex64 = Annotated[str, BeforeValidator(_hex64)]
DatasetName = Annotated[str, BeforeValidator(_dataset_name)]
VersionId = Annotated[str, BeforeValidator(_version_id)]
SplitName = Annotated[str, BeforeValidator(_split)]
IndexFile = Annotated[str, BeforeValidator(_index_file)]

"""A dataset's committed versions: which exist, the one a command means, and the part of a
version's manifest that two runs of the same input and config must agree on.

Contract: a version exists exactly when its manifest does (formats/manifest.py writes it last),
so a folder without one is never listed nor resolved; `comparable` leaves out what depends on
where, when or with how many workers a run ran (VARYING_KEYS, the tokenizer's engine).
"""

from __future__ import annotations

from typing import Any

from pipeline.core.layout import MANIFEST, is_version_name
from pipeline.core.storage import Location
from pipeline.formats.manifest import ManifestError

VARYING_KEYS = ("version", "created_at", "run", "lineage")


def committed_versions(dataset: Location) -> list[str]:
    """Version ids under a dataset folder that have a manifest, oldest first."""
    names = [n for n in dataset.ls_names() if is_version_name(n)]
    return [n for n in names if (dataset / n / MANIFEST).exists()]


def resolve_version(uri_loc: Location) -> Location:
    """A version folder as given, or the newest committed version of a dataset folder."""
    if (uri_loc / MANIFEST).exists():
        return uri_loc
    versions = committed_versions(uri_loc)
    if not versions:
        raise ManifestError(f"{uri_loc.uri}: no committed version (no {MANIFEST} found)")
    return uri_loc / versions[-1]


def comparable(manifest: dict[str, Any]) -> dict[str, Any]:
    """The part of a manifest that must not depend on where, when or with how many workers."""
    out = {k: v for k, v in manifest.items() if k not in VARYING_KEYS}
    if isinstance(out.get("tokenizer"), dict):
        out["tokenizer"] = {
            k: v for k, v in out["tokenizer"].items() if k not in ("engine", "engine_reason")
        }
    return out

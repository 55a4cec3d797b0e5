"""Retention planning: what the policy would do now, from listings alone. Changes nothing.

    plan = plan_retention(cfg)        # lists the dataset and every source's root
    print(format_plan(plan))

Ages come from listing metadata (mtime / LastModified), never from reading objects; the storage
class ledger (retention/apply.py writes it) supplies the classes and ages of local files and of
transitioned S3 objects. Every source's distinct root is a raw root (`RawRoot`), and only the files
some run of this dataset listed and read from it are planned (`read_by_origin`), and only as they
were read: same path, size and ETag (local files: mtime and head_tail_xxh3, the hash of their
first and last 64 KiB, read again here), as the run's inputs.parquet lists them. A file changed
since (appended to, rewritten, deleted and re-created), or a local file listed without that hash
(a listing older than the column), is kept and shown in the plan with why (`RawRoot.changed`).
The decisions themselves are retention/decide.py's;
retention/apply.py carries a plan out.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pipeline.core.layout import MANIFEST, WORK_DIR
from pipeline.core.storage import Location
from pipeline.core.units import human_bytes
from pipeline.formats.manifest import ManifestError, load_manifest
from pipeline.ingest.local_listing import head_tail_xxh3
from pipeline.retention.decide import (
    LEDGER_KEY,
    Decision,
    StoredObject,
    classify,
    decide,
    is_raw_root,
    raw_root_name,
)

if TYPE_CHECKING:  # type only: config imports this package's section model
    from pipeline.config.model import Config


@dataclass
class RawRoot:
    """One distinct raw root: the uri of one or more sources (two sources may share a folder and
    differ in their globs). Its files are planned only if a run listed them from one of these
    sources (the `origin` column of the runs' inputs.parquet)."""

    name: str  # "raw", "raw.1", ...: see decide.raw_root_name
    location: Location
    sources: list[str]
    # objects under this root that no run of this dataset read from any source (excluded,
    # hidden, skipped, another source's or dataset's): never planned; a lifecycle rule on this
    # root's prefix would reach them
    foreign: list[str] = field(default_factory=list)
    # of those, the ones a run read but which changed since, or cannot be compared with what
    # was read: key -> "changed since read: ..." | "not comparable: ..."
    changed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadAs:
    """A raw file as a run listed it before reading it: its inputs.parquet row."""

    size: int | None
    etag: str | None  # S3
    mtime: float | None  # local files (no ETag)
    head_tail_xxh3: str | None = None  # local files; None in listings older than the column

    def matches(self, o: StoredObject) -> bool:
        """The object is the one that was read."""
        return self.change(o) is None

    def change(self, o: StoredObject) -> str | None:
        """Why `o` is not verifiably the object that was read; None when it is. An S3 object
        (S3 lists every object with an ETag): size and ETag, by path and size for a record
        without ETag. A local file: size, mtime and head_tail_xxh3; a record without that hash
        never matches (the safe side: a same-size rewrite given back its mtime passes the rest)."""
        if self.size is not None and self.size != o.size:
            return f"changed since read: size {self.size:,} -> {o.size:,}"
        if self.etag and self.etag != o.etag:
            return f"changed since read: ETag {self.etag} -> {o.etag}"
        if self.etag or o.etag is not None:
            return None
        if self.mtime is not None and self.mtime != o.mtime:
            return f"changed since read: mtime {_stamp(self.mtime)} -> {_stamp(o.mtime)}"
        if self.head_tail_xxh3 is None:
            return "not comparable: listed without head_tail_xxh3 (a run before it was recorded)"
        if o.head_tail_xxh3 is None:
            return "not comparable: cannot be read to hash its first and last 64 KiB"
        if self.head_tail_xxh3 != o.head_tail_xxh3:
            return (
                "changed since read: first or last 64 KiB (head_tail_xxh3"
                f" {self.head_tail_xxh3[:12]}… -> {o.head_tail_xxh3[:12]}…)"
            )
        return None


def _stamp(t: float | None) -> str:
    if t is None:
        return "?"
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


@dataclass
class Plan:
    dataset: Location
    raw_roots: list[RawRoot]  # every source's root, the first source's first
    now: float
    grace_days: float
    decisions: list[Decision]

    @property
    def raw(self) -> Location:
        """The first source's root (root name "raw")."""
        return self.raw_roots[0].location

    @property
    def raw_foreign(self) -> list[str]:
        """The first root's foreign objects (RawRoot.foreign)."""
        return self.raw_roots[0].foreign

    def raw_location(self, root: str) -> Location:
        return next(r.location for r in self.raw_roots if r.name == root)

    @property
    def actions(self) -> list[Decision]:
        return [d for d in self.decisions if d.changes]

    def committed_versions(self) -> list[str]:
        """Version ids with a manifest (live or planned for deletion), oldest first."""
        return sorted({d.group for d in self.decisions if d.data_class == "versions"})

    def runs(self) -> list[str]:
        """Run ids with a folder under _work/runs/."""
        return sorted(
            {
                d.obj.key.split("/")[2]
                for d in self.decisions
                if d.obj.root == "dataset"
                and d.obj.key.startswith("_work/runs/")
                and d.obj.key.count("/") >= 3
            }
        )


def dataset_location(cfg: Config) -> Location:
    return Location.from_uri(cfg.output.uri, cfg.storage) / cfg.name


# -- listing ---------------------------------------------------------------------------------
def _mtime(info: dict[str, Any]) -> float:
    value = info.get("mtime", info.get("LastModified"))
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return float(value) if value is not None else 0.0


def _etag(info: dict[str, Any]) -> str | None:
    etag = info.get("ETag") or info.get("etag")
    return str(etag).strip('"') if etag else None


def list_objects(
    root: Location, root_name: str, ledger: dict[str, dict[str, Any]]
) -> list[StoredObject]:
    """Every object under root with size, mtime and storage class (metadata only)."""
    root.fs.invalidate_cache(root.path)  # a stale listing cache would hide recent writes
    base = root.path.rstrip("/")
    try:
        listing = root.find(detail=True)
    except FileNotFoundError:
        listing = {}
    out = []
    for path, info in sorted(listing.items()):
        if info.get("type", "file") != "file":
            continue
        key = path[len(base) + 1 :] if path.startswith(base + "/") else path.rsplit("/", 1)[-1]
        obj = StoredObject(
            root_name,
            key,
            Location(root.fs, path).uri,
            int(info["size"]),
            _mtime(info),
            info.get("StorageClass", "STANDARD"),
            etag=_etag(info),
        )
        out.append(_with_ledger(obj, ledger.get(obj.uri), root.is_local))
    return out


def _with_ledger(obj: StoredObject, entry: dict[str, Any] | None, local: bool) -> StoredObject:
    if not entry or entry.get("size") != obj.size:
        return obj
    if local and entry.get("mtime") == obj.mtime:
        return replace(
            obj,
            storage_class=entry["storage_class"],
            born=entry["born"],
            class_since=entry["since"],
        )
    if not local and entry.get("storage_class") == obj.storage_class:
        return replace(obj, born=entry["born"], class_since=obj.mtime)
    return obj  # rewritten since the ledger saw it


def load_ledger(dataset: Location) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((dataset / LEDGER_KEY).read_bytes())
    except FileNotFoundError:
        return {}
    return dict(data.get("objects", {}))


def _lineage(dataset: Location, objects: list[StoredObject]) -> dict[str, list[str] | None]:
    """Committed version -> the paths its manifest's lineage names (None: unreadable)."""
    versions = sorted(
        {
            classify(o.root, o.key)[1]
            for o in objects
            if o.key.endswith(f"/{MANIFEST}")
            and o.key.count("/") == 1
            and classify(o.root, o.key)[0] == "versions"
        }
    )
    lineage: dict[str, list[str] | None] = {}
    for v in versions:
        try:
            manifest = load_manifest(dataset / v)
        except (ManifestError, OSError, ValueError) as e:
            print(f"warning: retention skips version {v} (kept untouched): {e}", file=sys.stderr)
            lineage[v] = None
            continue
        named = manifest.get("lineage")
        named = named.values() if isinstance(named, dict) else ()
        paths = {x for x in named if isinstance(x, str)}
        # the run's committed.json too: without it a rerun of the same input and config would
        # recompute everything and commit a duplicate version
        for path in list(paths):
            if path.endswith(("/inputs.parquet", "/removed_ids.parquet")):  # a run, a takedown
                paths.add(path.rsplit("/", 1)[0] + "/committed.json")
        lineage[v] = sorted(paths)
    return lineage


# -- plan ------------------------------------------------------------------------------------
def plan_retention(cfg: Config, now: float | None = None) -> Plan:
    """What the policy would do now. Reads listings and manifests only; changes nothing."""
    now = time.time() if now is None else now
    dataset = dataset_location(cfg)
    ledger = load_ledger(dataset)
    objects = list_objects(dataset, "dataset", ledger)
    inside = dataset.uri.rstrip("/") + "/"
    roots = raw_roots(cfg)
    by_origin = read_by_origin(dataset, objects, cfg.sources[0].name, _source_roots(cfg))
    planned: set[str] = set()  # uris: an object under two nested roots is planned once
    listed = []
    for root in roots:
        origins = root.sources if cfg.named_sources else list(by_origin)  # one source: every row
        read: dict[str, list[ReadAs]] = defaultdict(list)
        for origin in origins:
            for path, copies in by_origin.get(origin, {}).items():
                read[path] += copies
        mine = list_objects(root.location, root.name, ledger)
        mine = [o for o in mine if not o.uri.startswith(inside)]
        if root.location.is_local:  # what a local file holds now, where a run read its path
            mine = [with_head_tail(root.location, o) if o.key in read else o for o in mine]
        listed.append(mine)
        for o in mine:
            if o.key not in read or o.uri in planned:
                continue
            if any(r.matches(o) for r in read[o.key]):
                planned.add(o.uri)
                objects.append(o)
            else:  # the newest run's listing of it says what changed
                root.changed[o.key] = read[o.key][-1].change(o) or ""
    for root, mine in zip(roots, listed, strict=True):
        root.foreign = sorted(o.key for o in mine if o.uri not in planned)
    decisions = decide(
        objects, cfg.retention.rules, now, cfg.retention.grace_days, _lineage(dataset, objects)
    )
    return Plan(dataset, roots, now, cfg.retention.grace_days, decisions)


def with_head_tail(root: Location, o: StoredObject) -> StoredObject:
    """`o` with the head_tail_xxh3 of the local file it is now."""
    return replace(o, head_tail_xxh3=head_tail_xxh3((root / o.key).path, o.size))


def raw_roots(cfg: Config) -> list[RawRoot]:
    """The distinct roots of the config's sources, in source order, each with its sources."""
    roots: dict[str, RawRoot] = {}
    for src in cfg.sources:
        loc = Location.from_uri(src.uri, cfg.storage)
        if loc.uri not in roots:
            roots[loc.uri] = RawRoot(raw_root_name(len(roots)), loc, [])
        roots[loc.uri].sources.append(src.name)
    return list(roots.values())


def _source_roots(cfg: Config) -> dict[str, str]:
    return {src.name: Location.from_uri(src.uri, cfg.storage).uri for src in cfg.sources}


def read_by_origin(
    dataset: Location,
    objects: list[StoredObject],
    default: str | None = None,
    roots: dict[str, str] | None = None,
) -> dict[str | None, dict[str, list[ReadAs]]]:
    """Input paths (relative to their source's uri) some run of this dataset listed and read,
    per source, each with how the runs listed it (size, ETag, mtime, head_tail_xxh3; oldest
    input manifest first): the union of the runs' input manifests by their `origin` column. Rows
    of a manifest without the column (older runs: one source) count as `default`'s. Given `roots`
    (source name -> its uri now), a row whose `root` column names another uri is dropped: the
    run read that path under a folder the config no longer points at."""
    read: dict[str | None, dict[str, list[ReadAs]]] = defaultdict(lambda: defaultdict(list))
    for o in sorted(objects, key=lambda o: (o.mtime, o.key)):
        parts = o.key.split("/")
        if (
            o.root == "dataset"
            and parts[:2] == [WORK_DIR, "runs"]
            and parts[3:] == ["inputs.parquet"]
        ):
            try:
                table = (dataset / o.key).read_parquet()
                paths = table["path"].to_pylist()
                if "origin" in table.column_names:
                    origins = table["origin"].to_pylist()
                else:
                    origins = [default] * len(paths)
            except Exception as e:  # noqa: BLE001 - an unreadable record: its files stay
                print(f"warning: retention cannot read {o.key}: {e}", file=sys.stderr)
                continue
            columns = {
                name: table[name].to_pylist() if name in table.column_names else [None] * len(paths)
                for name in ("root", "size", "etag", "mtime", "head_tail_xxh3")
            }
            rows = zip(origins, paths, *columns.values(), strict=True)
            for origin, path, root, size, etag, mtime, head_tail in rows:
                if _listed_under_current_root(origin, root, roots):
                    read[origin][path].append(ReadAs(size, etag, mtime, head_tail))
    return {origin: dict(paths) for origin, paths in read.items()}


def _listed_under_current_root(
    origin: str | None, root: str | None, roots: dict[str, str] | None
) -> bool:
    if roots is None or root is None:  # a record from before roots were kept: as before
        return True
    if origin in roots:
        return roots[origin] == root
    return root in roots.values()


# -- printing --------------------------------------------------------------------------------
def _display_key(d: Decision) -> str:
    return f"{d.obj.root}:{d.obj.key}" if is_raw_root(d.obj.root) else d.obj.key


def plan_rows(plan: Plan, verbose: bool = False) -> list[dict[str, Any]]:
    """Actions grouped per (action, rule, class, target, group): object or common prefix."""
    rows: dict[tuple, list[Decision]] = defaultdict(list)
    for d in plan.actions:
        key = (d.action, d.rule, d.data_class, d.target_class or "", d.group)
        rows[key + ((d.obj.uri,) if verbose else ())].append(d)
    out = []
    for (action, rule, data_class, target, *_), ds in sorted(rows.items()):
        keys = [_display_key(d) for d in ds]
        where = keys[0] if len(keys) == 1 else os.path.commonpath(keys) + "/"
        out.append(
            {
                "action": action + (f"->{target}" if target else ""),
                "rule": rule,
                "data_class": data_class,
                "objects": len(ds),
                "bytes": sum(d.obj.size for d in ds),
                "where": where,
            }
        )
    return out


def format_plan(plan: Plan, verbose: bool = False, applied: bool = False) -> str:
    when = dt.datetime.fromtimestamp(plan.now, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"retention plan for {plan.dataset.uri} at {when} (grace {plan.grace_days:g} d)"
        + ("" if applied else ": dry run, nothing changed (--apply to carry it out)")
    ]
    rows = plan_rows(plan, verbose)
    if rows:
        lines.append(
            f"{'action':<24} {'bytes':>10} {'objects':>7}  {'class':<20} {'rule':<40}"
            " object or prefix"
        )
        lines += [
            f"{r['action']:<24} {human_bytes(r['bytes']):>10} {r['objects']:>7}  "
            f"{r['data_class']:<20} {r['rule']:<40} {r['where']}"
            for r in rows
        ]
    else:
        lines.append("nothing to do")
    if len(plan.raw_roots) > 1:
        lines.append(
            "raw roots: "
            + "; ".join(
                f"{r.name} = {r.location.uri} ({', '.join(r.sources)})" for r in plan.raw_roots
            )
        )
    lines += _changed_lines(plan, verbose)
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for d in plan.decisions:
        kind = "protected" if d.rule == "protected" else d.action
        totals[kind][0] += 1
        totals[kind][1] += d.obj.size
    lines.append(
        "totals: "
        + "; ".join(f"{k} {n} objects {human_bytes(b)}" for k, (n, b) in sorted(totals.items()))
    )
    return "\n".join(lines)


def _changed_lines(plan: Plan, verbose: bool, shown: int = 10) -> list[str]:
    """Raw files a run read that changed since, or cannot be compared with what was read:
    kept, whatever the raw rule says."""
    changed = [(f"{r.name}:{k}", why) for r in plan.raw_roots for k, why in r.changed.items()]
    if not changed:
        return []
    lines = [
        f"kept {len(changed)} raw files a run read that changed since, or that cannot be"
        " compared with what was read:"
    ]
    limit = len(changed) if verbose else shown
    lines += [f"  {key}: {why}" for key, why in changed[:limit]]
    if len(changed) > limit:
        lines.append(f"  ... and {len(changed) - limit} more (--verbose lists them all)")
    return lines

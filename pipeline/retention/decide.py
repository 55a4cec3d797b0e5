"""Retention decisions, pure: a listing, the committed versions' lineage, the rules and a clock in;
one decision per object out (keep, delete, or transition to a colder storage class). No I/O.

Contract: pure (no I/O): the same inputs give the same decisions; a raw object is deleted
only when a committed version's run read exactly it (size and ETag, locally size, mtime and
its head and tail's xxh3); the takedown list is never deleted.
In full: docs/retention.md, "How each object is decided".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pipeline.core import layout
from pipeline.core.layout import AUDIT_DIR, MANIFEST, TAKEDOWNS_DIR, WORK_DIR
from pipeline.retention.policy import INSTANT_ACCESS, ClassRule, RetentionRules, coldness

DAY = 86400.0
LEDGER_KEY = f"{AUDIT_DIR}/storage-classes.json"  # see retention/apply.py
LEASE_KEY = layout.LEASE.template  # see core/lease.py
WORK_KINDS = ("runs", "units", "tokens")
# Classes whose deletion in a units folder invalidates its <unit>.done.json markers.
_READ_OUTPUTS = ("read_docs", "quarantine", "exact_hashes")


RAW_ROOT = "raw"


def raw_root_name(index: int) -> str:
    """The root name of the index-th distinct raw root (sources in config order, sources with the
    same uri sharing one root): "raw" for the first (as before named sources, so audit logs and
    groups keep their names), then "raw.1", "raw.2", ..."""
    return RAW_ROOT if index == 0 else f"{RAW_ROOT}.{index}"


def is_raw_root(root: str) -> bool:
    return root == RAW_ROOT or root.startswith(f"{RAW_ROOT}.")


@dataclass(frozen=True)
class StoredObject:
    # "dataset" (OUTPUT/<name>), or a raw root: "raw" (the first source's uri: `input.uri`, or
    # the first entry of `inputs`), "raw.1", "raw.2", ... (the next distinct source uris, in
    # config order; see raw_root_name). Audit entries carry this name and the object's uri.
    root: str
    key: str  # path relative to its root, '/' separated
    uri: str
    size: int
    mtime: float  # listing metadata (LastModified), epoch seconds
    storage_class: str = "STANDARD"
    born: float | None = None  # first written; survives S3 copy-in-place via the ledger
    class_since: float | None = None  # entered its storage class
    etag: str | None = None  # S3 ETag without quotes; None locally
    # a local raw file some run read: its head_tail_xxh3 (ingest/local_listing.py) when planned
    head_tail_xxh3: str | None = None

    @property
    def first_written(self) -> float:
        return self.mtime if self.born is None else self.born

    @property
    def in_class_since(self) -> float:
        return self.mtime if self.class_since is None else self.class_since


@dataclass(frozen=True)
class Decision:
    obj: StoredObject
    data_class: str
    action: str  # "keep" | "delete" | "transition"
    rule: str  # the rule (or protection) that decided, e.g. "token_parts.delete_after_days=14"
    reason: str
    group: str  # objects deleted together share a group
    target_class: str | None = None  # for transitions

    @property
    def changes(self) -> bool:
        return self.action != "keep"


def classify(root: str, key: str) -> tuple[str, str]:
    """(data class, deletion group) of an object; versions are split into committed or not later.
    The class of a dataset object is the one core/layout.py declares for its path."""
    if is_raw_root(root):
        return "raw", f"{root}:{key}"  # one group per object; "raw:<key>" under the first root
    data_class = layout.data_class(key)
    if key.startswith(f"{WORK_DIR}/"):
        folder = work_folder(key)
        return data_class, key if folder is None else f"{folder}#{data_class}"
    if data_class == "versions":
        return data_class, key.split("/", 1)[0]
    return data_class, key


def work_folder(key: str) -> str | None:
    """The unit of deletion a work file belongs to: its run folder `_work/runs/<run>`, or one
    unit's files in `_work/units/<read_key>/<unit>` / `_work/tokens/<token_key>/<unit>-<removed>`
    (those folders are shared by runs: their units come and go one by one)."""
    parts = key.split("/")
    if parts[0] != WORK_DIR or len(parts) < 4 or parts[1] not in WORK_KINDS:
        return None
    if parts[1] == "runs":
        return "/".join(parts[:3])
    return "/".join(parts[:3] + [parts[3].split(".", 1)[0]])


def is_read_marker(key: str) -> bool:
    return layout.is_path(layout.READ_DONE, key)


def deletion_order(key: str) -> int:
    """Version manifests and resume markers are deleted before what they vouch for."""
    if key.rsplit("/", 1)[-1] == MANIFEST or is_read_marker(key):
        return 0
    if layout.is_path(layout.TOKENS_INDEX, key):
        return 0  # tokens/<key>/<unit>-<removed>.parquet marks its .bin complete
    return 1


def _age_days(now: float, when: float) -> float:
    return (now - when) / DAY


def decide(
    objects: Iterable[StoredObject],
    rules: RetentionRules,
    now: float,
    grace_days: float,
    lineage: dict[str, list[str] | None],
) -> list[Decision]:
    """One decision per object. `lineage`: committed version id -> lineage keys of its manifest
    (relative to the dataset folder), or None when the manifest could not be read."""
    objects = list(objects)
    placed = {o.uri: classify(o.root, o.key) for o in objects}
    groups: dict[str, list[StoredObject]] = defaultdict(list)
    for o in objects:
        groups[placed[o.uri][1]].append(o)
    last_write = {g: max(o.mtime for o in members) for g, members in groups.items()}
    born = {g: max(o.first_written for o in members) for g, members in groups.items()}
    grace_s = grace_days * DAY

    version_ids = sorted({g for c, g in placed.values() if c == "versions"})
    manifests = {v for v in version_ids if any(o.key == f"{v}/{MANIFEST}" for o in groups[v])}
    readable = [v for v in version_ids if v in manifests and lineage.get(v) is not None]
    doomed = _doomed_versions(readable, rules.versions, now, born)
    protected = {LEDGER_KEY: "storage-class ledger", LEASE_KEY: "the lease of the dataset"}
    for v in (v for v in readable if v not in doomed):
        protected.update((o.key, f"live version {v}") for o in groups[v])
        for path in lineage.get(v) or ():
            protected.setdefault(path, f"lineage of live version {v}")
    pending = {
        v
        for v in version_ids
        if v not in manifests
        and (not readable or v > readable[-1] or now - last_write[v] < grace_s)
    }
    busy = any(
        o.root == "dataset" and o.key == LEASE_KEY and now - o.mtime < grace_s for o in objects
    )

    decisions = []
    for o in objects:
        data_class, group = placed[o.uri]
        if data_class == "versions" and group not in manifests:
            data_class = "uncommitted_versions"
        if data_class == "other":
            why = ("unknown", "not a known data class: never touched")
        elif o.root == "dataset" and o.key in protected:
            why = ("protected", protected[o.key])
        elif o.root == "dataset" and o.key.startswith(f"{AUDIT_DIR}/"):
            why = ("protected", "audit log: append-only, never a retention target")
        elif o.root == "dataset" and o.key.startswith(f"{TAKEDOWNS_DIR}/"):
            why = ("protected", "takedown list: append-only, never a retention target")
        elif group in manifests and group not in readable:
            why = ("protected", "committed version whose manifest cannot be read")
        elif group in pending:
            why = (
                "protected",
                "version being committed (newer than the newest committed,"
                " or written within the grace period)",
            )
        elif busy and o.root == "dataset" and o.key.startswith(f"{WORK_DIR}/"):
            why = ("protected", "a run holds the lease (renewed within the grace period)")
        else:
            why = None
        if why is not None:
            kept = Decision(o, data_class, "keep", *why, group)
            # Kept files of live versions may still move colder; in-flight work never moves.
            movable = (
                o.root == "dataset"
                and o.key in protected
                and o.key
                not in (
                    LEDGER_KEY,
                    LEASE_KEY,
                )
            )
            decisions.append(
                _transition_or_keep(kept, rules.for_class(data_class), now, instant_only=True)
                if movable
                else kept
            )
        else:
            decisions.append(
                _apply_rule(
                    o,
                    data_class,
                    group,
                    rules.for_class(data_class),
                    now,
                    doomed,
                    _age_days(now, born[group]),
                )
            )
    return _markers_follow_data(decisions)


def _doomed_versions(
    readable: list[str], rule: ClassRule, now: float, born: dict[str, float]
) -> dict[str, str]:
    """Committed versions the versions rule deletes -> the rule text; never the newest."""
    if not rule.deletes:
        return {}
    keep = rule.keep_newest or 1
    days = rule.delete_after_days
    doomed = {}
    for v in readable[:-keep] if len(readable) > keep else []:
        if days is None:
            doomed[v] = f"versions.keep_newest={keep}"
        elif _age_days(now, born[v]) >= days:
            doomed[v] = f"versions.keep_newest={keep},delete_after_days={days:g}"
    return doomed


def _apply_rule(
    o: StoredObject,
    data_class: str,
    group: str,
    rule: ClassRule,
    now: float,
    doomed: dict[str, str],
    group_age: float,
) -> Decision:
    if data_class == "versions" and group in doomed:
        return Decision(
            o,
            data_class,
            "delete",
            doomed[group],
            f"older than the newest kept versions, {group_age:.1f} d old",
            group,
        )
    days = rule.delete_after_days
    if data_class != "versions" and days is not None and group_age >= days:
        return Decision(
            o,
            data_class,
            "delete",
            f"{data_class}.delete_after_days={days:g}",
            f"last written {group_age:.1f} d ago",
            group,
        )
    if days is not None:
        kept = Decision(
            o,
            data_class,
            "keep",
            f"{data_class}.delete_after_days={days:g}",
            f"last written {group_age:.1f} d ago: not due",
            group,
        )
    elif rule.keep_newest:
        kept = Decision(
            o,
            data_class,
            "keep",
            f"versions.keep_newest={rule.keep_newest}",
            "among the newest versions",
            group,
        )
    else:
        kept = Decision(o, data_class, "keep", f"{data_class}.keep_forever", "kept forever", group)
    return _transition_or_keep(kept, rule, now, instant_only=False)


def _transition_or_keep(
    kept: Decision, rule: ClassRule, now: float, instant_only: bool
) -> Decision:
    """Move to the coldest transition due by age; files of live versions only to classes that
    can be read without a restore."""
    o = kept.obj
    age = _age_days(now, o.first_written)
    due = [(i, t) for i, t in enumerate(rule.transitions) if age >= t.after_days]
    allowed = [(i, t) for i, t in due if not instant_only or t.storage_class in INSTANT_ACCESS]
    note = ""
    if len(allowed) < len(due):
        note = f"; not to {due[-1][1].storage_class}: live, readers would need a restore"
    if not allowed or coldness(allowed[-1][1].storage_class) <= coldness(o.storage_class):
        return replace(kept, reason=kept.reason + note)  # nothing due, or already there
    i, t = allowed[-1]
    return replace(
        kept,
        action="transition",
        target_class=t.storage_class,
        rule=f"{kept.data_class}.transitions[{i}]",
        reason=f"{age:.1f} d old >= {t.after_days:g} d{note}",
    )


def _markers_follow_data(decisions: list[Decision]) -> list[Decision]:
    folders = {
        work_folder(d.obj.key)
        for d in decisions
        if d.action == "delete" and d.data_class in _READ_OUTPUTS and d.obj.root == "dataset"
    }
    out = []
    for d in decisions:
        if (
            d.action != "delete"
            and d.rule != "protected"
            and is_read_marker(d.obj.key)
            and work_folder(d.obj.key) in folders
        ):
            d = Decision(
                d.obj,
                d.data_class,
                "delete",
                "marker-follows-data",
                "the unit's read outputs are deleted: it must be read again",
                d.group,
            )
        out.append(d)
    return out

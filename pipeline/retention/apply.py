"""Retention: apply a plan (retention/plan.py) with an audit log.

    plan = plan_retention(cfg)        # retention/plan.py: lists, decides; changes nothing
    audit = apply_plan(plan, cfg)     # deletes / moves exactly the plan's objects; logs each one

Applying takes the dataset's lease (core/lease.py) when it touches `_work/` (if a run holds it,
those actions are skipped and logged), re-lists, and acts only on objects still as planned (same
size, mtime and ETag; a local raw file also the same head_tail_xxh3); an object already gone or
already in the target class is skipped silently, so applying a plan twice, or planning again
after applying, changes nothing and writes no second audit log.

Storage classes. On S3 a transition is a copy of the object onto itself with a new StorageClass
(one COPY; S3 gives it a new LastModified). Local files have no storage class: the class the
policy gives them is recorded in a ledger and reported as if it were real. The ledger,
`_audit/storage-classes.json` (atomic JSON), keeps per transitioned object its class, when it was
first written (`born`, so that a copy does not make an S3 object young again) and when it entered
the class (`since`, for minimum-duration charges); an entry whose object has since been rewritten
no longer matches and is ignored. Audit logs: `_audit/retention-<UTC time>.jsonl`, one JSON
object per action (time, action, uri, bytes, data class, storage classes, rule, reason, status).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import time
from typing import TYPE_CHECKING, Any

from pipeline.core.layout import AUDIT_DIR, WORK_DIR, utc_stamp
from pipeline.core.lease import LeaseHeld, held
from pipeline.core.storage import Location
from pipeline.retention.decide import (
    LEASE_KEY,
    LEDGER_KEY,
    Decision,
    deletion_order,
    is_raw_root,
)
from pipeline.retention.plan import Plan, list_objects, load_ledger, with_head_tail

if TYPE_CHECKING:  # type only: config imports this package's section model
    from pipeline.config.model import Config

LEDGER_FORMAT = "pipeline.core.storage-classes/1"
LEASE_RENEW_S = 60.0  # the lease (core/lease.py) expires after 900 s unless renewed


def _write_ledger(dataset: Location, ledger: dict[str, dict[str, Any]]) -> None:
    data = {"format": LEDGER_FORMAT, "objects": dict(sorted(ledger.items()))}
    (dataset / LEDGER_KEY).write_bytes(json.dumps(data, indent=1).encode())


# -- apply -----------------------------------------------------------------------------------
def apply_plan(plan: Plan, cfg: Config) -> list[dict[str, Any]]:
    """Carry out the plan's deletes and transitions; returns (and logs) the audit entries."""
    actions = plan.actions
    if not actions:
        return []
    audit: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        lease = None
        if any(_is_work(d) for d in actions):
            try:  # no run may start while work files go: it could be about to reuse them
                lease = stack.enter_context(held(plan.dataset / LEASE_KEY, "retention"))
            except LeaseHeld as e:
                audit += [_entry(d, f"skipped: {e}") for d in actions if _is_work(d)]
                actions = [d for d in actions if not _is_work(d)]
        ledger = load_ledger(plan.dataset)
        try:
            _apply(plan, _still_as_planned(plan, actions, ledger, audit), ledger, audit, lease)
        finally:
            if audit:
                _write_ledger(plan.dataset, ledger)
                log = plan.dataset / f"{AUDIT_DIR}/retention-{utc_stamp()}.jsonl"
                log.write_bytes(
                    "".join(json.dumps(e, sort_keys=True) + "\n" for e in audit).encode()
                )
    return audit


def _is_work(d: Decision) -> bool:
    return d.obj.root == "dataset" and d.obj.key.startswith(f"{WORK_DIR}/")


def _still_as_planned(
    plan: Plan, actions: list[Decision], ledger: dict, audit: list[dict[str, Any]]
) -> list[Decision]:
    """The actions whose object is still as listed when planning (a fresh listing)."""
    current = {o.uri: o for o in list_objects(plan.dataset, "dataset", ledger)}
    for root in plan.raw_roots:
        if any(d.obj.root == root.name for d in actions):
            current.update((o.uri, o) for o in list_objects(root.location, root.name, ledger))
    todo = []
    for d in actions:
        now_obj = current.get(d.obj.uri)
        if now_obj is None or (
            d.action == "transition" and now_obj.storage_class == d.target_class
        ):
            continue  # already done
        if d.obj.head_tail_xxh3 is not None:  # a local raw file: a same-size rewrite, too
            now_obj = with_head_tail(_root(plan, d), now_obj)
        if (now_obj.size, now_obj.mtime, now_obj.etag, now_obj.head_tail_xxh3) != (
            d.obj.size,
            d.obj.mtime,
            d.obj.etag,
            d.obj.head_tail_xxh3,
        ):
            audit.append(_entry(d, "skipped: changed since the plan was made"))
            continue
        todo.append(d)
    return todo


def _apply(
    plan: Plan, todo: list[Decision], ledger: dict, audit: list[dict[str, Any]], lease: Any
) -> None:
    renewed = time.monotonic()
    deletes = sorted(
        (d for d in todo if d.action == "delete"),
        key=lambda d: (deletion_order(d.obj.key), d.obj.root, d.obj.key),
    )
    for d in deletes:
        if lease is not None and time.monotonic() - renewed > LEASE_RENEW_S:
            lease.renew()
            renewed = time.monotonic()
        (_root(plan, d) / d.obj.key).remove()
        ledger.pop(d.obj.uri, None)
        audit.append(_entry(d, "done"))
    _prune_empty_dirs(plan.dataset, [d for d in deletes if d.obj.root == "dataset"])
    for d in (d for d in todo if d.action == "transition"):
        audit.append(_transition(plan, d, ledger))


def _root(plan: Plan, d: Decision) -> Location:
    return plan.raw_location(d.obj.root) if is_raw_root(d.obj.root) else plan.dataset


def _transition(plan: Plan, d: Decision, ledger: dict[str, dict[str, Any]]) -> dict[str, Any]:
    loc = _root(plan, d) / d.obj.key
    try:
        if not loc.is_local:
            loc.copy_in_place(StorageClass=d.target_class)
    except Exception as e:  # e.g. an archived source needs a restore: log it, go on
        return _entry(d, f"failed: {type(e).__name__}: {e}")
    ledger[d.obj.uri] = {
        "storage_class": d.target_class,
        "born": d.obj.first_written,
        "since": time.time(),
        "size": d.obj.size,
        "mtime": d.obj.mtime,
    }
    return _entry(d, "done")


def _entry(d: Decision, status: str) -> dict[str, Any]:
    return {
        "time": dt.datetime.now(dt.timezone.utc).isoformat(),
        "action": d.action,
        "uri": d.obj.uri,
        "root": d.obj.root,
        "key": d.obj.key,
        "bytes": d.obj.size,
        "data_class": d.data_class,
        "storage_class": d.obj.storage_class,
        "target_class": d.target_class,
        "rule": d.rule,
        "reason": d.reason,
        "status": status,
    }


def _prune_empty_dirs(dataset: Location, deleted: list[Decision]) -> None:
    """Locally, drop folders the deletes emptied (a bare version folder would look in progress)."""
    if not dataset.is_local:
        return
    base = dataset.path.rstrip("/")
    folders = {os.path.dirname(f"{base}/{d.obj.key}") for d in deleted}
    for folder in sorted(folders, key=len, reverse=True):
        while folder.startswith(base + "/"):
            try:
                os.rmdir(folder)
            except OSError:
                break  # not empty (or gone)
            folder = os.path.dirname(folder)

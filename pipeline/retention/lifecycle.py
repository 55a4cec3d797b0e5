"""The retention policy as S3 bucket lifecycle rules, where a lifecycle rule can say the same thing.

A lifecycle rule selects objects by key prefix (and tags) and acts on each object's own age. So it
can express a class that owns whole prefixes (raw inputs, one rule per distinct source root, when
nothing but the files read lies under its prefix: see raw_prefix_problem; `_reports/`;
`_work/tokens/`; a run's `near/` folder; a version folder's transitions), and cannot express
anything that needs to look at other objects: keep-newest-K versions, "uncommitted" (no
manifest.json beside it), lineage protection, "a run is in progress", or marker-follows-data (S3 may
expire a token file up to a day before its .parquet marker, which was written after it). Those are
listed under `not_expressible`; run `retain --apply` (e.g. daily) for them. Prefixes of runs and
versions are those that exist now: export again after new runs. The raw rule also filters by the tag
`pipeline-read/<dataset>` = `true` (retention/tagging.py), which `retain --tag-read` puts on the
objects the runs read, as they were read: an object added under the prefix later, or rewritten
since, carries no tag and is never expired by it. Output (JSON):

    {"buckets": {"<bucket>": {"Rules": [...]}},     # each value is a ready
     "not_expressible": [{"class", "rule", "reason"}],  # put-bucket-lifecycle-configuration body
     "notes": [...]}
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.retention.plan import Plan
from pipeline.retention.policy import INSTANT_ACCESS, ClassRule, RetentionRules
from pipeline.retention.tagging import read_tag

# S3 refuses transitions to these classes earlier than this many days after creation.
MIN_TRANSITION_DAYS = {"STANDARD_IA": 30}
ABORT_UPLOADS_DAYS = 7


def _split(path: str, local: bool) -> tuple[str, str]:
    path = path.strip("/")
    if local:
        return "(local)", path + "/"
    bucket, _, prefix = path.partition("/")
    return bucket, (prefix + "/" if prefix else "")


def export_lifecycle(plan: Plan, rules: RetentionRules) -> dict[str, Any]:
    out = _Export(plan)
    raw_exported = out.raw(plan, rules.raw)
    out.add(out.bucket, "reports", out.ds + "_reports/", rules.reports, expire=True)
    out.add(out.bucket, "token_parts", out.ds + "_work/tokens/", rules.token_parts, expire=True)
    for run in plan.runs():
        prefix = f"{out.ds}_work/runs/{run}/near/"
        out.add(out.bucket, "near_dedup", prefix, rules.near_dedup, expire=True)
    out.versions(plan, rules.versions)
    for data_class, reason in _SHARED_PREFIXES:
        rule = rules.for_class(data_class)
        if rule.deletes or (rule.transitions and data_class != "reports"):
            out.refuse(data_class, rule, reason)
    out.abort_incomplete_uploads()
    notes = [
        f"prefixes of runs and versions are those present at export: {len(plan.runs())}"
        f" runs, {len(plan.committed_versions())} committed versions; export again after"
        " new runs",
        "S3 counts days from each object's creation and acts at the next"
        " midnight UTC; fractional days are rounded up",
    ]
    if raw_exported:
        tag = read_tag(plan.dataset.name)
        notes.append(
            f"the raw rule expires only objects tagged {tag['Key']}={tag['Value']}: run"
            " `retain --tag-read` after each run to tag what it read; objects added or"
            " rewritten under the prefix later carry no tag and are not expired"
        )
    return {
        "buckets": {b: {"Rules": r} for b, r in out.buckets.items() if r},
        "not_expressible": out.missing,
        "notes": notes,
    }


def rule_prefix(rule: dict[str, Any]) -> str:
    """The key prefix an exported rule selects (the raw rule's sits beside its tag, in And)."""
    selects = rule["Filter"]
    return selects.get("And", selects)["Prefix"]


# Classes whose objects share a prefix with others: no prefix rule can act on them alone.
_SHARED_PREFIXES = (
    ("read_docs", "shares _work/units/<key>/ with quarantine, hashes and done markers"),
    ("exact_hashes", "shares _work/units/<key>/ with the documents and done markers"),
    ("work_state", "lies beside other classes in the run folders; holds lineage files"),
    ("quarantine", "lies beside other classes; the merged listing is lineage"),
    ("uncommitted_versions", "'no manifest.json in the folder' is not a prefix"),
    ("reports", "_audit/ holds the storage-class ledger, which must outlive the rest"),
)


class _Export:
    """The rules per bucket and the policy parts S3 cannot express, gathered class by class."""

    def __init__(self, plan: Plan) -> None:
        self.bucket, self.ds = _split(plan.dataset.path, plan.dataset.is_local)
        self.buckets: dict[str, list[dict]] = {self.bucket: []}
        self.missing: list[dict[str, str]] = []

    def refuse(self, data_class: str, rule: ClassRule, reason: str) -> None:
        self.missing.append({"class": data_class, "rule": _describe(rule), "reason": reason})

    def add(
        self,
        where: str,
        data_class: str,
        prefix: str,
        rule: ClassRule,
        expire: bool,
        tag: dict[str, str] | None = None,
    ) -> bool:
        body, problem = _rule_body(rule, expire)
        if problem:
            self.refuse(data_class, rule, problem)
        elif body:
            ident = f"{data_class}:{prefix}"[-255:]
            selects = {"And": {"Prefix": prefix, "Tags": [tag]}} if tag else {"Prefix": prefix}
            self.buckets.setdefault(where, []).append(
                {"ID": ident, "Filter": selects, "Status": "Enabled", **body}
            )
        return bool(body) and not problem

    def raw(self, plan: Plan, rule: ClassRule) -> bool:
        """One rule per distinct raw root (sources sharing a uri share it), each refused on its
        own when its prefix would reach more than the files read, and each limited to the
        objects tagged as read (tagging.read_tag). True if any was exported."""
        tag = read_tag(plan.dataset.name)
        exported = False
        for root in plan.raw_roots:
            raw_bucket, raw_prefix = _split(root.location.path, root.location.is_local)
            refused = raw_prefix_problem(
                plan, self.bucket, self.ds, raw_bucket, raw_prefix, root.foreign
            )
            if refused and (rule.deletes or rule.transitions):
                self.refuse("raw", rule, refused)
            else:
                exported |= self.add(raw_bucket, "raw", raw_prefix, rule, expire=True, tag=tag)
        return exported

    def versions(self, plan: Plan, rule: ClassRule) -> None:
        if rule.deletes:
            reason = "keep the newest K versions: S3 rules see one object at a time"
            self.refuse("versions", rule, reason)
        if any(t.storage_class not in INSTANT_ACCESS for t in rule.transitions):
            self.refuse("versions", rule, "live versions must stay readable without a restore")
        elif rule.transitions:
            _, problem = _rule_body(rule, expire=False)
            if problem:
                self.refuse("versions", rule, problem)
                return
            for v in plan.committed_versions():
                self.add(self.bucket, "versions", f"{self.ds}{v}/", rule, expire=False)

    def abort_incomplete_uploads(self) -> None:
        self.buckets[self.bucket].append(
            {
                "ID": f"abort-incomplete-uploads:{self.ds}"[-255:],
                "Filter": {"Prefix": self.ds},
                "Status": "Enabled",
                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_UPLOADS_DAYS},
            }
        )


def raw_prefix_problem(
    plan: Plan,
    bucket: str,
    ds: str,
    raw_bucket: str,
    raw: str,
    foreign: list[str] | None = None,
) -> str | None:
    """Why a rule on a raw prefix would reach more than the files this dataset read, or None.
    `foreign`: the objects under that prefix no run read (default: the first root's).

    A prefix rule acts on every object under it; the raw rule may act only on files a run of
    this dataset listed and read (plan.read_by_origin), so it is exported only when nothing
    else lies under the prefix: not the whole bucket, not this dataset's folder (live versions,
    lease, ledger), and no object the runs did not read (excluded, hidden, another dataset's)."""
    if not raw:
        return f"the raw prefix is the root of bucket {raw_bucket}: a rule would cover it all"
    if bucket == raw_bucket and ds.startswith(raw):
        return (
            f"prefix {raw!r} covers this dataset's folder {ds!r} (its live versions, lease and"
            " ledger)"
        )
    foreign = plan.raw_foreign if foreign is None else foreign
    if foreign:
        shown = ", ".join(foreign[:3])
        return (
            f"prefix {raw!r} also covers {len(foreign)} objects no run of this dataset"
            f" read (e.g. {shown}); run `retain --apply` for the raw rule instead"
        )
    return None


def _rule_body(rule: ClassRule, expire: bool) -> tuple[dict[str, Any], str | None]:
    body: dict[str, Any] = {}
    transitions = [
        {"Days": math.ceil(t.after_days), "StorageClass": t.storage_class} for t in rule.transitions
    ]
    for t in transitions:
        if t["Days"] < MIN_TRANSITION_DAYS.get(t["StorageClass"], 0):
            return {}, (
                f"S3 moves objects to {t['StorageClass']} no earlier than"
                f" {MIN_TRANSITION_DAYS[t['StorageClass']]} days"
            )
    if transitions:
        body["Transitions"] = transitions
    if expire and rule.delete_after_days is not None:
        days = max(1, math.ceil(rule.delete_after_days))
        if transitions and days <= transitions[-1]["Days"]:
            transitions[:] = [t for t in transitions if t["Days"] < days]
            if not transitions:
                body.pop("Transitions")
        body["Expiration"] = {"Days": days}
    return body, None


def _describe(rule: ClassRule) -> str:
    return rule.model_dump_json(exclude_defaults=True)

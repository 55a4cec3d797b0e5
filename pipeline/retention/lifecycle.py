"""The retention policy as S3 bucket lifecycle rules, where a lifecycle rule can say the same thing.

A lifecycle rule selects objects by key prefix and acts on each object's own age. So it can express
a class that owns whole prefixes (raw inputs, when nothing but the files read lies under their
prefix: see raw_prefix_problem; `_reports/`; `_work/tokens/`; a run's `near/`
folder; a version folder's transitions), and cannot express anything that needs to look at other
objects: keep-newest-K versions, "uncommitted" (no manifest.json beside it), lineage protection,
"a run is in progress", or marker-follows-data (S3 may expire a token file up to a day before
its .parquet marker, which was written after it). Those are listed under `not_expressible`; run
`retain --apply` (e.g. daily) for them. Prefixes of runs and versions are those that exist now:
export again after new runs. Output (JSON):

    {"buckets": {"<bucket>": {"Rules": [...]}},     # each value is a ready
     "not_expressible": [{"class", "rule", "reason"}],  # put-bucket-lifecycle-configuration body
     "notes": [...]}
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.retention.apply import Plan
from pipeline.retention.policy import INSTANT_ACCESS, ClassRule, RetentionRules

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
    bucket, ds = _split(plan.dataset.path, plan.dataset.is_local)
    raw_bucket, raw = _split(plan.raw.path, plan.raw.is_local)
    buckets: dict[str, list[dict]] = {bucket: [], raw_bucket: []}
    missing: list[dict[str, str]] = []
    notes = [
        f"prefixes of runs and versions are those present at export: {len(plan.runs())}"
        f" runs, {len(plan.committed_versions())} committed versions; export again after"
        " new runs",
        "S3 counts days from each object's creation and acts at the next"
        " midnight UTC; fractional days are rounded up",
    ]

    def add(where: str, data_class: str, prefix: str, rule: ClassRule, expire: bool) -> None:
        body, problem = _rule_body(rule, expire)
        if problem:
            missing.append({"class": data_class, "rule": _describe(rule), "reason": problem})
        elif body:
            ident = f"{data_class}:{prefix}"[-255:]
            buckets[where].append(
                {"ID": ident, "Filter": {"Prefix": prefix}, "Status": "Enabled", **body}
            )

    refused = raw_prefix_problem(plan, bucket, ds, raw_bucket, raw)
    if refused and (rules.raw.deletes or rules.raw.transitions):
        missing.append({"class": "raw", "rule": _describe(rules.raw), "reason": refused})
    else:
        add(raw_bucket, "raw", raw, rules.raw, expire=True)
    add(bucket, "reports", ds + "_reports/", rules.reports, expire=True)
    add(bucket, "token_parts", ds + "_work/tokens/", rules.token_parts, expire=True)
    for run in plan.runs():
        add(bucket, "near_dedup", f"{ds}_work/runs/{run}/near/", rules.near_dedup, expire=True)
    if rules.versions.deletes:
        missing.append(
            {
                "class": "versions",
                "rule": _describe(rules.versions),
                "reason": "keep the newest K versions: S3 rules see one object at a time",
            }
        )
    if any(t.storage_class not in INSTANT_ACCESS for t in rules.versions.transitions):
        missing.append(
            {
                "class": "versions",
                "rule": _describe(rules.versions),
                "reason": "live versions must stay readable without a restore",
            }
        )
    elif rules.versions.transitions:
        body, problem = _rule_body(rules.versions, expire=False)
        if problem:
            missing.append(
                {"class": "versions", "rule": _describe(rules.versions), "reason": problem}
            )
        for v in [] if problem else plan.committed_versions():
            add(bucket, "versions", f"{ds}{v}/", rules.versions, expire=False)
    for data_class, reason in (
        ("read_docs", "shares _work/units/<key>/ with quarantine, hashes and done markers"),
        ("exact_hashes", "shares _work/units/<key>/ with the documents and done markers"),
        ("work_state", "lies beside other classes in the run folders; holds lineage files"),
        ("quarantine", "lies beside other classes; the merged listing is lineage"),
        ("uncommitted_versions", "'no manifest.json in the folder' is not a prefix"),
        ("reports", "_audit/ holds the storage-class ledger, which must outlive the rest"),
    ):
        rule = rules.for_class(data_class)
        if rule.deletes or (rule.transitions and data_class != "reports"):
            missing.append({"class": data_class, "rule": _describe(rule), "reason": reason})
    buckets[bucket].append(
        {
            "ID": f"abort-incomplete-uploads:{ds}"[-255:],
            "Filter": {"Prefix": ds},
            "Status": "Enabled",
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_UPLOADS_DAYS},
        }
    )
    return {
        "buckets": {b: {"Rules": r} for b, r in buckets.items() if r},
        "not_expressible": missing,
        "notes": notes,
    }


def raw_prefix_problem(plan: Plan, bucket: str, ds: str, raw_bucket: str, raw: str) -> str | None:
    """Why a rule on the raw prefix would reach more than the files this dataset read, or None.

    A prefix rule acts on every object under it; the raw rule may act only on files a run of
    this dataset listed and read (retention.read_inputs), so it is exported only when nothing
    else lies under the prefix: not the whole bucket, not this dataset's folder (live versions,
    lease, ledger), and no object the runs did not read (excluded, hidden, another dataset's)."""
    if not raw:
        return f"the raw prefix is the root of bucket {raw_bucket}: a rule would cover it all"
    if bucket == raw_bucket and ds.startswith(raw):
        return (
            f"prefix {raw!r} covers this dataset's folder {ds!r} (its live versions, lease and"
            " ledger)"
        )
    if plan.raw_foreign:
        shown = ", ".join(plan.raw_foreign[:3])
        return (
            f"prefix {raw!r} also covers {len(plan.raw_foreign)} objects no run of this dataset"
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

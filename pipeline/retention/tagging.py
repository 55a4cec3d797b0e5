"""Tag the raw objects this dataset read, as they were read, so that the exported raw lifecycle
rule (retention/lifecycle.py) acts on them and on nothing added or rewritten later.

    result = tag_read(plan)        # `retain --tag-read`

The tag is `pipeline-read/<dataset name>` = `true` (`read_tag`): one key per dataset, so datasets
reading the same object keep each other's tag; the object's other tags are kept too. Only the
objects the plan holds as read are tagged: listed by a run of this dataset, with the size and ETag
that run listed (plan.ReadAs). S3 keeps tags with the object they were put on; an overwrite
(an append, a rewrite, a delete and re-create) is a new object without them, so a rule filtered by
the tag never reaches an object the runs did not read. An object replaced between the plan's
listing and the tag is caught by reading its ETag again after tagging, and its tag taken off.
Local files have no tags (and no lifecycle rules): they are counted and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.retention.decide import is_raw_root
from pipeline.retention.plan import Plan

READ_TAG_PREFIX = "pipeline-read/"
READ_TAG_VALUE = "true"


def read_tag(dataset_name: str) -> dict[str, str]:
    """The tag, as a lifecycle rule's filter names it ({"Key", "Value"})."""
    return {"Key": f"{READ_TAG_PREFIX}{dataset_name}", "Value": READ_TAG_VALUE}


@dataclass
class TagResult:
    tagged: int = 0  # tag put now
    already: int = 0  # carried the tag already
    local: int = 0  # local files: no tags
    replaced: list[str] = field(default_factory=list)  # uris replaced while being tagged: untagged


def tag_read(plan: Plan) -> TagResult:
    """Put the read tag on every raw object the plan holds as read (kept or not)."""
    key = read_tag(plan.dataset.name)["Key"]
    result = TagResult()
    for d in plan.decisions:
        if not is_raw_root(d.obj.root):
            continue
        loc = plan.raw_location(d.obj.root) / d.obj.key
        if loc.is_local:
            result.local += 1
            continue
        tags = loc.get_tags()
        if tags.get(key) == READ_TAG_VALUE:
            result.already += 1
            continue
        loc.put_tags({**tags, key: READ_TAG_VALUE})
        if loc.etag() == d.obj.etag:
            result.tagged += 1
            continue
        tags = loc.get_tags()  # another object now: it was not read, so it loses our tag
        tags.pop(key, None)
        loc.put_tags(tags)
        result.replaced.append(d.obj.uri)
    return result

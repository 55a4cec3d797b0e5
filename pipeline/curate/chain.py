"""A source's curation chain: its steps, in order, applied to a batch of documents.

Config (`curate:` for every source, `inputs[].curate:` for one): a list of one-key mappings,
the step's registered name and its parameters (published defaults where left out):

    curate:
      - language: {languages: [en]}
      - gopher_quality: {}
      - c4_lines: {}
      - pii: {}

Each filter sees only the documents every step before it kept, each transform rewrites them
for the steps after it and for dedup and tokenize. A step may appear once in a chain (its name
is the rule a removal is counted under). Contract: `apply` returns every input document either
kept (text as rewritten, with the steps' kept fields) or removed under exactly one rule with
its reason, so documents in = kept + removed; it depends only on the documents and the chain.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from pipeline.core.storage import is_remote
from pipeline.curate import (  # noqa: F401  (each module registers its steps)
    block_list,
    c4,
    classifier,
    decontaminate,
    fineweb,
    gopher,
    language,
    length,
    pii,
    user,
)
from pipeline.curate.base import (
    REGISTRY,
    CurationError,
    Rewrites,
    Step,
    Verdicts,
)
from pipeline.curate.doc_stats import DocStats

REMOVED_SCHEMA = pa.schema(
    [("doc_id", pa.string()), ("source", pa.string()), ("row", pa.int64()),
     ("rule", pa.string()), ("detail", pa.string())]  # fmt: skip
)


def parse(raw: list[Any], where: str = "curate") -> list[tuple[str, dict[str, Any]]]:
    """The chain's (name, parameters) pairs, checked: known names, valid parameters, each name
    once. Raises CurationError naming the entry and the key."""
    if not isinstance(raw, list):
        raise CurationError(f"{where}: a list of steps, e.g. [{{gopher_quality: {{}}}}]")
    steps, seen = [], set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or len(entry) != 1:
            raise CurationError(f"{where}[{i}]: one step name with its parameters, e.g. pii: {{}}")
        ((name, params),) = entry.items()
        if name not in REGISTRY:
            raise CurationError(f"{where}[{i}]: unknown step {name!r}; steps: {sorted(REGISTRY)}")
        if name in seen:
            raise CurationError(f"{where}[{i}]: step {name!r} is already in this chain")
        seen.add(name)
        try:
            REGISTRY[name].Params(**(params or {}))
        except (ValidationError, TypeError) as e:
            raise CurationError(f"{where}[{i}].{name}: {_first_error(e)}") from None
        steps.append((name, dict(params or {})))
    return steps


def check(raw: list[Any], where: str = "curate") -> None:
    """What building the chain on a worker would refuse, found now (the config's load): each
    step's files read and decoded, its `python` function imported and its signature checked
    (Step.check). Raises CurationError naming the entry and the step."""
    for i, (name, params) in enumerate(parse(raw, where)):
        cls = REGISTRY[name]
        try:
            checked = cls.Params(**params)
            if "read" not in _takes(cls):  # reads its files itself: local ones only
                for path in filter(is_remote, _files_or_none(cls, checked)):
                    raise CurationError(f"{path}: this step reads local files only (a path"
                                        " relative to the config's folder)")  # fmt: skip
            cls.check(checked)
        except CurationError as e:
            raise CurationError(f"{where}[{i}].{name}: {e}") from None


def _files_or_none(cls: type[Step], params: Any) -> list[str]:
    """The step's files, or none where it cannot name them (its check says why)."""
    try:
        return cls.files_for(params)
    except CurationError:
        return []


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        return f"{'.'.join(map(str, err['loc'])) or 'parameters'}: {err['msg']}"
    return str(e)


def build(steps: list[tuple[str, dict[str, Any]]], **context: Any) -> list[Step]:
    """The step objects (word lists, models, benchmark n-grams loaded); `context` passes
    `read` (uri -> bytes) to the steps that read files through the run's storage."""
    built = []
    for name, params in steps:
        cls = REGISTRY[name]
        kwargs = {k: v for k, v in context.items() if k in _takes(cls)}
        built.append(cls(cls.Params(**params), **kwargs))
    return built


def _takes(cls: type[Step]) -> tuple[str, ...]:
    return cls.__init__.__code__.co_varnames[2 : cls.__init__.__code__.co_argcount]


def files_of(raw: list[dict[str, Any]]) -> list[str]:
    """The files whose content decides a chain's decisions (Step.files_for)."""
    return [
        f for name, params in parse(raw) for f in REGISTRY[name].files_for(
            REGISTRY[name].Params(**params))
    ]  # fmt: skip


def definitions(raw: list[dict[str, Any]]) -> dict[str, int]:
    """Step name -> Step.DEFINITION, for the chain's steps whose definition changed (above 1)."""
    return {name: REGISTRY[name].DEFINITION for name, _ in parse(raw)
            if REGISTRY[name].DEFINITION > 1}  # fmt: skip


def added_fields(raw: list[dict[str, Any]]) -> list[str]:
    """The kept fields a chain (as configured) adds to each document, in step order."""
    return [f for name, _ in parse(raw) for f in REGISTRY[name].FIELDS]


def fields(steps: list[Step]) -> list[str]:
    """The kept fields the chain adds to each document, in step order."""
    return [f for step in steps for f in step.FIELDS]


@dataclass
class Outcome:
    kept: pa.Table
    removed: pa.Table  # REMOVED_SCHEMA
    removed_by_rule: Counter = field(default_factory=Counter)
    changed_by_rule: Counter = field(default_factory=Counter)  # transform -> documents changed
    spans: Counter = field(default_factory=Counter)  # "pii.email" -> spans replaced


def apply(steps: list[Step], docs: pa.Table) -> Outcome:
    """Run the chain over a batch (docs: doc_id, source, row, text, keep.<field>...)."""
    out = Outcome(kept=docs, removed=REMOVED_SCHEMA.empty_table())
    removed_parts = []
    for name in fields(steps):
        column = f"keep.{name}"
        if column not in docs.column_names:
            out.kept = out.kept.append_column(column, pa.nulls(docs.num_rows, pa.string()))
    measured = {id(step): step.needs() for step in steps if hasattr(step, "needs")}
    declared = {need for needs in measured.values() for need in needs or ()}
    stats = None  # the measures the steps share, made on the first step that reads them
    for i, step in enumerate(steps):
        if not out.kept.num_rows:
            break
        if measured.get(id(step)) is not None:
            if stats is None:
                stats = DocStats(out.kept["text"], declared)
            result = step.decide(stats)
        else:
            result = step(out.kept)
        if isinstance(result, Rewrites):
            at = out.kept.column_names.index("text")
            texts = result.texts
            if not isinstance(texts, pa.Array):
                texts = pa.array(texts, pa.string())
            if stats is not None and any(measured.get(id(s)) for s in steps[i + 1 :]):
                stats.rewritten(texts, pc.not_equal(out.kept["text"], texts).combine_chunks())
            out.kept = out.kept.set_column(at, "text", texts)
            out.changed_by_rule[step.name] += result.changed
            for kind, n in result.spans.items():
                out.spans[f"{step.name}.{kind}"] += n
            continue
        out.kept = _with_fields(out.kept, result)
        gone = pa.array([w is not None for w in result.why], pa.bool_())
        if not pc.any(gone).as_py():
            continue
        dropped = out.kept.filter(gone)
        removed_parts.append(
            pa.table(
                [dropped["doc_id"], dropped["source"], dropped["row"],
                 pa.array([step.name] * dropped.num_rows, pa.string()),
                 pa.array([w for w in result.why if w is not None], pa.string())],
                schema=REMOVED_SCHEMA,
            )  # fmt: skip
        )
        out.removed_by_rule[step.name] += dropped.num_rows
        kept = pc.invert(gone)
        out.kept = out.kept.filter(kept)
        if stats is not None:
            stats.keep(kept, out.kept["text"])
    if removed_parts:
        out.removed = pa.concat_tables(removed_parts)
    return out


def merged(parts: list[Outcome], schema: pa.Schema) -> Outcome:
    """One outcome of the batches' outcomes, in batch order."""
    out = Outcome(
        kept=pa.concat_tables([p.kept for p in parts], promote_options="default")
        if parts else schema.empty_table(),
        removed=pa.concat_tables([p.removed for p in parts]) if parts
        else REMOVED_SCHEMA.empty_table(),
    )  # fmt: skip
    for p in parts:
        out.removed_by_rule.update(p.removed_by_rule)
        out.changed_by_rule.update(p.changed_by_rule)
        out.spans.update(p.spans)
    return out


def _with_fields(batch: pa.Table, verdicts: Verdicts) -> pa.Table:
    for name, values in verdicts.fields.items():
        column = f"keep.{name}"
        at = batch.column_names.index(column)
        batch = batch.set_column(at, column, pa.array(values, pa.string()))
    return batch

"""Every invalid numeric configuration value exits 2 naming the key and the file.

The keys are found by walking the pydantic model, so a key added later is covered without
editing this test; a numeric key without a lower and an upper bound fails it (pick a type in
core/model.py): without a maximum, `--set dedup.partitions=99999999999999999999` or `.inf` days
passed the check and failed (or priced nonsense) later.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from support import SAMPLE_CONFIG

from pipeline.cli import main as cli
from pipeline.config.model import Config


def _unwrap(tp: Any, metadata: list) -> tuple[Any, list]:
    """The bare type under Optional[...] / Annotated[...], and every constraint found on the way."""
    metadata = list(metadata)
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp, *extras = get_args(tp)
            for extra in extras:
                metadata += getattr(extra, "metadata", [extra])
        elif origin in (Union, types.UnionType):
            (tp,) = [a for a in get_args(tp) if a is not type(None)]
        else:
            return tp, metadata


def _invalid_values(metadata: list, tp: type) -> list[Any]:
    """One value just outside each declared bound (a whole number for an integer key, so that
    the bound refuses it, not the type)."""
    step = 1 if issubclass(tp, int) else 0.5
    values = []
    for m in metadata:
        if getattr(m, "gt", None) is not None:
            values.append(m.gt)
        if getattr(m, "ge", None) is not None:
            values.append(m.ge - 1)
        if getattr(m, "lt", None) is not None:
            values.append(m.lt)
        if getattr(m, "le", None) is not None:
            values.append(int(m.le) + step if step == 1 else m.le + step)
    return values


def _bounded_both_ways(metadata: list) -> bool:
    def has(*names: str) -> bool:
        return any(getattr(m, n, None) is not None for m in metadata for n in names)

    return has("gt", "ge") and has("lt", "le")


def _valid_item(model: type[BaseModel]) -> dict[str, Any]:
    """Required fields of a list item's model, filled with valid values."""
    item: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            tp, metadata = _unwrap(field.annotation, field.metadata)
            if get_origin(tp) is Literal:
                item[name] = get_args(tp)[-1]
            else:
                bounds = [getattr(m, "ge", None) or getattr(m, "gt", None) for m in metadata]
                item[name] = max([b for b in bounds if b is not None], default=0) + 1
    return item


def numeric_keys(model: type[BaseModel], prefix: str = "", wrap=None):
    """(dotted key, --set assignment, bounded below and above) for each invalid value of each
    numeric key."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        tp, metadata = _unwrap(field.annotation, field.metadata)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            yield from numeric_keys(tp, f"{key}.", wrap)
        elif get_origin(tp) is list and issubclass(get_args(tp)[0], BaseModel):
            item_model = get_args(tp)[0]

            def in_list(sub: str, value: Any, _key=key, _model=item_model) -> str:
                item = {**_valid_item(_model), sub.rsplit(".", 1)[-1]: value}
                flow = ", ".join(f"{k}: {v}" for k, v in item.items())
                return f"{_key}=[{{{flow}}}]"

            yield from numeric_keys(item_model, f"{key}.0.", in_list)
        elif tp is not bool and isinstance(tp, type) and issubclass(tp, (int, float)):
            values = _invalid_values(metadata, tp)
            if not _bounded_both_ways(metadata):
                yield key, None, False
            for value in values:
                assignment = wrap(key, value) if wrap else f"{key}={value}"
                yield key, assignment, True


CASES = list(numeric_keys(Config))


def test_every_numeric_key_declares_a_bound() -> None:
    unbounded = [key for key, _, bounded in CASES if not bounded]
    assert not unbounded, f"numeric config keys without a lower and an upper bound: {unbounded}"
    keys = {key for key, _, _ in CASES}
    # the walk reaches nested sections, optional keys and list items
    for key in (
        "ingest.unit_bytes",
        "ingest.max_doc_bytes",
        "ingest.max_error_rate",
        "dedup.partitions",
        "dedup.exchange_request_bytes",
        "dedup.exchange_task_bytes",
        "pack.exchange_task_bytes",
        "dedup.near.seed",
        "pack.seed",
        "ray.num_cpus",
        "retention.grace_days",
        "retention.rules.raw.transitions.0.after_days",
        "prices.standard.gb_month",
    ):
        assert key in keys


@pytest.mark.parametrize(
    "key,assignment", [(k, a) for k, a, bounded in CASES if bounded], ids=lambda v: str(v)
)
def test_invalid_numeric_value_exits_2_naming_key_and_file(key, assignment, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(
        ["run", "--config", str(SAMPLE_CONFIG), "--output", str(out), "--set", assignment]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"key '{key}': " in err and str(SAMPLE_CONFIG) in err, err
    assert not out.exists()

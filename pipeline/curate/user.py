"""Your own step: `python: {callable: "package.module:function", kind: filter|transform}`.

The function takes the batch (a pyarrow Table: doc_id, source, row, text, and the kept fields
as `keep.<field>`) and returns, for a filter, one keep flag per document (True keeps: Python or
NumPy booleans, a list, a NumPy array or an Arrow array), or, for a transform, one new text per
document. It ships with the job like the rest of the code (Ray's working dir); its module's
source file is in the reuse key, so editing it reads the units again.
When the config loads (`check`), the module is imported and the function must be callable with
the batch as its one argument: otherwise a configuration error (exit 2) before anything runs.
During the run, a function that raises or returns anything else (another count, another type,
None) stops the run naming the step (HookError; the read task adds the unit: exit 3, nothing
committed).
Contract: as curate/base.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from collections import Counter
from collections.abc import Callable
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from pipeline.core.model import StrictModel
from pipeline.curate.base import CurationError, HookError, Rewrites, Step, Verdicts, register

__all__ = ["CurationError", "HookError", "UserStep", "load"]


class UserParams(StrictModel):
    callable: str = Field(
        description="'package.module:function' taking the batch (a pyarrow Table)"
    )
    kind: Literal["filter", "transform"] = Field(
        "filter",
        description='filter (one bool per document) or transform (one text per document)',
    )


def load(spec: str) -> Callable:
    """The function `spec` names, imported, callable with one argument (the batch)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CurationError(f"python step {spec!r}: give it as 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any failure to import the user's module
        raise CurationError(f"python step {spec!r}: cannot import {module_name}: "
                            f"{_one_line(e)}") from None  # fmt: skip
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise CurationError(f"python step {spec!r}: module {module_name} has no {attr}") from None
    if not callable(fn):
        raise CurationError(f"python step {spec!r}: {attr} is not callable"
                            f" (type {type(fn).__name__})")  # fmt: skip
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: taken as it is
        return fn
    try:
        signature.bind(pa.table({}))
    except TypeError as e:
        raise CurationError(f"python step {spec!r}: {attr} must take the batch as its one"
                            f" argument ({e})") from None  # fmt: skip
    return fn


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@register
class UserStep(Step):
    """Your own filter or transform: a Python function over the batch."""

    name = "python"
    Params = UserParams

    def __init__(self, params: UserParams) -> None:
        super().__init__(params)
        self._fn = load(params.callable)
        self.kind = params.kind

    @classmethod
    def check(cls, params: UserParams) -> None:
        load(params.callable)

    @classmethod
    def files_for(cls, params: UserParams) -> list[str]:
        """The callable's module file, found without importing it."""
        module = params.callable.partition(":")[0]
        try:
            spec = importlib.util.find_spec(module) if module else None
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or not os.path.isfile(spec.origin):
            raise CurationError(f"python step {params.callable!r}: no module file for {module!r}")
        return [spec.origin]

    def __call__(self, batch: pa.Table) -> Verdicts | Rewrites:
        spec = self.params.callable
        try:
            out = self._fn(batch)
        except Exception as e:  # noqa: BLE001 - the user's code: any failure stops the run
            raise HookError(f"python step {spec!r} raised {_one_line(e)}") from None
        values = _values(out, spec, batch.num_rows)
        if self.kind == "filter":
            if not all(isinstance(v, (bool, np.bool_)) for v in values):
                raise HookError(f"python step {spec!r}: a filter returns one boolean per"
                                f" document, got {_shown(values)}")  # fmt: skip
            return Verdicts([None if v else f"{spec} returned False" for v in values])
        if not all(isinstance(v, str) for v in values):
            raise HookError(f"python step {spec!r}: a transform returns one string per"
                            f" document, got {_shown(values)}")  # fmt: skip
        texts = batch["text"].to_pylist()
        changed = sum(a != b for a, b in zip(texts, values, strict=True))
        return Rewrites(values, changed, Counter({"documents": changed}))


def _values(out, spec: str, n: int) -> list:
    """The function's result as a list of one value per document (HookError otherwise)."""
    if isinstance(out, (pa.Array, pa.ChunkedArray)):
        values = out.to_pylist()
    elif isinstance(out, np.ndarray):
        values = out.tolist() if out.ndim == 1 else None
    elif isinstance(out, (list, tuple)):
        values = list(out)
    else:
        values = None
    if values is None:
        raise HookError(f"python step {spec!r} returned {_type(out)}, not one value per"
                        f" document (a list or array of {n})")  # fmt: skip
    if len(values) != n:
        raise HookError(f"python step {spec!r} returned {len(values)} values for {n} documents")
    return values


def _type(value) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.ndim}-dimensional array"
    return "None" if value is None else f"a {type(value).__name__}"


def _shown(values: list) -> str:
    """The values' types, the commonest first (e.g. "2 int, 1 NoneType")."""
    kinds = Counter(type(v).__name__ for v in values)
    return ", ".join(f"{n} {kind}" for kind, n in kinds.most_common(3))

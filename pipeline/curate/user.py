"""Your own step: `python: {callable: "package.module:function", kind: filter|transform}`.

The function takes the batch (a pyarrow Table: doc_id, source, row, text, and the kept fields
as `keep.<field>`) and returns, for a filter, one keep flag per document (True keeps), or, for
a transform, one new text per document. It ships with the job like the rest of the code (Ray's
working dir); its module's source file is in the reuse key, so editing it reads the units
again. A result of the wrong length or type stops the run naming the callable.
Contract: as curate/base.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections import Counter
from collections.abc import Callable
from typing import Literal

import pyarrow as pa

from pipeline.core.model import StrictModel
from pipeline.curate.base import Rewrites, Step, Verdicts, register


class CurationError(ValueError):
    """A step cannot run or returned what it may not (names the step)."""


class UserParams(StrictModel):
    callable: str
    kind: Literal["filter", "transform"] = "filter"


def load(spec: str) -> Callable:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CurationError(f"python step {spec!r}: give it as 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise CurationError(f"python step {spec!r}: cannot load it: {e}") from None
    if not callable(fn):
        raise CurationError(f"python step {spec!r}: {attr} is not callable")
    return fn


@register
class UserStep(Step):
    name = "python"
    Params = UserParams

    def __init__(self, params: UserParams) -> None:
        super().__init__(params)
        self._fn = load(params.callable)
        self.kind = params.kind

    @classmethod
    def files_for(cls, params: UserParams) -> list[str]:
        """The callable's module file, found without importing it (the driver need not be
        able to run it)."""
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
        out = self._fn(batch)
        values = out.to_pylist() if isinstance(out, (pa.Array, pa.ChunkedArray)) else list(out)
        if len(values) != batch.num_rows:
            raise CurationError(
                f"python step {spec!r} returned {len(values)} values for {batch.num_rows}"
                " documents"
            )
        if self.kind == "filter":
            if not all(isinstance(v, bool) for v in values):
                raise CurationError(f"python step {spec!r}: a filter returns booleans")
            return Verdicts([None if v else f"{spec} returned False" for v in values])
        if not all(isinstance(v, str) for v in values):
            raise CurationError(f"python step {spec!r}: a transform returns strings")
        texts = batch["text"].to_pylist()
        changed = sum(a != b for a, b in zip(texts, values, strict=True))
        return Rewrites(values, changed, Counter({"documents": changed}))

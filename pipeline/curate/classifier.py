"""A supervised fastText classifier as a filter: DCLM's quality filter (Li et al. 2024 keep the
top ~10 % of documents by the score of a bigram fastText model), FineWeb-Edu's fastText
variant, or any model trained with `fasttext supervised` (`.bin`, or `.ftz` after quantize;
softmax, hierarchical softmax, one-vs-all or negative sampling; word n-grams and character
n-grams as trained).

Each document is read as the line the model was trained on: `normalise` lists `newlines`
(newlines as spaces, so the whole text is one line; without it the model reads the first line
only, as fastText's predict reads up to a newline) and `lower` (lower case: Arrow's
utf8_lower, Unicode's simple case mapping), cut at `max_chars` characters (null: whole), then
fastText's end of line "</s>". The score of `label` is the probability fastText's predict
(k=-1, threshold 0) reports for it (0 where it reports none: a hierarchical-softmax path under
log 1e-5), computed by the compiled predict of curate/lid_kernel.py where numba is installed
(fastText's values, float32), else by fastText's own. A document is kept when that score is at
least `min_score`; every document this step sees gets the kept field `classifier_score`.
Contract: as curate/base.py; the model file is in the reuse key. `curate-preview` prints the
score's quantiles on its sample, to pick the `min_score` that keeps a target share.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from pipeline.core.model import Fraction, StrictModel
from pipeline.curate import language, lid_model
from pipeline.curate.base import Filter, Verdicts, register
from pipeline.curate.language import _utf8

FIELD = "classifier_score"
QUANTILES = (0.5, 0.75, 0.9, 0.95, 0.99)  # curate-preview: the scores that keep 50 %, ... 1 %


class ClassifierParams(StrictModel):
    model_file: str = Field(
        description="a fastText supervised model (.bin or .ftz), relative to the config's folder"
    )
    label: str = Field(
        description="the label whose score decides, as the model names it (`__label__hq`) or"
        " without fastText's `__label__`"
    )
    min_score: Fraction = Field(
        0.5, description="smallest score of `label` for a document to be kept (kept field"
        " `classifier_score`)"
    )
    normalise: tuple[Literal["newlines", "lower"], ...] = Field(
        ("newlines",), description="the text normalisation the model was trained with:"
        " newlines as spaces, lower case"
    )
    max_chars: int | None = Field(
        None, ge=1, le=1 << 40, description="characters of each document the model reads;"
        " null: all"
    )

    @field_validator("model_file")
    @classmethod
    def _a_model(cls, path: str) -> str:
        try:
            lid_model.check(path)
        except OSError as e:
            raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        return path

    @model_validator(mode="after")
    def _a_label_of_the_model(self) -> ClassifierParams:
        labels = lid_model.labels_of(self.model_file)
        if _label_index(labels, self.label) < 0:
            raise ValueError(f"label {self.label!r} is not one of {self.model_file}'s {labels}")
        return self


def _label_index(labels: list[str], label: str) -> int:
    for name in (label, "__label__" + label):
        if name in labels:
            return labels.index(name)
    return -1


@functools.lru_cache(maxsize=4)
def _reference(path: str) -> Any:
    # fastText's own predict: where numba is missing, and the compiled one's check
    return language.fasttext_model(path)


@functools.lru_cache(maxsize=4)
def _compiled(path: str) -> Any:
    """The compiled predict, checked against fastText's own (loaded for the check and then
    let go: a large model is held once, not twice), or None."""
    from pipeline.curate import lid_kernel  # numba: imported where a document is scored

    if lid_kernel.numba is None:
        return None
    return lid_kernel.load(path, language.fasttext_model(path).f)


@register
class Classifier(Filter):
    name = "fasttext_classifier"
    Params = ClassifierParams
    FIELDS = (FIELD,)

    def __init__(self, params: ClassifierParams) -> None:
        super().__init__(params)
        labels = lid_model.labels_of(params.model_file)
        self._label = _label_index(labels, params.label)
        self._label_name = labels[self._label]

    @staticmethod
    def warm(texts: pa.Array | pa.ChunkedArray) -> None:
        """Compile (or load) the predict's loops without a model of the user's: they are the
        language step's (one signature for every supervised model), run on lid.176."""
        from pipeline.curate import language, lid_kernel

        if lid_kernel.numba is None:
            return
        predictor = lid_kernel.Predictor(language.model_path(), cache_words=64)
        for chunk in texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]:
            for mode in (lid_kernel.TEXT, lid_kernel.FIRST_LINE):
                predictor.score_texts(*_utf8(chunk), -1, mode, 0)

    @classmethod
    def files_for(cls, params: ClassifierParams) -> list[str]:
        return [params.model_file]

    def judge(self, text: str) -> str | None:
        return self._verdict(float(self.scores(pa.array([text]))[0]))

    def __call__(self, batch: pa.Table) -> Verdicts:
        scores = self.scores(batch["text"]).tolist()
        return Verdicts([self._verdict(s) for s in scores], {FIELD: [f"{s:.4f}" for s in scores]})

    def scores(self, texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The score of the label for each text (float32, fastText's)."""
        p: ClassifierParams = self.params
        if "lower" in p.normalise:
            texts = pc.utf8_lower(texts)
        chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
        compiled = _compiled(p.model_file)
        if compiled is None or any(c.null_count for c in chunks):
            return np.array([self._fasttext(t) for t in pa.chunked_array(chunks).to_pylist()],
                            np.float32)  # fmt: skip
        from pipeline.curate.lid_kernel import FIRST_LINE, TEXT

        mode = TEXT if "newlines" in p.normalise else FIRST_LINE
        parts = [compiled.score_texts(*_utf8(c), p.max_chars or -1, mode, self._label)[2]
                 for c in chunks]  # fmt: skip
        return np.concatenate(parts) if parts else np.empty(0, np.float32)

    def _fasttext(self, text: str | None) -> float:
        p: ClassifierParams = self.params
        text = (text or "")[: p.max_chars]
        line = text.replace("\n", " ") if "newlines" in p.normalise else text.split("\n", 1)[0]
        model = _reference(p.model_file)
        found = dict((label, score) for score, label in model.f.predict(line + "\n", -1, 0.0,
                                                                        "replace"))  # fmt: skip
        return float(np.float32(found.get(self._label_name, 0.0)))

    def _verdict(self, score: float) -> str | None:
        bound = self.params.min_score
        return f"{FIELD}={score:.4g} < {bound:.4g}" if score < bound else None

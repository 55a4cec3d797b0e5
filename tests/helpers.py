"""Paths every test module shares (pytest puts tests/ on sys.path: see pyproject.toml)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample"
# the shipped sample as one `input:` (tests point it at other data with --input);
# configs/sample.yaml reads the same folder as two named sources (test_sources.py)
SAMPLE_CONFIG = REPO / "configs" / "single-sample.yaml"
SOURCES_CONFIG = REPO / "configs" / "sample.yaml"
TOKENIZER = REPO / "configs" / "tokenizer.json"

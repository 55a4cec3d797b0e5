"""Paths every test module shares (pytest puts tests/ on sys.path: see pyproject.toml)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample"
SAMPLE_CONFIG = REPO / "configs" / "sample.yaml"
TOKENIZER = REPO / "configs" / "tokenizer.json"

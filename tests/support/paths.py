"""Paths every test module shares, and the `pipeline run` command line."""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample"
# the shipped sample as one `input:` (tests point it at other data with --input);
# configs/sample.yaml reads the same folder as two named sources (test_sources.py)
SAMPLE_CONFIG = REPO / "configs" / "single-sample.yaml"
SOURCES_CONFIG = REPO / "configs" / "sample.yaml"
TOKENIZER = REPO / "configs" / "tokenizer.json"


def run_command(config: Path, out: Path, *sets: str) -> list[str]:
    """`python -m pipeline run` of `config` into `out` (quiet), one --set per item of `sets`."""
    argv = [sys.executable, "-m", "pipeline", "run", "--config", str(config)]
    argv += ["--output", str(out), "--quiet"]
    for s in sets:
        argv += ["--set", s]
    return argv


def own_ray_env() -> dict[str, str]:
    """The environment minus RAY_ADDRESS: a child process starts a Ray of its own."""
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}

"""An invalid config value on the command line: exit 2, the key named, no traceback (the
in-process cases are tests/unit/test_config_values.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from support import REPO, SAMPLE_CONFIG


def test_unit_bytes_zero_is_a_config_error(tmp_path) -> None:
    """The case as first seen: the command line, a zero unit size, exit 2 and no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(SAMPLE_CONFIG)]
        + ["--output", str(tmp_path / "out"), "--set", "ingest.unit_bytes=0"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2, result.stderr
    assert "key 'ingest.unit_bytes'" in result.stderr and "sample.yaml" in result.stderr
    assert "Traceback" not in result.stderr

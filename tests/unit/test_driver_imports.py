"""What a run's driver imports before its clock starts: not numba (its compiled loops run in
the workers; ~0.5 s) and not torch (the streaming reader's, ~2 s)."""

from __future__ import annotations

import json
import subprocess
import sys

from support import REPO

_IMPORTED = (
    "import json, sys;"
    " import pipeline.cli.main, pipeline.run.driver, pipeline.run.read_tasks;"
    " print(json.dumps(sorted(m for m in ('numba', 'torch') if m in sys.modules)))"
)


def test_the_driver_imports_neither_numba_nor_torch():
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []

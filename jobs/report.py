"""Ray job entrypoint for the cost report: `python -m pipeline report` from the job's upload.

    ray job submit --address http://HEAD:8265 --working-dir . -- \
        python jobs/report.py --config configs/s3.yaml [--store] [--json PATH]

The report reads the dataset's manifests and stage statistics from storage (no Ray tasks).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the uploaded working dir


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import main as cli

    return cli.main(["report", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    from pipeline.cli.main import exit_cleanly

    exit_cleanly(main())

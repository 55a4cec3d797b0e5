"""Ray job entrypoint for the retention plan: `python -m pipeline retain` from the job's upload.

    ray job submit --address http://HEAD:8265 --working-dir . -- \
        python jobs/retain.py --config configs/s3.yaml [--apply] [--export-lifecycle PATH]

Retention lists and deletes objects from the driver (no Ray tasks); running it as a job keeps the
credentials and the network path those of the cluster that wrote the data.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the uploaded working dir


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import main as cli

    return cli.main(["retain", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    from pipeline.cli.main import exit_cleanly

    exit_cleanly(main())

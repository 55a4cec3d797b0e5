"""Ray job entrypoint: run the pipeline on the cluster this job was submitted to.

    ray job submit --address http://HEAD:8265 --working-dir . --runtime-env jobs/runtime_env.yaml \
        -- python jobs/run.py --config configs/s3.yaml [--input URI] [--output URI] [--set K=V]

Takes the same options as `python -m pipeline run` and prints the same summary. Ray sets
RAY_ADDRESS for a job's driver, so the run joins the cluster (pipeline.run.ray_env.ensure_ray, which
also holds each task's library thread pools to one thread, for the keys the job's runtime env leaves
unset). Outside a job it refuses to start a private
local Ray: use `python -m pipeline run` for that. On a cluster, input and output should be s3://
URIs: tasks run on any node, and the nodes share nothing but object storage.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The job's working dir is the uploaded repository; `python jobs/run.py` puts only jobs/ on the
# path, so the package is imported from the upload (the same code the workers get).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    if not os.environ.get("RAY_ADDRESS"):
        print(
            "jobs/run.py runs as a Ray job and RAY_ADDRESS is unset; submit it with"
            " `ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/run.py"
            " ...`, or run locally with `python -m pipeline run ...`",
            file=sys.stderr,
        )
        return 2
    import ray

    from pipeline.cli import main as cli

    code = cli.main(["run", "--quiet", *(sys.argv[1:] if argv is None else argv)])
    if ray.is_initialized():
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        cpus = int(ray.cluster_resources().get("CPU", 0))
        print(f"cluster {os.environ['RAY_ADDRESS']}: {nodes} nodes, {cpus} CPUs")
    return code


if __name__ == "__main__":
    from pipeline.cli.main import exit_cleanly

    exit_cleanly(main())

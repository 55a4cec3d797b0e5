"""`python -m pipeline ...`: the command line (pipeline/cli.py), then a quick, clean exit."""

import os
import sys

from pipeline.cli import main


def _exit(code: int) -> None:
    """Exit once the command is done, without tearing down native thread pools at interpreter
    shutdown: pyarrow can abort there after a command has finished and printed its result
    ("terminate called without an active exception", exit -6; apache/arrow#34314, seen once here
    after `verify OK` on S3). Output is flushed first and a Ray this process started is shut
    down, so nothing is lost or left running."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


_exit(main())

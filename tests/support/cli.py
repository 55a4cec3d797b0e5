"""The command line called in the test's own process (no subprocess, no Python start)."""

from __future__ import annotations

import io
import traceback
from contextlib import redirect_stderr, redirect_stdout

from pipeline.cli.main import main


def call(argv: list[str]) -> tuple[int | str, str, str]:
    """`python -m pipeline ARGV` in this process: exit code (or "traceback"), stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        except BaseException:  # noqa: BLE001 - what escapes main is a traceback to the user
            code = "traceback"
            err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue()

"""The error a configuration problem raises: `ConfigError`, one line naming the key and the file,
exit code 2 (cli/exit_codes.py). Raised by config/loader.py, config/path_checks.py and the checks
made where a config meets its input (ingest/field_probe.py).
"""

from __future__ import annotations

from pipeline.cli import exit_codes


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (key and file named)."""

    exit_code = exit_codes.CONFIG_ERROR

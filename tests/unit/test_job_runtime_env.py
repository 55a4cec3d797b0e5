"""jobs/runtime_env.yaml installs what the package needs on a cluster's workers: every runtime
dependency of pyproject.toml (Ray itself is the cluster's) is in its `pip:` list, so that a job
whose chain reads WARC files, detects languages or parses JSON Lines finds its libraries."""

from __future__ import annotations

import re

import tomllib
import yaml
from support import REPO


def _name(requirement: str) -> str:
    """A requirement's project name, normalized as pip compares them (PEP 503)."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_job_runtime_env_installs_every_runtime_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    needed = {_name(r) for r in project["dependencies"]} - {"ray"}
    listed = {_name(r) for r in yaml.safe_load((REPO / "jobs/runtime_env.yaml").read_text())["pip"]}
    assert needed - listed == set()

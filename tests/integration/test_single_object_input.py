"""An `s3://` input that names one object, not a prefix: the run stops before any Ray work
with one line saying which prefix and include to give, as a local file path does."""

from __future__ import annotations

import subprocess
import sys

from support import REPO, own_ray_env

from pipeline.cli.exit_codes import CONFIG_ERROR


def test_an_s3_object_as_input_is_one_line_naming_its_prefix(s3_upload, s3_storage, tmp_path):
    root = s3_upload({"crawl/a.warc": (REPO / "sample/crawl/warc/SAMPLE-20240501000000-00002.warc"
                                       ).read_bytes()})  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(REPO / "configs/crawl.yaml"),
         "--input", f"{root.uri}/crawl/a.warc", "--output", str(tmp_path / "out"),
         "--set", f"storage.endpoint_url={s3_storage.endpoint_url}"],
        capture_output=True, text=True, cwd=REPO, env=own_ray_env(), timeout=300,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == CONFIG_ERROR, done.stderr
    assert lines and "Traceback" not in done.stderr, done.stderr
    assert f"input {root.uri}/crawl/a.warc is an object, not a prefix" in lines[-1]
    assert f"give its prefix ({root.uri}/crawl)" in lines[-1] and "include: ['a.warc']" in lines[-1]

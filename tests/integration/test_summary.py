"""The run summary as a user sees it (`python -m pipeline run` on configs/sample.yaml): one
progress bar per stage, files and documents in their own columns, the quarantined documents
on the quarantine row, a time line split by phase, and a last line with the version and the
`--data-path` to train on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import REPO, SOURCES_CONFIG, own_ray_env

from pipeline.core.storage import Location
from pipeline.formats.data_path import data_path_line
from pipeline.formats.manifest import ManifestError, parse_blend
from pipeline.formats.versions import resolve_version

pytestmark = pytest.mark.slow  # runs the pipeline as a command (conftest.py)

STAGES = ["list", "read+hash", "quarantine", "exact", "near", "audit", "select", "pack"]
# the quarantine listing and the audit run beside the stages after them, waited for at the end
BARS = ["list", "read+hash", "exact", "near", "select", "pack", "quarantine", "audit"]


def _run(out: Path) -> subprocess.CompletedProcess:
    """The run's stdout and stderr as str, with the bars' carriage returns kept (text=True
    would turn them into newlines)."""
    argv = [sys.executable, "-m", "pipeline", "run", "--config", str(SOURCES_CONFIG)]
    done = subprocess.run(
        [*argv, "--output", str(out)],
        check=True,
        env=own_ray_env(),
        cwd=REPO,
        capture_output=True,
    )
    done.stdout, done.stderr = done.stdout.decode(), done.stderr.decode()
    return done


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("summary") / "out"
    done = _run(out)
    version = resolve_version(Location.from_uri(str(out / "sample")))
    manifest = json.loads((version / "manifest.json").read_bytes())
    rows = {}
    for line in done.stdout.splitlines()[1:]:
        if not line.strip():
            break
        name, *cells = line.split()
        rows[name] = cells
    return out, version, manifest, done, rows


def _final_bar_states(stderr: str) -> list[str]:
    """Each finished bar is one line; tqdm redraws it in place with carriage returns."""
    lines = [line.split("\r")[-1] for line in stderr.split("\n")]
    return [line for line in lines if "task" in line]


def test_one_progress_bar_per_stage_advancing_over_its_steps(sample):
    _, _, _, done, rows = sample
    bars = _final_bar_states(done.stderr)
    assert [b.split(":")[0].strip() for b in bars] == BARS, done.stderr[-2000:]
    for bar in bars:
        name = bar.split(":")[0].strip()
        tasks = int(rows[name][6])  # the `tasks` column ("2.9 MB" is two words)
        assert f" {tasks}/{tasks} " in bar, bar  # the one bar counted every step's tasks
    near = next(b for b in bars if b.strip().startswith("near"))
    # its many steps (band groups, buckets, members, fetch, keep), on one bar
    assert int(re.search(r"step (\d+)", near).group(1)) >= 5


def test_files_and_documents_have_their_own_columns(sample):
    _, version, manifest, done, rows = sample
    header = done.stdout.splitlines()[0].split()
    assert header[:3] == ["stage", "files", "docs"]
    listed = pq.read_table(str(Path(version.path).parent / manifest["lineage"]["input_manifest"]))
    assert rows["list"][:2] == [str(listed.num_rows), "-"]  # files, no documents
    counts = manifest["counts"]
    assert rows["read+hash"][:2] == ["-", f"{counts['docs_in']:,}"]
    assert rows["quarantine"][1] == str(counts["quarantined"]) != "0"
    assert rows["audit"][1] == str(counts["removed_exact"] + counts["removed_near"])
    assert rows["pack"][1] == f"{counts['docs_out']:,}"


def test_last_line_names_the_version_and_the_data_path(sample):
    _, version, manifest, done, _ = sample
    last = done.stdout.rstrip("\n").splitlines()[-1]
    prefix = f"train on {manifest['version']}: --data-path "
    assert last.startswith(prefix)
    pairs = parse_blend(last[len(prefix) :])
    expected = parse_blend(manifest["blend"]["train"])
    assert [w for w, _ in pairs] == [w for w, _ in expected]
    for (_, path), (_, relative) in zip(pairs, expected, strict=True):
        assert path == f"{version.path}/{relative}" and Path(path).is_absolute()
        assert Path(path + ".bin").is_file() and Path(path + ".idx").is_file()
    assert {Path(p).name + ".bin" for _, p in pairs} == {s["bin"] for s in manifest["shards"]}


def test_the_time_line_splits_the_wall_time_into_phases(sample):
    """Ray start, worker start, stages, commit and report, each in seconds, then what none of
    them claims; they add up to the total, and the stage rows fit in `stages`."""
    _, _, _, done, rows = sample
    line = next(x for x in done.stdout.splitlines() if x.startswith("time "))
    total, inner = re.fullmatch(r"time +([\d.]+) s  \(([^)]*)\).*", line).groups()
    phases = {k: float(v) for k, v in (p.rsplit(" ", 1) for p in inner.split(", "))}
    expected = ["ray start", "worker start", "stages", "commit", "report", "other"]
    assert list(phases) == expected, line
    assert abs(sum(phases.values()) - float(total)) <= 0.05 * len(phases) + 0.05, line
    stage_rows = sum(float(rows[name][4]) for name in STAGES)  # the `seconds` column
    assert stage_rows <= phases["stages"] + 0.05 * len(STAGES), line


def test_an_unchanged_rerun_still_says_what_to_train_on(sample):
    out, _, manifest, first, _ = sample
    again = _run(out).stdout.splitlines()
    assert again[0].startswith(
        f"already committed: this input and config are version {manifest['version']}"
    )
    assert again[-1] == first.stdout.rstrip("\n").splitlines()[-1]


def test_data_path_line_joins_each_prefix_under_the_version():
    blend = "0.25 train-a-00000 0.75 train-b-00000"
    assert data_path_line("s3://bucket/ds/v1/", blend) == (
        "0.25 s3://bucket/ds/v1/train-a-00000 0.75 s3://bucket/ds/v1/train-b-00000"
    )
    assert data_path_line("/data/ds/v1", "1 train-a-00000") == "1 /data/ds/v1/train-a-00000"
    with pytest.raises(ManifestError, match="odd number"):
        data_path_line("/data/ds/v1", "0.5 a 0.5")

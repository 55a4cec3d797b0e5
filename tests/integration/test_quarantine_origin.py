"""With named sources every row of the run's quarantine listing names the source its bad record
came from (`origin`), and verify checks the per-source quarantined counts against it; a listing
without the column (a single input, or a run from before) still verifies."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from support import TOKENIZER

from pipeline.config.loader import load_config
from pipeline.core.layout import RunLayout
from pipeline.core.storage import Location
from pipeline.formats.manifest import MANIFEST
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.run.driver import run_pipeline


def records(prefix: str, n: int) -> str:
    return "".join(
        json.dumps({"id": f"{prefix}{i}", "text": f"{prefix} record {i} " * 8}) + "\n"
        for i in range(n)
    )


@pytest.fixture(scope="module")
def run(ray_local, tmp_path_factory):
    root = tmp_path_factory.mktemp("q")
    # the same relative path in both sources; alpha has two bad records, beta one
    (root / "alpha").mkdir()
    (root / "beta").mkdir()
    (root / "alpha/part.jsonl").write_text(
        records("a", 20) + "{not json\n" + json.dumps({"id": "ae", "text": "  "}) + "\n"
    )
    (root / "beta/part.jsonl").write_text(records("b", 20) + "[1, \n")
    cfg_path = root / "mix.yaml"
    cfg_path.write_text(
        yaml.safe_dump(
            {
                "name": "mix",
                "inputs": [
                    {"name": "alpha", "uri": str(root / "alpha")},
                    {"name": "beta", "uri": str(root / "beta")},
                ],
                "output": {"uri": str(root / "out")},
                "ingest": {"unit_bytes": "64KiB", "max_error_rate": 0.5},
                "dedup": {"partitions": 2},
                "tokenize": {"tokenizer": str(TOKENIZER)},
                "pack": {"shard_bytes": "64KiB"},
            }
        )
    )
    cfg = load_config(cfg_path)
    result = run_pipeline(cfg, show_progress=False)
    result.layout = RunLayout.for_config(cfg, result.manifest["run"]["run_id"])
    return result


def test_quarantine_rows_name_their_source(run):
    bad = run.layout.quarantine.read_parquet()
    assert "origin" in bad.column_names
    rows = bad.to_pylist()
    assert Counter(r["origin"] for r in rows) == {"alpha": 2, "beta": 1}
    assert {r["source"] for r in rows} == {"part.jsonl"}
    assert [r["origin"] for r in rows] == sorted(r["origin"] for r in rows)
    manifest = verify_version(run.version)
    assert manifest["sources"]["alpha"]["quarantined"] == 2
    assert manifest["sources"]["beta"]["quarantined"] == 1


def _copy(run, tmp_path: Path) -> tuple[Location, Location]:
    """A copy of the dataset folder (version and run records), and its quarantine listing."""
    dataset = Path(run.version.path).parent
    copy = tmp_path / dataset.name
    shutil.copytree(dataset, copy)
    version = Location.from_uri(str(copy / run.version.name))
    manifest = json.loads((version / MANIFEST).read_bytes())
    return version, Location.from_uri(str(copy / manifest["lineage"]["quarantine"]))


def test_verify_checks_quarantine_per_source(run, tmp_path):
    version, listing = _copy(run, tmp_path)
    bad = listing.read_parquet()
    moved = ["beta"] * bad.num_rows  # every bad record blamed on beta: totals still agree
    listing.write_parquet(
        bad.set_column(bad.column_names.index("origin"), "origin", pa.array(moved))
    )
    with pytest.raises(VerifyError, match="records from source alpha, sources say 2"):
        verify_version(version)
    # a listing without the column (written before named sources carried it) still verifies
    listing.write_parquet(bad.drop_columns(["origin"]))
    verify_version(version)

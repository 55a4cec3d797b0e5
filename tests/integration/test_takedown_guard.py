"""A takedown no race or hand edit undoes (run/takedown.py, formats/takedowns.check_intact):
two `remove` processes at once both stay down, a run or `remove` refuses a takedown list that
lost or changed an entry, `takedown-lift` wants a reason, and `find` does not answer "taken
down" plus a row, exit 0, from a newest version that still holds the id. A tiny local input,
this process's Ray (ray_local) but for the two `remove` processes, which start their own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, SAMPLE_CONFIG, own_ray_env

from pipeline.cli.main import main
from pipeline.core.storage import Location
from pipeline.formats import documents, takedowns
from pipeline.formats.verify import verify_version
from pipeline.formats.versions import committed_versions, resolve_version
from pipeline.run.driver import run_pipeline

pytestmark = pytest.mark.slow  # runs the pipeline

IDS = [f"doc-{i}" for i in range(10)]


@pytest.fixture(scope="module")
def base(tmp_path_factory, ray_local) -> Path:
    """A committed version of 10 documents, then a `remove` of doc-1: its version honours the
    entry (manifest `takedowns`)."""
    root = tmp_path_factory.mktemp("guard")
    (root / "in").mkdir()
    rows = [json.dumps({"id": d, "text": f"{n} document {n} " * 40}) for n, d in enumerate(IDS)]
    (root / "in" / "a.jsonl").write_text("\n".join(rows) + "\n")
    from pipeline.config.loader import load_config

    cfg = load_config(SAMPLE_CONFIG, input_uri=str(root / "in"), output_uri=str(root / "out"))
    run_pipeline(cfg, show_progress=False)
    (root / "doc-1.txt").write_text("doc-1\n")
    dataset = root / "out" / "sample"
    assert main(["remove", str(dataset), "--ids", str(root / "doc-1.txt")]) == 0
    return root


@pytest.fixture
def dataset(base: Path, tmp_path: Path) -> Path:
    """A copy of the base output, so that each test's edits are its own."""
    shutil.copytree(base / "out", tmp_path / "out")
    return tmp_path / "out" / "sample"


def _run(base: Path, dataset: Path) -> int:
    argv = ["run", "--config", str(SAMPLE_CONFIG), "--input", str(base / "in")]
    return main([*argv, "--output", str(dataset.parent), "--quiet"])


def _newest_ids(dataset: Path) -> set[str]:
    version = resolve_version(Location.from_uri(str(dataset)))
    return set(documents.read_index(version)["doc_id"].to_pylist())


def _entry(dataset: Path) -> Path:
    [path] = (dataset / "_takedowns").iterdir()
    return path


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_two_removes_at_once_both_stay_down(base: Path, dataset: Path, tmp_path: Path) -> None:
    """Two `python -m pipeline remove` processes started together on the dataset folder: the
    second waits for the first's lease, then re-packs the newest version, leaving out both."""
    files = []
    for doc_id in ("doc-4", "doc-7"):
        files.append(tmp_path / f"{doc_id}.txt")
        files[-1].write_text(f"{doc_id}\n")
    argv = [sys.executable, "-m", "pipeline", "remove", str(dataset), "--ids"]
    procs = [
        subprocess.Popen(
            [*argv, str(f)],
            cwd=REPO,
            env=own_ray_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for f in files
    ]
    said = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, said, strict=True):
        print(f"exit {p.returncode}\n{out}{err}")  # the report quotes it (pytest -s)
        assert p.returncode == 0, err
    left = _newest_ids(dataset)
    assert not left & {"doc-1", "doc-4", "doc-7"}
    assert left == set(IDS) - {"doc-1", "doc-4", "doc-7"}
    newest = resolve_version(Location.from_uri(str(dataset)))
    manifest = verify_version(newest)
    assert manifest["counts"]["removed_takedown"] == 3
    listed = takedowns.load(Location.from_uri(str(dataset)))
    assert sorted(manifest["takedowns"]["entries"]) == sorted(listed.entries)
    assert manifest["takedowns"]["ids_sha256"] == listed.digest
    for doc_id in ("doc-4", "doc-7"):
        assert main(["find", str(dataset), "--id", doc_id]) == 7  # NOT_FOUND


def test_a_deleted_entry_file_is_refused_by_run_and_remove(
    base: Path, dataset: Path, tmp_path: Path, capsys
) -> None:
    entry = _entry(dataset)
    entry.unlink()
    versions = committed_versions(Location.from_uri(str(dataset)))
    capsys.readouterr()
    assert _run(base, dataset) == 3
    [line] = _error_lines(capsys.readouterr().err)
    assert f"takedown list entry {entry.stem}, which version {versions[-1]} honours" in line
    assert "is gone from" in line and "nothing was committed" in line
    (tmp_path / "ids").write_text("doc-2\n")
    assert main(["remove", str(dataset), "--ids", str(tmp_path / "ids")]) == 3
    [line] = _error_lines(capsys.readouterr().err)
    assert f"takedown list entry {entry.stem}, which version" in line and "is gone" in line
    assert committed_versions(Location.from_uri(str(dataset))) == versions
    assert [p.name for p in (dataset / "_takedowns").iterdir()] == []  # nothing recorded


@pytest.mark.parametrize(
    "edit, said",
    [
        ("ids", "was edited: its 1 ids do not hash to its ids_sha256"),
        ("digest", "was edited: its 1 ids do not hash to its ids_sha256"),
        ("both", "no longer hold its ids"),
    ],
)
def test_an_edited_entry_is_refused(
    base: Path, dataset: Path, capsys, edit: str, said: str
) -> None:
    """ids changed, digest kept; digest changed, ids kept; both changed to agree (the newest
    manifest's takedowns.ids_sha256 catches it)."""
    path = _entry(dataset)
    entry = json.loads(path.read_text())
    if edit in ("ids", "both"):
        entry["ids"] = ["doc-9"]
    if edit in ("digest", "both"):
        entry["ids_sha256"] = takedowns.ids_digest(["doc-9"] if edit == "both" else ["x"])
    path.write_text(json.dumps(entry))
    capsys.readouterr()
    assert _run(base, dataset) == 3
    [line] = _error_lines(capsys.readouterr().err)
    assert path.stem in line and said in line
    assert "doc-1" not in _newest_ids(dataset)


def test_a_blank_lift_reason_is_refused(dataset: Path, capsys) -> None:
    name = _entry(dataset).stem
    for reason in ("", "  \t"):
        argv = ["takedown-lift", str(dataset), "--entry", name, "--reason", reason]
        assert main(argv) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert (
            line == f"error: --reason {reason!r} is blank: a lift must say why the ids come"
            " back; nothing was recorded"
        )
    assert len(list((dataset / "_takedowns").iterdir())) == 1


def test_find_refuses_a_newest_version_that_still_holds_a_taken_down_id(
    dataset: Path, capsys
) -> None:
    """An entry no version honours yet (recorded, its re-pack never ran), then a manifest that
    says it honours an entry whose id it holds: neither is "taken down" + the row with exit 0."""
    loc = Location.from_uri(str(dataset))
    entry, _ = takedowns.record(loc, ["doc-3"], "court order")
    capsys.readouterr()
    assert main(["find", str(dataset), "--id", "doc-3"]) == 8  # VERSION_BROKEN
    said = capsys.readouterr()
    assert f"'doc-3' is taken down: takedown {entry['entry']}" in said.out
    [line] = _error_lines(said.err)
    newest = committed_versions(loc)[-1]
    assert line == (
        f"error: broken version: version {newest} is the dataset's newest and still holds"
        f" 'doc-3', taken down by {entry['entry']}, which it does not honour (a `remove` that"
        " failed or was bypassed): publish a version without it (`remove` or `run`)"
    )
    manifest_path = dataset / newest / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["takedowns"]["entries"].append(entry["entry"])
    manifest_path.write_text(json.dumps(manifest))
    assert main(["find", str(dataset), "--id", "doc-3"]) == 8
    [line] = _error_lines(capsys.readouterr().err)
    assert f"says it honours takedown {entry['entry']} yet holds 'doc-3'" in line
    # an older version may hold it: the takedown's parent, still there for a trainer
    assert main(["find", str(dataset / committed_versions(loc)[0]), "--id", "doc-1"]) == 0


def test_a_run_stops_when_an_entry_is_appended_before_its_lease(
    base: Path, dataset: Path, monkeypatch, capsys
) -> None:
    """A `remove` that records its entry between a run's listing and the run's lease: the run,
    keyed by the list before it, would publish a newest version holding the ids."""
    from pipeline.run import driver

    checked = driver.input_guard.check_listing

    def and_a_removal_meanwhile(*args, **kwargs):
        checked(*args, **kwargs)
        takedowns.record(Location.from_uri(str(dataset)), ["doc-8"], "meanwhile")

    monkeypatch.setattr(driver.input_guard, "check_listing", and_a_removal_meanwhile)
    versions = committed_versions(Location.from_uri(str(dataset)))
    capsys.readouterr()
    assert _run(base, dataset) == 3
    [line] = _error_lines(capsys.readouterr().err)
    assert "the takedown list changed after the run listed its input (entry " in line
    assert committed_versions(Location.from_uri(str(dataset))) == versions

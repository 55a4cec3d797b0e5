"""A takedown that stays down (formats/takedowns.py): `remove` records its ids on the dataset's
list, every later run leaves them out (removed_takedown, audited), `find` names the entry, and
`takedown-lift` brings them back. A tiny local input, this process's Ray (ray_local)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support import SAMPLE_CONFIG

from pipeline.cli.main import main
from pipeline.config.loader import load_config
from pipeline.core.layout import takedown_entry
from pipeline.core.storage import Location
from pipeline.formats import documents, takedowns
from pipeline.formats.verify import VerifyError, verify_version
from pipeline.formats.versions import committed_versions
from pipeline.run.driver import run_pipeline
from pipeline.run.summary import format_summary

pytestmark = pytest.mark.slow  # runs the pipeline

# ids as an input may hold them: the id file must name each exactly
WEIRD = [" lead", "   ", "c\rr", "new\nline"]
IDS = [*WEIRD, *(f"doc-{i}" for i in range(8))]


@pytest.fixture(scope="module")
def base(tmp_path_factory, ray_local) -> Path:
    """A committed version of 12 documents, 4 of them with ids a line-stripping reader loses."""
    root = tmp_path_factory.mktemp("takedown")
    (root / "in").mkdir()
    rows = [json.dumps({"id": d, "text": f"{n} document {n} " * 40}) for n, d in enumerate(IDS)]
    (root / "in" / "a.jsonl").write_text("\n".join(rows) + "\n")
    run_pipeline(_cfg(root / "out", root / "in"), show_progress=False)
    return root


def _cfg(out: Path, inp: Path, *sets: str):
    return load_config(SAMPLE_CONFIG, input_uri=str(inp), output_uri=str(out), overrides=[*sets])


@pytest.fixture
def dataset(base: Path, tmp_path: Path) -> Path:
    """A copy of the base output, so that each test's takedowns are its own."""
    shutil.copytree(base / "out", tmp_path / "out")
    return tmp_path / "out" / "sample"


def _ids(dataset: Path) -> set[str]:
    version = Location.from_uri(str(dataset / committed_versions(_loc(dataset))[-1]))
    return set(documents.read_index(version)["doc_id"].to_pylist())


def _loc(path: Path) -> Location:
    return Location.from_uri(str(path))


def _rerun(dataset: Path, base: Path, *sets: str):
    return run_pipeline(_cfg(dataset.parent, base / "in", *sets), show_progress=False)


def test_remove_then_rerun_unchanged_is_not_the_parent_and_leaves_the_ids_out(
    base: Path, dataset: Path, tmp_path: Path, capsys
) -> None:
    [parent] = committed_versions(_loc(dataset))
    listed = tmp_path / "ids.txt"
    # one id a line exactly as written: a leading space, only spaces, a "\r" inside
    listed.write_bytes(b" lead\n   \nc\rr\ndoc-1\nnope\r\nunknown id\n")
    assert main(["remove", str(dataset), "--ids", str(listed), "--reason", "DMCA #7"]) == 0
    said = capsys.readouterr()
    assert "warning: 2 of 6 ids are not in the version (e.g. 'nope\\r', 'unknown id')" in said.err
    assert "recorded takedown" in said.out and "reason 'DMCA #7'" in said.out
    gone = {" lead", "   ", "c\rr", "doc-1"}
    assert not _ids(dataset) & gone  # the takedown's own version

    again = _rerun(dataset, base)
    assert again.version.name != parent and not again.already_committed
    manifest = verify_version(again.version)
    assert not set(documents.read_index(again.version)["doc_id"].to_pylist()) & gone
    counts = manifest["counts"]
    assert counts["removed_takedown"] == 4 and counts["docs_out"] == len(IDS) - 4
    assert counts["docs_in"] == len(IDS)
    assert manifest["sources"]["sample"]["removed_takedown"] == 4
    audit = pq.read_table(dataset / manifest["lineage"]["removed"]).to_pylist()
    assert sorted(r["doc_id"] for r in audit if r["rule"] == "takedown") == sorted(gone)
    # the same input and config again: the version that honours the list, not the parent
    same = _rerun(dataset, base)
    assert same.already_committed and same.version.name == again.version.name
    said = format_summary(same).splitlines()
    assert said[0].endswith("which honours the takedown list (1 entry); nothing was written")
    assert again.version.name in said[-1] and parent not in said[-1]  # the `train on` line
    assert "  taken down               4  (1 entry of the takedown list)" in format_summary(again)
    # verify holds the audit to the count: one takedown row fewer is a failed check
    audit_path = dataset / manifest["lineage"]["removed"]
    table = pq.read_table(audit_path)
    assert table.num_rows == 4  # only the takedown rows: no duplicates here
    pq.write_table(table.slice(1), audit_path)
    with pytest.raises(VerifyError, match="the audit lists 3 takedown removals"):
        verify_version(again.version)


def test_a_changed_config_keeps_the_ids_out_and_find_names_the_entry(
    base: Path, dataset: Path, tmp_path: Path, capsys
) -> None:
    [parent] = committed_versions(_loc(dataset))
    listed = tmp_path / "ids.jsonl"
    listed.write_text(json.dumps({"id": "new\nline"}) + "\n" + json.dumps({"id": "doc-2"}) + "\n")
    assert main(["remove", str(dataset), "--ids", str(listed), "--reason", "court order"]) == 0
    capsys.readouterr()
    changed = _rerun(dataset, base, "pack.seed=1")
    manifest = verify_version(changed.version)
    assert manifest["counts"]["removed_takedown"] == 2
    assert not _ids(dataset) & {"new\nline", "doc-2"}
    assert main(["find", str(dataset), "--id", "new\nline"]) == 7  # exit_codes.NOT_FOUND
    said = capsys.readouterr()
    assert "not found: 'new\\nline'" in said.err
    assert "'new\\nline' is taken down: takedown " in said.out
    assert "reason 'court order'" in said.out
    # the parent still holds it: find says where, and that it is taken down
    assert main(["find", str(dataset / parent), "--id", "doc-2"]) == 0
    assert "'doc-2' is taken down: takedown " in capsys.readouterr().out


def test_lift_brings_the_documents_back(
    base: Path, dataset: Path, tmp_path: Path, capsys
) -> None:
    listed = tmp_path / "ids.txt"
    listed.write_text("doc-3\n")
    assert main(["remove", str(dataset), "--ids", str(listed)]) == 0
    capsys.readouterr()
    [name] = [p.stem for p in (dataset / "_takedowns").iterdir()]
    assert json.loads((dataset / "_takedowns" / f"{name}.json").read_text())["reason"] == (
        "(none given)"
    )
    assert "doc-3" not in _ids(dataset)
    assert main(["takedown-lift", str(dataset), "--entry", name, "--reason", "appeal won"]) == 0
    assert f"lifted {name}" in capsys.readouterr().out
    back = _rerun(dataset, base)
    assert "doc-3" in set(documents.read_index(back.version)["doc_id"].to_pylist())
    assert "removed_takedown" not in load_counts(back.version)
    # the list is back to empty: the rerun may answer with the version from before the takedown
    assert main(["find", back.version.path, "--id", "doc-3"]) == 0
    out = capsys.readouterr().out
    assert "'doc-3' was taken down" in out and "reason 'appeal won'" in out
    # append-only: a second lift, or an entry that is not there, is refused
    assert main(["takedown-lift", str(dataset), "--entry", name, "--reason", "x"]) == 2
    assert "lifted already" in capsys.readouterr().err
    assert main(["takedown-lift", str(dataset), "--entry", "nope", "--reason", "x"]) == 2
    assert "'nope' is not a takedown entry" in capsys.readouterr().err
    assert len(list((dataset / "_takedowns").iterdir())) == 2


def load_counts(version: Location) -> dict:
    return json.loads((Path(version.path) / "manifest.json").read_text())["counts"]


def test_the_list_on_s3_is_created_exclusively_and_read_back(s3_bucket, s3_storage) -> None:
    dataset = Location.from_uri(f"s3://{s3_bucket}/out/sample", s3_storage)
    entry, new = takedowns.record(dataset, ["a\nb", " "], "legal")
    assert new and takedowns.record(dataset, [" ", "a\nb"], "again") == (entry, False)
    created, _ = takedown_entry(dataset, entry["entry"]).create_exclusive(b"{}")
    assert not created  # never rewritten
    takedowns.lift(dataset, entry["entry"], "appeal")
    listed = takedowns.load(dataset)
    assert listed.ids == [] and listed.digest == "" and len(listed.entries) == 2

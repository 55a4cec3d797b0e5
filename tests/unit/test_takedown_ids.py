"""The id files `remove --ids` reads and the takedown list's entries (formats/takedowns.py),
on local files: no server, no Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.layout import data_class
from pipeline.core.storage import Location
from pipeline.formats import takedowns
from pipeline.formats.takedowns import TakedownListError, read_id_file


def test_one_id_a_line_exactly_as_written(tmp_path: Path) -> None:
    path = tmp_path / "ids.txt"
    path.write_bytes(b" lead\n   \nc\rr\ntrail \n\nnbsp\xc2\xa0\nlast")
    expected = [" lead", "   ", "c\rr", "trail ", "nbsp\u00a0", "last"]
    assert read_id_file(str(path)) == sorted(expected)


def test_jsonl_and_parquet_lists_hold_ids_with_newlines(tmp_path: Path) -> None:
    jsonl = tmp_path / "ids.jsonl"
    jsonl.write_text(json.dumps({"id": "a\nb"}) + "\n\n" + json.dumps({"id": " "}) + "\n")
    assert read_id_file(str(jsonl)) == [" ", "a\nb"]
    parquet = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": ["x\ny", "x\ny", "\r"]}), parquet)
    assert read_id_file(str(parquet)) == ["\r", "x\ny"]


def test_a_bad_id_list_is_one_error_naming_where(tmp_path: Path) -> None:
    jsonl = tmp_path / "ids.jsonl"
    jsonl.write_text('{"id": "a"}\n{"id": 3}\n')
    with pytest.raises(TakedownListError, match="line 2: `id` is 3"):
        read_id_file(str(jsonl))
    parquet = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"doc": ["a"]}), parquet)
    with pytest.raises(TakedownListError, match="no `id` column"):
        read_id_file(str(parquet))


def test_entries_are_append_only_and_a_lift_ends_one(tmp_path: Path) -> None:
    dataset = Location.from_uri(str(tmp_path / "sample"))
    first, new = takedowns.record(dataset, ["b", "a\n"], "legal")
    assert new and first["kind"] == "takedown" and first["ids"] == ["a\n", "b"]
    again, new = takedowns.record(dataset, ["a\n", "b"], "legal")
    assert not new and again == first  # an active entry of the same ids is not written twice
    takedowns.record(dataset, ["c"], None)
    listed = takedowns.load(dataset)
    assert listed.ids == ["a\n", "b", "c"] and listed.digest
    lift = takedowns.lift(dataset, first["entry"], "appeal")
    after = takedowns.load(dataset)
    assert after.ids == ["c"] and after.digest != listed.digest
    assert [e["entry"] for e in after.naming("b")] == [first["entry"], lift["entry"]]
    with pytest.raises(TakedownListError, match="lifted already"):
        takedowns.lift(dataset, first["entry"], "again")
    names = sorted(p.name for p in (tmp_path / "sample" / "_takedowns").iterdir())
    assert len(names) == 3 and all(data_class(f"_takedowns/{n}") == "reports" for n in names)
    takedowns.lift(dataset, after.active[0]["entry"], "gone")
    assert takedowns.load(dataset).digest == ""  # an empty list keys runs as no list did


def test_an_unreadable_entry_is_one_error(tmp_path: Path) -> None:
    dataset = Location.from_uri(str(tmp_path / "sample"))
    (tmp_path / "sample" / "_takedowns").mkdir(parents=True)
    (tmp_path / "sample" / "_takedowns" / "x.json").write_text("{")
    with pytest.raises(TakedownListError, match="x.json is unreadable"):
        takedowns.load(dataset)


def _honouring(tmp_path: Path, listed: takedowns.TakedownList) -> None:
    """A committed version (only its manifest's `takedowns` matters here) honouring `listed`."""
    version = tmp_path / "sample" / "20261201T000000.000000Z-0123abcd"
    version.mkdir(parents=True)
    names = [e["entry"] for e in listed.active]
    manifest = {"takedowns": {"entries": names, "ids_sha256": listed.digest}}
    (version / "manifest.json").write_text(json.dumps(manifest))


def test_a_list_that_lost_or_changed_an_entry_is_refused(tmp_path: Path) -> None:
    dataset = Location.from_uri(str(tmp_path / "sample"))
    kept, _ = takedowns.record(dataset, ["a"], "legal")
    gone, _ = takedowns.record(dataset, ["b"], "legal")
    _honouring(tmp_path, takedowns.load(dataset))
    takedowns.check_intact(dataset, takedowns.load(dataset))  # as committed: no complaint
    folder = tmp_path / "sample" / "_takedowns"
    lost = (folder / f"{gone['entry']}.json").read_bytes()
    (folder / f"{gone['entry']}.json").unlink()
    with pytest.raises(takedowns.TakedownListChanged, match=f"{gone['entry']}, which version"):
        takedowns.check_intact(dataset, takedowns.load(dataset))
    (folder / f"{gone['entry']}.json").write_bytes(lost)
    path = folder / f"{kept['entry']}.json"
    for ids, digest, said in [
        (["z"], kept["ids_sha256"], "was edited: its 1 ids do not hash"),  # ids changed
        (["a"], takedowns.ids_digest(["z"]), "was edited: its 1 ids do not hash"),  # digest
        (["z"], takedowns.ids_digest(["z"]), "no longer hold its ids"),  # both, to agree
    ]:
        path.write_text(json.dumps({**kept, "ids": ids, "ids_sha256": digest}))
        with pytest.raises(takedowns.TakedownListChanged, match=said) as refused:
            takedowns.check_intact(dataset, takedowns.load(dataset))
        assert refused.value.exit_code == 3 and "\n" not in str(refused.value)
    path.write_text(json.dumps(kept))
    takedowns.lift(dataset, kept["entry"], "appeal")  # a lift is appended: nothing is lost
    takedowns.check_intact(dataset, takedowns.load(dataset))

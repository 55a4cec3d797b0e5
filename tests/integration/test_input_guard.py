"""No empty, shrunken or vanished version (run/input_guard.py): an input that lists nothing,
keeps no document or shrank past run.max_input_shrink, a source renamed, dropped or left with no
document, and a takedown that empties the version are refused with exit 3 and nothing
committed; `--allow-empty` publishes them on purpose; retention's own raw deletions are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support import SAMPLE_CONFIG, SOURCES_CONFIG, TOKENIZER, run_command
from support.cli import call  # the command line in this process, on the shared Ray

from pipeline.config.loader import load_config
from pipeline.core.layout import is_version_name
from pipeline.formats import documents
from pipeline.retention.apply import apply_plan
from pipeline.retention.plan import plan_retention
from pipeline.run.driver import run_pipeline
from pipeline.run.results import RunError
from pipeline.run.takedown import remove_documents

pytestmark = pytest.mark.slow  # every test runs the pipeline (conftest.py)


def versions(out: Path, name: str = "sample") -> list[str]:
    """The committed versions (a refusal at the commit leaves its shards, never a manifest)."""
    dataset = out / name
    if not dataset.exists():
        return []
    return sorted(
        p.name
        for p in dataset.iterdir()
        if is_version_name(p.name) and (p / "manifest.json").exists()
    )


def write_docs(folder: Path, name: str, n: int, tag: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"id": f"{tag}{i}", "text": f"{tag} document {i} " * 40}) for i in range(n)]
    (folder / name).write_text("\n".join(rows) + "\n")


def test_an_empty_folder_is_refused_and_allow_empty_publishes_it(ray_local, tmp_path):
    empty, out = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    (empty / "_SUCCESS").write_text("")
    argv = [*run_command(SAMPLE_CONFIG, out)[3:], "--input", str(empty)]  # `run ...`
    code, _, err = call(argv)
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    excluded = "exclude ['README.md', 'crawl/**']"  # configs/single-sample.yaml's
    assert f"input {empty}: no file to read (include ['**'], {excluded};" in lines[0]
    assert "skipped: 1 marker)" in lines[0]
    assert "--allow-empty" in lines[0] and "Nothing was committed" in lines[0]
    assert versions(out) == []
    code, _, err = call([*argv, "--allow-empty"])
    assert code == 0, err
    [version] = versions(out)
    manifest = json.loads((out / "sample" / version / "manifest.json").read_text())
    assert manifest["counts"]["docs_out"] == 0


def test_a_glob_matching_nothing_names_the_source(ray_local, tmp_path):
    data = tmp_path / "in"
    write_docs(data / "docs", "a.jsonl", 20, "d")
    raw = yaml.safe_load(SOURCES_CONFIG.read_text())
    for src in raw["inputs"]:
        src["uri"] = str(data)
    raw["tokenize"]["tokenizer"] = str(TOKENIZER)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_config(tmp_path / "c.yaml", output_uri=str(tmp_path / "out"))
    with pytest.raises(RunError) as e:
        run_pipeline(cfg, show_progress=False)
    assert e.value.exit_code == 3
    assert f"inputs[1] (web) {data}: no file to read (include ['web/**', 'forum/**'])." in str(
        e.value
    )
    assert "inputs[0]" not in str(e.value)
    assert versions(tmp_path / "out") == []


def test_no_document_kept_is_refused(ray_local, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.jsonl").write_text("\n\n")  # listed bytes, no record
    cfg = load_config(SAMPLE_CONFIG, input_uri=str(data), output_uri=str(tmp_path / "out"))
    with pytest.raises(RunError, match="yields no document: input .*: 0 records read"):
        run_pipeline(cfg, show_progress=False)
    assert versions(tmp_path / "out") == []


def test_a_shrunken_input_asks_for_the_flag_and_names_retention(ray_local, tmp_path):
    data, out = tmp_path / "in", tmp_path / "out"
    write_docs(data, "a.jsonl", 30, "a")
    write_docs(data, "b.jsonl", 10, "b")
    cfg = load_config(SAMPLE_CONFIG, input_uri=str(data), output_uri=str(out))
    run_pipeline(cfg, show_progress=False)
    before = versions(out)
    # this dataset's own retention deletes the raw file the version read
    rules = load_config(
        SAMPLE_CONFIG,
        input_uri=str(data),
        output_uri=str(out),
        overrides=["retention.rules.raw.delete_after_days=0"],
    )
    apply_plan(plan_retention(rules), rules)
    assert not (data / "a.jsonl").exists() and not (data / "b.jsonl").exists()
    with pytest.raises(RunError) as e:
        run_pipeline(cfg, show_progress=False)
    assert "no file to read" in str(e.value)
    assert "this dataset's retention deleted 2 raw files under it" in str(e.value)
    write_docs(data, "b.jsonl", 10, "b")  # a quarter of the input comes back
    with pytest.raises(RunError) as e:
        run_pipeline(cfg, show_progress=False)
    message = str(e.value)
    assert "shrank by more than run.max_input_shrink = 0.5" in message
    assert f"input {data}: " in message and "--allow-empty" in message
    assert "retention deleted 2 raw files" in message
    assert versions(out) == before  # nothing committed, the newest version unchanged
    relaxed = load_config(
        SAMPLE_CONFIG,
        input_uri=str(data),
        output_uri=str(out),
        overrides=["run.max_input_shrink=0.9"],
    )
    assert run_pipeline(relaxed, show_progress=False).manifest["counts"]["docs_out"] == 10
    write_docs(data, "c.jsonl", 1, "c")
    allowed = run_pipeline(cfg, show_progress=False, allow_empty=False)  # within 0.5 of newest
    assert allowed.manifest["counts"]["docs_out"] == 11


def test_a_wrong_text_field_is_exit_2_before_any_read(ray_local, tmp_path):
    """Found item 7: the listing's probe of the first record (ingest/field_probe.py)."""
    data, out = tmp_path / "in", tmp_path / "out"
    data.mkdir()
    rows = [{"content": f"text {i} " * 30, "doc_id": i, "url": f"u{i}"} for i in range(50)]
    (data / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [*run_command(SAMPLE_CONFIG, out, "input.text_field=body")[3:], "--input", str(data)]
    code, _, err = call(argv)
    assert code == 2, err
    assert "Traceback" not in err
    assert (
        f"config error: input: text_field 'body' not in the first record of {data}/a.jsonl;"
        " columns: ['content', 'doc_id', 'url']"
    ) in err.splitlines()
    assert not list(out.glob("sample/_work/units/*/*")) and versions(out) == []


def named_sources(tmp_path: Path, data: Path, out: Path, **includes: str):
    """The shipped two-source config over `data`, one source per name -> include glob."""
    raw = yaml.safe_load(SOURCES_CONFIG.read_text())
    template = raw["inputs"][0]
    raw["inputs"] = [
        {**template, "name": name, "uri": str(data), "include": [glob]}
        for name, glob in includes.items()
    ]
    raw["tokenize"]["tokenizer"] = str(TOKENIZER)
    path = tmp_path / f"{'-'.join(includes)}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path, output_uri=str(out))


def test_a_renamed_or_dropped_source_is_refused_and_allow_empty_publishes_it(ray_local, tmp_path):
    """Found item 5: a source of the newest version that the new one lacks counts as shrunk
    to 0; the listing is refused before any read."""
    data, out = tmp_path / "in", tmp_path / "out"
    write_docs(data / "a", "a.jsonl", 4, "a")
    write_docs(data / "b", "b.jsonl", 4, "b")
    run_pipeline(named_sources(tmp_path, data, out, a="a/**", b="b/**"), show_progress=False)
    [first] = versions(out)
    read = json.loads((out / "sample" / first / "manifest.json").read_text())["sources"]
    was = f"{read['b']['input_bytes']:,} bytes, 4 documents"
    renamed = named_sources(tmp_path, data, out, a="a/**", bee="b/**")
    dropped = named_sources(tmp_path, data, out, a="a/**")
    for cfg in (renamed, dropped):
        with pytest.raises(RunError) as e:
            run_pipeline(cfg, show_progress=False)
        assert e.value.exit_code == 3
        assert str(e.value) == (
            f"the new version shrinks or holds an empty source against the newest version"
            f" {first}: source b ({data}): not a source of the new version (renamed or dropped:"
            f" shrunk to 0 from {was}). Nothing was committed; `run --allow-empty` publishes"
            " it on purpose."
        )
    assert versions(out) == [first]
    published = run_pipeline(dropped, show_progress=False, allow_empty=True)
    assert list(published.manifest["sources"]) == ["a"]
    assert versions(out) == [first, published.version.name]


def test_a_source_whose_every_record_is_a_duplicate_is_refused(ray_local, tmp_path):
    """Found item 5: every record of source b is a copy of one of a's (dedup keeps the first
    listed source's), so b would be published with 0 documents."""
    data, out = tmp_path / "in", tmp_path / "out"
    write_docs(data / "a", "a.jsonl", 3, "same")
    write_docs(data / "b", "b.jsonl", 3, "same")
    cfg = named_sources(tmp_path, data, out, a="a/**", b="b/**")
    with pytest.raises(RunError) as e:
        run_pipeline(cfg, show_progress=False)
    assert e.value.exit_code == 3
    assert str(e.value) == (
        f"the new version shrinks or holds an empty source: inputs[1] (b) {data}: 0 documents"
        " out of 3 read (3 duplicates). Nothing was committed; `run --allow-empty` publishes"
        " it on purpose."
    )
    assert versions(out) == []


def test_a_takedown_that_empties_the_version_needs_allow_empty(ray_local, tmp_path):
    """Found item 5: `remove` of every id commits nothing without `remove --allow-empty`."""
    data, out = tmp_path / "in", tmp_path / "out"
    write_docs(data, "a.jsonl", 3, "a")
    cfg = load_config(SAMPLE_CONFIG, input_uri=str(data), output_uri=str(out))
    parent = run_pipeline(cfg, show_progress=False).version
    ids = documents.read_index(parent)["doc_id"].to_pylist()
    with pytest.raises(RunError) as e:
        remove_documents(parent, ids)
    assert e.value.exit_code == 3
    assert str(e.value) == (
        f"the new version shrinks or holds an empty source against the newest version"
        f" {parent.name}: source sample ({data}): 0 documents out of 3 read (3 taken down), 3"
        " before. Nothing was committed; `remove --allow-empty` publishes it on purpose."
    )
    assert versions(out) == [parent.name]
    (tmp_path / "ids").write_text("".join(f"{i}\n" for i in ids))
    code, _, err = call(["remove", parent.uri, "--ids", str(tmp_path / "ids"), "--allow-empty"])
    assert code == 0, err
    [_, child] = versions(out)
    manifest = json.loads((out / "sample" / child / "manifest.json").read_text())
    assert manifest["counts"]["docs_out"] == 0 and manifest["removal"]["documents"] == 3

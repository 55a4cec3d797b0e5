"""No empty or vanished version (run/input_guard.py): an input that lists nothing, keeps no
document or shrank past run.max_input_shrink is refused with exit 3 and nothing committed;
`run --allow-empty` publishes it on purpose; retention's own raw deletions are named."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from support import REPO, SAMPLE_CONFIG, SOURCES_CONFIG, TOKENIZER, own_ray_env, run_command

from pipeline.config import load_config
from pipeline.core.layout import is_version_name
from pipeline.retention.apply import apply_plan
from pipeline.retention.plan import plan_retention
from pipeline.run.driver import run_pipeline
from pipeline.run.results import RunError

pytestmark = pytest.mark.slow  # every test runs the pipeline (conftest.py)


def versions(out: Path, name: str = "sample") -> list[str]:
    dataset = out / name
    if not dataset.exists():
        return []
    return sorted(p.name for p in dataset.iterdir() if is_version_name(p.name))


def write_docs(folder: Path, name: str, n: int, tag: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"id": f"{tag}{i}", "text": f"{tag} document {i} " * 40}) for i in range(n)]
    (folder / name).write_text("\n".join(rows) + "\n")


def test_an_empty_folder_is_refused_and_allow_empty_publishes_it(tmp_path):
    empty, out = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    (empty / "_SUCCESS").write_text("")
    argv = run_command(SAMPLE_CONFIG, out)
    proc = subprocess.run(
        [*argv, "--input", str(empty)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=own_ray_env(),
    )
    assert proc.returncode == 3, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert f"input {empty}: no file to read (include ['**'], exclude ['README.md'];" in lines[0]
    assert "skipped: 1 marker)" in lines[0]
    assert "--allow-empty" in lines[0] and "Nothing was committed" in lines[0]
    assert versions(out) == []
    proc = subprocess.run(
        [*argv, "--input", str(empty), "--allow-empty"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=own_ray_env(),
    )
    assert proc.returncode == 0, proc.stderr
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


def test_a_wrong_text_field_is_exit_2_before_any_read(tmp_path):
    """Found item 7: the listing's probe of the first record (ingest/field_probe.py)."""
    data, out = tmp_path / "in", tmp_path / "out"
    data.mkdir()
    rows = [{"content": f"text {i} " * 30, "doc_id": i, "url": f"u{i}"} for i in range(50)]
    (data / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [*run_command(SAMPLE_CONFIG, out, "input.text_field=body"), "--input", str(data)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=own_ray_env())
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        f"config error: input: text_field 'body' not in the first record of {data}/a.jsonl;"
        " columns: ['content', 'doc_id', 'url']"
    ) in proc.stderr.splitlines()
    assert not list(out.glob("sample/_work/units/*/*")) and versions(out) == []

"""Curation errors at the command line: what the config names is checked when it loads (exit 2,
one line, before Ray starts and before anything is written), and a `python` step that
misbehaves during `run` or `curate-preview` stops it in one line naming the step and where
(exit 3, nothing committed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import chain_config
from support.cli import call

pytestmark = pytest.mark.slow

HOOKS = "pipeline.testing.curate_hooks"


def config(tmp_path: Path, chain: list) -> Path:
    return chain_config(tmp_path, chain, split={"valid_fraction": 0.0})


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", ["run", "curate-preview"])
def test_a_file_or_function_the_chain_names_is_checked_at_load(tmp_path, command):
    (tmp_path / "bench.txt").write_bytes(("caf\xe9 " * 20).encode("latin-1"))
    for chain, message in (
        ([{"c4": {"bad_words_file": "missing.txt"}}], "key curate[0].c4: cannot read"),
        ([{"decontaminate": {"benchmarks": ["bench.txt"]}}],
         "key curate[0].decontaminate: " + str(tmp_path / "bench.txt") + " is not UTF-8 text"),
        ([{"python": {"callable": f"{HOOKS}:nowhere"}}], f"module {HOOKS} has no nowhere"),
    ):  # fmt: skip
        code, _, err = call([command, "--config", str(config(tmp_path, chain))])
        assert code == 2, err
        assert message in one_line(err)
        assert not (tmp_path / "out").exists()


def test_a_python_step_that_raises_stops_the_run_naming_it_and_the_unit(ray_local, tmp_path):
    code, _, err = call(["run", "--config", str(config(tmp_path, [
        {"python": {"callable": f"{HOOKS}:raises"}}])), "--quiet"])  # fmt: skip
    assert code == 3, err
    line = one_line(err)
    assert f"python step '{HOOKS}:raises' raised ValueError: no column 'lang'" in line
    assert "(unit " in line and "nothing was committed" in line
    assert not list((tmp_path / "out").rglob("manifest.json"))


def test_a_numpy_bool_array_filters_a_run(ray_local, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "b.jsonl").write_text(json.dumps({"id": "short", "text": "tiny"}) + "\n")
    code, out, err = call(["run", "--config", str(config(tmp_path, [
        {"python": {"callable": f"{HOOKS}:keep_long"}}])), "--quiet"])  # fmt: skip
    assert code == 0, err
    manifest = json.loads(next((tmp_path / "out").rglob("manifest.json")).read_text())
    assert manifest["counts"]["removed_filtered"] == {"python": 1}


def test_a_python_step_that_misbehaves_stops_the_preview_in_one_line(tmp_path):
    for hook, message in (("raises", "raised ValueError"), ("ints", "got 6 int"),
                          ("nothing", "returned None")):  # fmt: skip
        code, out, err = call(["curate-preview", "--config", str(config(tmp_path, [
            {"python": {"callable": f"{HOOKS}:{hook}"}}]))])  # fmt: skip
        assert code == 3, err
        line = one_line(err)
        assert f"python step '{HOOKS}:{hook}'" in line and message in line
        assert "on the sample of source" in line and not out

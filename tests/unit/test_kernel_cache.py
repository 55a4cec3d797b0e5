"""dedup/kernel_cache.py: compiled loops are found by their file's content, not its path, so a
second checkout (or a Ray job's working dir) loads what the first compiled."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

# A loop of the package's shape (njit, cache=True) in a file of its own, so the test compiles
# in a second, not the dedup kernels' ~25 s.
_PROBE = """
import numba

from pipeline.dedup import text_kernel  # noqa: F401 - what the package's kernels import first


@numba.njit(cache=True)
def plus_one(x):
    return x + 1
"""

_CALL = (
    "import json; from pipeline.dedup import cache_probe as p; p.plus_one(1);"
    " s = p.plus_one.stats;"
    " print(json.dumps([sum(s.cache_hits.values()), sum(s.cache_misses.values())]))"
)


def _checkout(root: Path) -> Path:
    """A copy of the package at a path of its own, with the probe in it."""
    shutil.copytree(
        REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    (root / "pipeline/dedup/cache_probe.py").write_text(_PROBE)
    return root


def _hits_and_misses(checkout: Path, cache: Path) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env |= {"PYTHONPATH": str(checkout), "PIPELINE_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _CALL], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_checkout_loads_what_the_first_compiled(tmp_path):
    cache = tmp_path / "cache"
    first, second = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    assert _hits_and_misses(first, cache) == [0, 1]  # compiled, and written to the cache
    assert _hits_and_misses(second, cache) == [1, 0]  # another path: loaded, not compiled
    assert not list((second / "pipeline/dedup").glob("__pycache__/*.nb?"))  # nothing in-tree
    (second / "pipeline/dedup/cache_probe.py").write_text(_PROBE + "\n# edited\n")
    assert _hits_and_misses(second, cache) == [0, 1]  # an edit: compiled afresh


_CURATE_FOLDERS = (
    "import json; from pipeline.curate import ngram_kernel, stats_kernel, lid_kernel;"
    " print(json.dumps([ngram_kernel._tally._cache._cache_path,"
    " stats_kernel._words._cache._cache_path, lid_kernel._predict_all._cache._cache_path]))"
)


def test_curation_loops_are_cached_in_the_shared_folder_whatever_is_imported_first(tmp_path):
    """gopher's, the batch measures' and the language step's loops, imported before any dedup
    module (as a worker that reads imports them), are cached in the content-keyed folder like
    dedup's: a new checkout or job dir does not compile them again."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env |= {"PYTHONPATH": str(REPO), "PIPELINE_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _CURATE_FOLDERS], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    folders = [Path(f) for f in json.loads(done.stdout.splitlines()[-1])]
    assert [f.parent for f in folders] == [tmp_path / "numba"] * 3, folders
    assert [f.name.split("-")[0] for f in folders] == ["ngram_kernel", "stats_kernel", "lid_kernel"]


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority takes CAP_SYS_NICE")
def test_once_ray_is_up_the_compile_runs_at_the_drivers_priority():
    """The compile child starts at nice 10 (behind Ray's start); once Ray is up the workers
    wait for it, and `hurry` gives it the driver's priority back."""
    from pipeline.dedup import kernel_cache

    niced = "import os, sys; os.nice(10); print(flush=True); sys.stdin.read()"  # until stopped
    child = subprocess.Popen(
        [sys.executable, "-c", niced], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        child.stdout.readline()  # it has lowered its priority
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == mine + 10
        kernel_cache.hurry(child)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == mine
    finally:
        kernel_cache.finish(child)
    assert child.returncode is not None


def test_each_curation_step_is_marked_ready_on_its_own(tmp_path, monkeypatch):
    """A run is ready when dedup's kernels and each of its steps' are: a step warmed once
    is not compiled again for a chain that adds another one."""
    from pipeline.dedup import kernel_cache

    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path))
    assert not kernel_cache.ready()
    kernel_cache.mark_ready(("language", "gopher_quality"))
    assert kernel_cache.ready() and kernel_cache.ready(("gopher_quality", "language"))
    assert not kernel_cache.ready(("language", "c4"))  # c4 never warmed here
    assert kernel_cache.warm_in_background(("language",)) is None  # nothing left to compile


def test_warm_compiles_a_runs_kernels_once_so_that_the_run_starts_no_compile(capsys):
    from pipeline.cli import main as cli
    from pipeline.curate.warm import step_names
    from pipeline.dedup import kernel_cache

    chains = [[{"language": {"languages": ["en"]}}, {"gopher_quality": {}}], [{"language": {}}]]
    steps = tuple(step_names(chains))
    assert steps == ("language", "gopher_quality")
    assert cli.main(["warm", *steps]) == 0
    out = capsys.readouterr().out
    assert "already compiled" in out or "into" in out and "dedup, language, gopher_quality" in out
    assert kernel_cache.ready(steps)
    assert kernel_cache.warm_in_background(steps) is None


def test_a_loop_file_keyed_also_on_the_file_it_calls_gets_a_new_folder_when_that_one_changes(
    tmp_path,
):
    from pipeline.dedup import kernel_cache

    caller, callee = tmp_path / "caller.py", tmp_path / "callee.py"
    caller.write_text("x = 1\n")
    callee.write_text("y = 1\n")
    alone = kernel_cache._content_key(caller)
    kernel_cache.key_also(str(caller), "callee.py")
    keyed = kernel_cache._content_key(caller)
    callee.write_text("y = 2\n")
    assert len({alone, keyed, kernel_cache._content_key(caller)}) == 3


def test_warm_refuses_an_unknown_step_in_one_line(capsys):
    from pipeline.cli import main as cli

    assert cli.main(["warm", "language", "no_such_step"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_step" in err[0] and "gopher_quality" in err[0]

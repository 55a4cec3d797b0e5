"""bench scaling's --code: which folder goes on the child's PYTHONPATH (bench/scaling.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.scaling import code_root


def _checkout(root: Path) -> Path:
    (root / "pipeline").mkdir(parents=True)
    (root / "pipeline" / "__init__.py").write_text("")
    return root


def test_a_checkouts_root_and_its_package_folder_name_the_same_code(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "other")
    assert code_root(root) == root.resolve()
    assert code_root(root / "pipeline") == root.resolve()


def test_a_folder_without_the_package_is_refused(tmp_path: Path) -> None:
    root = _checkout(tmp_path / "other")
    with pytest.raises(ValueError, match="no pipeline package"):
        code_root(root / "pipeline" / "pipeline")
    with pytest.raises(ValueError, match="no pipeline package"):
        code_root(tmp_path / "missing")

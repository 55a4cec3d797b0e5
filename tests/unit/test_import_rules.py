"""The config assembles the retention and prices sections, so retention/ and report/ must not
import the config back at run time (a type-only import under TYPE_CHECKING is fine)."""

from __future__ import annotations

import ast
from pathlib import Path

import pipeline

PACKAGE = Path(pipeline.__file__).parent


def runtime_imports(path: Path) -> set[str]:
    """Modules `path` imports when it runs: every import outside `if TYPE_CHECKING:`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def test_retention_and_report_do_not_import_the_config_back():
    for package in ("retention", "report"):
        for path in sorted((PACKAGE / package).glob("*.py")):
            assert "pipeline.config" not in runtime_imports(path), path

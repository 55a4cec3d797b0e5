"""A module docstring says what the module owns and the contract it keeps, in at most 25 lines
(the formats and the reasoning live in docs/); the product's text says what is true now, not
how it came to be (history is in the commit messages)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support import REPO

import pipeline

PACKAGE = Path(pipeline.__file__).parent
MAX_LINES = 25
# config/reference.py builds docs/configuration.md's retention section from this one
GENERATED_FROM = {"retention/policy.py": 30}
HISTORY = re.compile(
    r"\b(this|last|previous|earlier) (session|round)\b|\bbefore (this|the) (change|session|round)"
    r"|\bbefore issue\b",
    re.IGNORECASE,
)


def test_module_docstrings_are_contracts_of_at_most_25_lines():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        name = str(path.relative_to(PACKAGE))
        if len(doc.splitlines()) > GENERATED_FROM.get(name, MAX_LINES):
            long[name] = len(doc.splitlines())
    assert long == {}


def test_the_product_text_narrates_no_history():
    texts = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *PACKAGE.rglob("*.py")]
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in texts
             for m in HISTORY.finditer(p.read_text(errors="ignore"))]  # fmt: skip
    assert found == []

"""Every path and module a document names exists: docs drift when code moves, and a newcomer
who follows a dead link stops there."""

import importlib.util
import re
from pathlib import Path

from support import REPO

# the documents a reader is pointed at (generated outputs and the sample's own notes included)
DOCS = sorted(
    [REPO / "README.md", REPO / "jobs" / "README.md", REPO / "sample" / "README.md"]
    + list((REPO / "docs").glob("*.md"))
)
TOP = ("pipeline", "tests", "jobs", "configs", "docs", "sample", ".ci")
# a path: one of the top folders, then path characters, ending in a word character
_TOPS = "|".join(re.escape(t) for t in TOP)
PATH = re.compile(rf"(?<![\w./-])((?:{_TOPS})/[\w./-]*\w)")
# a dotted module or attribute: pipeline.x.y[.Name]
MODULE = re.compile(r"(?<![\w./-])(pipeline(?:\.\w+)+)(?![\w/])")  # not a tag like `x.y/1`
# placeholders a document may use in a path (OUT/<name>/<version>, NNNNN, ...)
PLACEHOLDER = re.compile(r"[<*{]|NNNNN|XXXX")


def _path_exists(name: str, doc_dir: Path = REPO) -> bool:
    """From the repository root, or from the document's own folder (sample/README.md's docs/)."""
    return any(p.exists() or Path(f"{p}.py").exists() for p in (REPO / name, doc_dir / name))


def _module_exists(dotted: str) -> bool:
    """`pipeline.a.b` is a module, or `pipeline.a` is a module with an attribute `b`."""
    module, _, attr = dotted.rpartition(".")
    if not _is_module(module):
        return False
    return _is_module(dotted) or hasattr(importlib.import_module(module), attr)


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:  # a parent is missing, or is a module rather than a package
        return False


def _without_console_output(text: str) -> str:
    """A console transcript's output lines (the lines after a `$ ` command, up to a blank line)
    show data — document ids like `docs/100114`, input paths relative to a source — not paths
    of this repository."""
    kept, in_output = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("$ "):
            kept.append(re.sub(r"--id \S+", "", line))  # a document id, not a path
            in_output = True
        elif not stripped or stripped.startswith("```"):
            kept.append(line)
            in_output = False
        elif not in_output:
            kept.append(line)
    return "\n".join(kept)


def _names(text: str) -> tuple[set[str], set[str]]:
    text = _without_console_output(text)
    paths = {m for m in PATH.findall(text) if not PLACEHOLDER.search(m)}
    modules = {m.rstrip(".") for m in MODULE.findall(text)}
    return paths, modules


def test_every_documented_path_and_module_exists():
    missing = []
    for doc in DOCS:
        if not doc.exists():
            continue
        paths, modules = _names(doc.read_text(encoding="utf-8"))
        rel = doc.relative_to(REPO)
        missing += [f"{rel}: {p}" for p in sorted(paths) if not _path_exists(p, doc.parent)]
        missing += [f"{rel}: {m}" for m in sorted(modules) if not _module_exists(m)]
    assert not missing, "documents name what does not exist:\n" + "\n".join(missing)


def test_the_checker_finds_a_dead_path_and_a_dead_module():
    paths, modules = _names(
        "see `tests/nowhere/test_gone.py`, `pipeline/run/driver.py` and "
        "`pipeline.run.ray_env.WORKER_ENV`, `pipeline.nothing.here`"
    )
    assert paths == {"tests/nowhere/test_gone.py", "pipeline/run/driver.py"}
    assert not _path_exists("tests/nowhere/test_gone.py")
    assert _path_exists("pipeline/run/driver.py")
    assert _module_exists("pipeline.run.ray_env.WORKER_ENV")
    assert not _module_exists("pipeline.nothing.here")
    assert _module_exists("pipeline.formats.manifest")

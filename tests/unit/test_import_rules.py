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
            found.add(node.module)  # and `from package import module` as package.module:
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


# The modules that assemble the whole config (the sections alone import neither package).
CONFIG_MODEL = {
    "pipeline.config",
    "pipeline.config.loader",
    "pipeline.config.model",
    "pipeline.config.path_checks",
}


def test_retention_and_report_do_not_import_the_config_back():
    for package in ("retention", "report"):
        for path in sorted((PACKAGE / package).glob("*.py")):
            assert not runtime_imports(path) & CONFIG_MODEL, path


RUN = PACKAGE / "run"
STAGES = {f"pipeline.run.{p.stem}" for p in RUN.glob("*_stage.py")}
TASK_MODULES = (
    "read_tasks",
    "exact_dedup_tasks",
    "merge_tasks",
    "tokenize_tasks",
    "pack_tasks",
    "neardup",
    "near_signing",
)


def test_run_layers_import_downwards_only():
    """driver -> stages -> waves -> task bodies: a stage never imports the driver, the wave
    runner no stage, and a task body (what runs on a worker) neither a stage, the runner nor
    the driver."""
    assert len(STAGES) >= 5, STAGES
    for path in RUN.glob("*_stage.py"):
        assert "pipeline.run.driver" not in runtime_imports(path), path
    assert not runtime_imports(RUN / "waves.py") & (STAGES | {"pipeline.run.driver"})
    driver_side = STAGES | {"pipeline.run.waves", "pipeline.run.driver"}
    for name in TASK_MODULES:
        assert not runtime_imports(RUN / f"{name}.py") & driver_side, name


def _imports_of(package: str) -> dict[Path, set[str]]:
    return {p: runtime_imports(p) for p in sorted((PACKAGE / package).glob("*.py"))}


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == f"pipeline.{p}" or module.startswith(f"pipeline.{p}.") for p in packages)


def test_formats_import_neither_tokens_nor_run():
    for path, modules in _imports_of("formats").items():
        assert not [m for m in modules if _under(m, ("tokens", "run"))], path


# A pass-1 task returns the run's task results (run/results.py, timed by run/timer.py), its
# done marker one of them (run/markers.py): the only parts of run the exchange may import.
RUN_RESULTS = ("run.results", "run.timer", "run.markers")


def test_exchange_imports_neither_run_tokens_nor_dedup():
    for path, modules in _imports_of("exchange").items():
        banned = [
            m
            for m in modules
            if _under(m, ("run", "tokens", "dedup")) and not _under(m, RUN_RESULTS)
        ]
        assert not banned, (path, banned)


def all_imports(path: Path) -> set[str]:
    """Every module `path` names in an import anywhere: at the top, in a function, or for type
    checking only (a cycle through any of them still ties the modules together)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(component) > 1:
                        cycles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return cycles


def package_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in all_imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_import_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_the_package_has_no_import_cycle():
    """Not even through a type-only or a function-level import: each module can be read, and
    moved, knowing only what it imports."""
    graph = package_graph()
    assert len(graph) > 100, len(graph)
    assert import_cycles(graph) == []


CLI = PACKAGE / "cli"


def test_cli_commands_import_neither_main_nor_each_other():
    """cli/main.py wires the command modules' parsers; a command module takes what commands
    share from cli/common.py only, never from main or another command's module (and common
    from no command): each command reads, and moves, alone."""
    commands = {f"pipeline.cli.{p.stem}" for p in CLI.glob("*_commands.py")}
    assert len(commands) >= 6, commands
    for path in CLI.glob("*_commands.py"):
        others = commands - {f"pipeline.cli.{path.stem}"}
        assert not all_imports(path) & (others | {"pipeline.cli.main"}), path
    assert not all_imports(CLI / "common.py") & (commands | {"pipeline.cli.main"})


REPORT = PACKAGE / "report"


def test_the_dry_run_imports_downwards_only():
    """report/: dry_run_assumptions (figures) <- dry_run_stages (each stage's formulas) <- dry_run
    (the plan); dry_run_printout prints a plan and makes none: no layer imports one above it."""
    layers = ["dry_run_assumptions", "dry_run_stages", "dry_run"]
    for i, name in enumerate(layers):
        above = {f"pipeline.report.{n}" for n in [*layers[i + 1 :], "dry_run_printout"]}
        assert not all_imports(REPORT / f"{name}.py") & above, name
    assert "pipeline.report.dry_run" not in all_imports(REPORT / "dry_run_printout.py")
    figures = all_imports(REPORT / "dry_run_assumptions.py")
    assert not [m for m in figures if m.startswith("pipeline.")], figures

"""No import cycles among DayOne's modules (tasks/ and plugins/), counting every import, also
the ones inside functions: a cycle hidden in a function is still two modules that cannot be
understood, tested or moved one without the other."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("garbage_collected")  # tests/conftest.py says why

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"tasks": ROOT, "dayone_airflow": ROOT / "plugins"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, base in PACKAGES.items():
        for path in (base / package).rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The project modules an import statement names (a package's submodules when imported by name)."""
    names: set[str] = set()
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        names = {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {n for n in names if n in known}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            edges |= _imported(node, module, is_package, known)
        # A package importing its own submodules (to register or re-export them) is how packages work,
        # and a submodule importing its package's __init__ is implied by Python: neither is a cycle of ours.
        graph[module] = {m for m in edges if m != module and not m.startswith(module + ".")
                         and not module.startswith(m + ".")}
    return graph


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "tasks.config" in graph["tasks.steps.registry"]
    assert "tasks.scenarios.perf" in graph["tasks.steps.engine_steps"]  # imported inside a step function
    assert len(graph) > 80


def test_no_import_cycles():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise AssertionError(f"import cycle: {cycle}") from None


def test_a_cycle_would_be_found():
    graph = import_graph()
    graph["tasks.config"] = graph["tasks.config"] | {"tasks.steps.registry"}  # the registry imports config: now a cycle
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError:
        return
    raise AssertionError("a planted cycle went unnoticed")


# The run's storage, its table partitions and its documents.
RUN_STATE = {"tasks.run_storage", "tasks.partitions", "tasks.run_documents"}
# The load client's edges to a run, the only modules of tasks/load that may reach run state: rounds.py writes a
# round's rows into the run's partitions and reads the engine's hardware document; cli.py (`dayone bench`)
# creates a run in its output directory.
LOAD_RUN_EDGES = {"tasks.load.rounds", "tasks.load.cli"}


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_the_load_client_runs_without_a_run():
    """The client, its connections, shards, plans and figures reach no run state, directly or through another
    module: its process plumbing (tasks/pipes.py) is not the run's."""
    graph = import_graph()
    client = sorted(m for m in graph if m.startswith("tasks.load.") and m not in LOAD_RUN_EDGES)
    assert {"tasks.load.client", "tasks.load.http", "tasks.load.shards"} <= set(client)
    reaching = {m: sorted(_reached(graph, m) & RUN_STATE) for m in client}
    assert not any(reaching.values()), f"load client modules reaching run state: {reaching}"


def test_the_cli_starts_without_the_openai_sdk():
    """`dayone` starts once per step in a runner pod: the SDK (0.4 s of its start, and more with what it pulls
    in) is imported by the one check that drives it, when it runs."""
    import subprocess
    import sys

    started = subprocess.run([sys.executable, "-X", "importtime", "-m", "tasks.cli", "--help"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in started.stderr.splitlines() if line.startswith("import time:")}
    assert "tasks.checks.openai_sdk" in imported  # the check is registered at start ...
    assert "openai" not in imported  # ... and its SDK is not loaded

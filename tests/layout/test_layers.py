"""The house's one layer order, and the import rules it implies, checked on the code's own imports (every
import counts, also those inside functions and under TYPE_CHECKING: a module named there is still one that
must be understood first).

LAYERS is the order, lowest first; docs/ARCHITECTURE.md states it and says what each package holds. A module
may import its own package and any package of a lower layer; packages that share a layer (the stages) do
not import each other; nothing imports a higher layer. The Airflow glue (plugins/) stands on top of tasks/."""

from __future__ import annotations

import ast
import functools
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("garbage_collected")  # tests/conftest.py says why

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"tasks": ROOT, "dayone_airflow": ROOT / "plugins"}

# Lowest first. One entry a layer; a layer of several packages holds siblings that must not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tasks.core",),  # names every stage shares; polling, ports, processes, pipes, desensitize
    ("tasks.config",),  # the run config, its presets and variants, the simulator's profile, OpenWebUI's settings
    ("tasks.state",),  # the run's storage, documents, partitions, table schemas, the local S3 server
    ("tasks.engines",),  # the dialects (adapters), an engine's context and access, the readiness wait, streams
    ("tasks.telemetry",),  # metrics scrapes and counter windows, GPU telemetry, hardware
    ("tasks.stats",),  # every figure's maths: percentiles, intervals, effects, history, publication rules
    ("tasks.sim",),  # the engine simulator
    ("tasks.k8s",),  # manifests, the API, rollouts, RBAC, image pinning
    ("tasks.targets",),  # where engines run: local processes, Kubernetes
    ("tasks.load",),  # the load client, its timing, prompts, shards
    ("tasks.traffic",),  # traces and datasets
    ("tasks.checks",),  # the functional checks
    ("tasks.scenarios", "tasks.evidence", "tasks.quality", "tasks.openwebui"),  # the measuring stages
    ("tasks.publish",),  # validate, archive, the digest catalog
    ("tasks.report",),  # the report
    ("tasks.compare",),  # the nightly comparison
    ("tasks.steps",),  # the step registry, execution, the run context, lanes, runner pods
    ("tasks.cli",),  # `dayone` and its commands
    ("dayone_airflow",),  # the Airflow glue
)


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
    """Module -> the project modules it imports; a fresh copy each call (tests plant edges in it)."""
    return {module: set(edges) for module, edges in _parsed_graph().items()}


@functools.cache
def _parsed_graph() -> dict[str, set[str]]:
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


def layer_of(module: str) -> tuple[int, str]:
    """(the layer's index, the package) of a module; the bare `tasks` package is the ground."""
    for index, layer in enumerate(LAYERS):
        for package in layer:
            if module == package or module.startswith(package + "."):
                return index, package
    if module == "tasks":
        return -1, "tasks"
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS (tests/layout/test_layers.py) "
                         "and to docs/ARCHITECTURE.md's layer table")


def violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        mine, my_package = layer_of(module)
        for other in sorted(imported):
            theirs, their_package = layer_of(other)
            if their_package == my_package:
                continue
            if theirs > mine:
                found.append(f"{module} imports {other}: {their_package} is a higher layer than {my_package}")
            elif theirs == mine:
                found.append(f"{module} imports {other}: {my_package} and {their_package} are siblings")
    return found


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "tasks.config" in graph["tasks.steps.registry"]
    assert "tasks.scenarios.perf" in graph["tasks.steps.engine_steps"]  # imported inside a step function
    assert len(graph) > 80


def test_every_module_is_in_a_layer():
    for module in import_graph():
        layer_of(module)


def test_nothing_imports_a_higher_layer():
    found = violations(import_graph())
    assert not found, "imports against the layer order:\n" + "\n".join(found)


def test_an_upward_import_would_be_found():
    graph = import_graph()
    graph["tasks.state.storage"] = graph["tasks.state.storage"] | {"tasks.steps.registry"}  # state reaching up
    graph["tasks.scenarios.perf"] = graph["tasks.scenarios.perf"] | {"tasks.quality.run"}  # a sibling stage
    found = violations(graph)
    assert any(v.startswith("tasks.state.storage imports tasks.steps.registry") for v in found)
    assert any(v.startswith("tasks.scenarios.perf imports tasks.quality.run") for v in found)


def test_a_planted_upward_import_in_a_file_fails_the_rule(tmp_path):
    """The rule read from source: a module of a low layer that imports the step registry is caught."""
    planted = tmp_path / "tasks" / "core"
    planted.mkdir(parents=True)
    (planted / "planted.py").write_text("def f():\n    from tasks.steps.registry import STEPS\n    return STEPS\n")
    module = "tasks.core.planted"
    tree = ast.parse((planted / "planted.py").read_text())
    known = set(import_graph()) | {module}
    edges = set().union(*(_imported(n, module, False, known) for n in ast.walk(tree)))
    assert violations({module: edges}) == [
        "tasks.core.planted imports tasks.steps.registry: tasks.steps is a higher layer than tasks.core"]


def test_no_import_cycles():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise AssertionError(f"import cycle: {cycle}") from None


def test_the_architecture_page_states_the_same_order():
    """docs/ARCHITECTURE.md's layer table lists the packages in LAYERS' order."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text[text.index("## The layers"):].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    stated = [tuple(p.strip(" `/").replace("/", ".") for p in row.split("|")[1].split(",")) for row in rows]
    wanted = [tuple(p.removeprefix("tasks.") if p.startswith("tasks.") else "plugins.dayone_airflow" for p in layer)
              for layer in LAYERS]
    assert stated == wanted


# The run's storage, its table partitions and its documents.
RUN_STATE = {"tasks.state.storage", "tasks.state.partitions", "tasks.state.documents"}
# The load client's edges to a run, the only modules of tasks/load that may reach run state: rounds.py writes a
# round's rows into the run's partitions and reads the engine's hardware document.
LOAD_RUN_EDGES = {"tasks.load.rounds"}


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
    module: its process plumbing (tasks/core/pipes.py) is not the run's."""
    graph = import_graph()
    client = sorted(m for m in graph if m.startswith("tasks.load.") and m not in LOAD_RUN_EDGES)
    assert {"tasks.load.client", "tasks.load.http", "tasks.load.shards"} <= set(client)
    reaching = {m: sorted(_reached(graph, m) & RUN_STATE) for m in client}
    assert not any(reaching.values()), f"load client modules reaching run state: {reaching}"


def test_the_cli_starts_without_the_openai_sdk():
    """`dayone` starts once per step in a runner pod: the SDK (0.4 s of its start, and more with what it pulls
    in) is imported by the one check that drives it, when it runs, not when the checks are registered."""
    started = subprocess.run([sys.executable, "-m", "tasks.cli", "--help"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    registered = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tasks.cli.checks, tasks.checks"],
                                cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert registered.returncode == 0, registered.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in registered.stderr.splitlines()
                if line.startswith("import time:")}
    assert "tasks.checks.openai_sdk" in imported  # the check is registered ...
    assert "openai" not in imported  # ... and its SDK is not loaded


# Test folders that are not one package's: each names what it runs, across packages.
CROSS_CUTTING_TESTS = {
    "layout": "the layer order itself",
    "independent": "plain servers written for the test, held against whole steps and runs",
    "product": "the pipeline's products: plan, nightly, lanes, the form",
    "verdicts": "a failing or wrong-answering engine never wins, in the choice and the nightly",
    "experiments": "A/B experiments end to end",
    "realengine": "the real engines: llama.cpp, vLLM, SGLang",
    "reliability": "faults, kills and hostile input across the pipeline",
    "registry": "a real OCI registry: image pinning and labels",
    "distributed": "a Celery deployment whose workers are hosts of their own",
    "ui": "make ui's stack in a browser",
    "live": "what a person sees while a run goes",
    "fixtures": "recorded data",
}


def test_the_tests_mirror_the_layout():
    """A test folder is named for the package of tasks/ it tests, or is a named cross-cutting suite."""
    packages = {p.name for p in (ROOT / "tasks").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith("__")}
    stray = sorted(folders - packages - set(CROSS_CUTTING_TESTS))
    assert not stray, f"test folders named for no package of tasks/: {stray} (rename, or add to CROSS_CUTTING_TESTS)"

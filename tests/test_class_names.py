"""A class name says one thing: no two classes of DayOne's library and plugins share a name (the load
client's RequestDestination is where requests go; tasks/targets' Target is where an engine runs). The
simulator (tasks/sim) stands in for an engine, a program of its own, and keeps its own names."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("garbage_collected")  # tests/conftest.py says why

ROOT = Path(__file__).resolve().parents[1]
SIMULATOR = ROOT / "tasks" / "sim"


def test_no_two_classes_share_a_name():
    defined: dict[str, list[str]] = defaultdict(list)
    for folder in ("tasks", "plugins"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if SIMULATOR in path.parents:
                continue
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef):
                    defined[node.name].append(str(path.relative_to(ROOT)))
    assert len(defined) > 50
    shared = {name: paths for name, paths in defined.items() if len(paths) > 1}
    assert not shared, f"class names defined more than once: {shared}"

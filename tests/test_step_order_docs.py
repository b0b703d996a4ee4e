"""The step order is stated once, in docs/ARCHITECTURE.md ("The step order"), and it is the registry's;
the other places that describe the run point there instead of writing the order out again."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A list item that opens with a step name: `1. \`plan\`` at the top, `   - \`deploy\`` per engine.
_ITEM = re.compile(r"^( *)(?:\d+\.|-) `([a-z_]+)`(.*)$", re.M)


def _documented() -> list[tuple[str, bool, bool]]:
    """(step, per engine, nightly only) for each step the docs' order lists, in its order."""
    text = (REPO / "docs/ARCHITECTURE.md").read_text(encoding="utf-8")
    assert "\n## The step order\n" in text, "docs/ARCHITECTURE.md has no section 'The step order'"
    section = text.split("\n## The step order\n", 1)[1].split("\n## ", 1)[0]
    return [(name, bool(indent), "nightly only" in rest) for indent, name, rest in _ITEM.findall(section)]


def test_the_documented_step_order_is_the_registrys():
    from tasks.steps.registry import STEPS

    assert [name for name, _, _ in _documented()] == list(STEPS)


def test_the_documented_per_engine_and_nightly_only_steps_are_the_registrys():
    from tasks.steps.registry import STEPS

    documented = _documented()
    assert [n for n, per_engine, _ in documented if per_engine] == [n for n, s in STEPS.items() if s.per_engine]
    assert [n for n, _, nightly in documented if nightly] == [n for n, s in STEPS.items() if s.nightly_only]


def test_no_other_description_of_the_run_writes_the_order_out():
    """Three step names in a row ("plan -> pin -> deploy", "deploy, wait_ready, functional") is an order
    written out again: it goes stale the day the registry changes."""
    from tasks.steps.registry import STEPS

    name = "|".join(sorted(STEPS, key=len, reverse=True))
    run = re.compile(rf"\b(?:{name})\b(?:\s*(?:->|→|,)\s*(?:\[?(?:{name})\]?)\b){{2,}}")
    places = [REPO / "README.md", *sorted((REPO / "dags").glob("*.py")), REPO / "plugins/dayone_airflow/pipeline.py",
              *sorted((REPO / "tasks/steps").glob("*.py"))]
    written = {str(p.relative_to(REPO)): m.group(0) for p in places
               for m in [run.search(p.read_text(encoding="utf-8"))] if m}
    assert written == {}, written

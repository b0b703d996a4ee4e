"""Every run document is named by tasks/state/documents.py, the one layout a reader and a writer share: no other
module reads or writes run state by a path of its own (a literal, an f-string, a joined string)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from tasks.state import documents as run_documents

pytestmark = pytest.mark.usefixtures("garbage_collected")  # tests/conftest.py says why

ROOT = Path(__file__).resolve().parents[2]
RUN_STATE_CALLS = {"read_json", "write_json", "read_bytes", "write_bytes", "names"}  # RunDir's document methods
# the names an archived run's objects share with its run state
DOCUMENT_NAMES = {getattr(run_documents, name)
                  for name in ("MANIFEST", "PINNED", "VALIDATION", "ARCHIVED", "REGRESSIONS", "SUMMARY", "REPORT")}


def _spelled_out(node: ast.expr) -> bool:
    """A path written where it is used: a string, an f-string, or a string joined to something."""
    if isinstance(node, ast.BinOp):
        return _spelled_out(node.left) or _spelled_out(node.right)
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _modules() -> list[Path]:
    home = Path(inspect.getsourcefile(run_documents)).resolve()
    return [p for d in ("tasks", "plugins", "dags", "bench") for p in sorted((ROOT / d).rglob("*.py"))
            if p.resolve() != home]


def test_run_documents_are_read_and_written_by_the_names_run_documents_gives():
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in RUN_STATE_CALLS and node.args and _spelled_out(node.args[0])):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "run state named outside tasks/state/documents.py:\n" + "\n".join(found)


def test_the_nightly_and_the_report_name_archived_documents_as_run_documents_does():
    """compare.py reads an archived run's summary and manifest, the report publishes its own: by run_documents' names."""
    found = []
    for rel in ("tasks/compare/nightly.py", "tasks/report/__init__.py", "tasks/report/summary.py"):
        for node in ast.walk(ast.parse((ROOT / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in DOCUMENT_NAMES:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
            elif isinstance(node, ast.JoinedStr) and any(
                    isinstance(v, ast.Constant) and str(v.value).startswith(("charts/", "verdicts/", "summaries/"))
                    for v in node.values):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "documents named outside tasks/state/documents.py:\n" + "\n".join(found)

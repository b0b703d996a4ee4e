"""A run's id is decided in one place (run_id_of): the id its config carries, else its storage's; a config
used outside any run is "adhoc". Every reader asks it, so no two places can name one run differently."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from tasks.config import RunConfig
from tasks.state.storage import RunDir, new_run_id, run_id_of

ROOT = Path(__file__).resolve().parents[2]


def test_the_run_id_is_the_configs_else_its_storages(tmp_path):
    stored = RunDir("stored-id", tmp_path)
    assert run_id_of(RunConfig(run_id="named"), stored) == "named"
    assert run_id_of(RunConfig(), stored) == "stored-id"
    assert run_id_of(RunConfig()) == "adhoc"
    assert re.fullmatch(r"bench-\d{8}T\d{6}Z", new_run_id("bench"))  # a CLI's name for an unnamed run


def test_no_other_module_derives_a_run_id():
    """`x.run_id or ...` and the "adhoc" fallback appear only where run_id_of lives; a CLI naming a run from
    its own argument (`args.run_id or ...`) decides a name, not which one a run has."""
    home = Path(inspect.getsourcefile(run_id_of)).resolve()
    derived = re.compile(r"(?<!args)\.run_id or\b|[\"']adhoc[\"']")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for folder in ("tasks", "plugins", "dags", "bench") for path in sorted((ROOT / folder).rglob("*.py"))
             if path.resolve() != home
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if derived.search(line)]
    assert not found, "run ids derived outside run_id_of:\n" + "\n".join(found)

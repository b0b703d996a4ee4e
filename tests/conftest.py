"""Shared fixtures: an Airflow home on SQLite, a real S3 server (SeaweedFS), a clean run directory.

Airflow reads its configuration at import, so the environment is set here, before any test module
imports airflow.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# The headless browser fixtures (chromium, browser) of the report, UI and OpenWebUI page tests.
pytest_plugins = ("headless_chromium",)


def _per_worker(path: Path) -> Path:
    """An xdist worker inherits the controller's environment, these paths included: each worker works in
    its own subdirectory, so no two share the SQLite metadata DB or a run directory."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return path / worker if worker else path


_HOME = _per_worker(Path(os.environ.get("AIRFLOW_HOME") or tempfile.mkdtemp(prefix="dayone-airflow-")))
_HOME.mkdir(parents=True, exist_ok=True)
os.environ["AIRFLOW_HOME"] = str(_HOME)
os.environ["DAYONE_WORKDIR"] = str(_per_worker(Path(os.environ.get("DAYONE_WORKDIR") or _HOME / "runs")))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
if str(REPO / "plugins") not in sys.path:
    sys.path.insert(0, str(REPO / "plugins"))


def _check_each_schema_once() -> None:
    """Airflow's Param.resolve calls jsonschema.validate, which first checks the schema itself against its
    metaschema: some 5,000 times in one dag.test() (every task serializes the trigger form's params), a
    quarter of a pipeline test's time, for eleven schemas that never change. The check depends on the schema
    alone, so here each distinct schema is checked once; every value is still validated every time."""
    import json

    import jsonschema
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    checked: set[tuple[type, str]] = set()

    def validate(instance: Any, schema: Any, cls: Any = None, *args: Any, **kwargs: Any) -> None:
        cls = cls or validator_for(schema)
        key = (cls, json.dumps(schema, sort_keys=True, default=repr))
        if key not in checked:
            cls.check_schema(schema)  # raises SchemaError on a bad schema, every time it is used
            checked.add(key)
        error = best_match(cls(schema, *args, **kwargs).iter_errors(instance))
        if error is not None:
            raise error

    jsonschema.validate = jsonschema.validators.validate = validate


_check_each_schema_once()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under CI=true a skip is a failure: every component the tests drive must be there."""
    report = (yield).get_result()
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (nothing may skip in CI): {reason}"


# ---- parallel runs (`make test`): which worker runs which test file, in which order (tests/xdist_units.py)
from xdist_units import (  # noqa: E402,F401
    pytest_collection_modifyitems, pytest_configure, pytest_runtest_setup, pytest_xdist_make_scheduler)


def _dag_test_without_idle_pauses() -> None:
    """dag.test() sleeps 1 s after each pass over the run that scheduled nothing, waiting for a triggerer or a
    person; DayOne's DAG has such passes while an engine's task waits for another engine's (rescheduled
    for a few seconds, plugins/dayone_airflow/turns.py), and a shorter pause lets it go on sooner. Nothing outside the process changes a run here, so only that
    sleep is cut short; every other sleep (the steps', the servers', the tests') stays as it is.

    For the same reason an engine's turn looks again after 1 s, not 10 s and more: the longer pauses guard
    against a real scheduler's race (turns.py), which dag.test() has not, and one of them could leave the run
    idle for up to 30 s after the engine before had been torn down."""
    import time

    from airflow.sdk.definitions.dag import DAG

    from dayone_airflow import turns

    turns.LOOK_AGAIN_MIN_S = turns.LOOK_AGAIN_MAX_S = 1

    dag_test, real_sleep = DAG.test.__code__, time.sleep

    def sleep(seconds: float) -> None:
        real_sleep(min(seconds, 0.1) if sys._getframe(1).f_code is dag_test else seconds)

    time.sleep = sleep


@pytest.fixture()
def garbage_collected() -> None:
    """For the tests that ast.parse DayOne's source: what earlier tests in this worker left is collected
    first. A collection inside ast.parse that finalizes a leftover whose finalizer prints a traceback parses
    again (3.11's traceback marks its carets with ast), and CPython 3.11.7 then raises SystemError "AST
    constructor recursion depth mismatch" in the test that did nothing wrong."""
    import gc

    gc.collect()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB in this worker's AIRFLOW_HOME. `airflow db migrate` runs once for all the
    workers of a `make test`: the first to need it migrates a template beside their homes, and each copies it."""
    home = Path(os.environ["AIRFLOW_HOME"])
    marker = home / ".migrated"
    if not marker.exists():
        template = home.parent / "migrated-template" if os.environ.get("PYTEST_XDIST_WORKER") else home
        template.mkdir(parents=True, exist_ok=True)
        with (template / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the one migrating
            if not (template / ".migrated").exists():
                subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True,
                               env={**os.environ, "AIRFLOW_HOME": str(template)}, timeout=300)
                (template / ".migrated").touch()
        if template != home:
            # a new file under the old name, and no pooled connection left on the old one: an earlier test
            # in this worker that imported Airflow (the glue) may already hold an empty airflow.db open
            shutil.copyfile(template / "airflow.db", home / "airflow.db.part")
            os.replace(home / "airflow.db.part", home / "airflow.db")
            if "airflow.settings" in sys.modules:
                from airflow import settings

                if settings.engine is not None:
                    settings.engine.dispose()
        marker.touch()
    _dag_test_without_idle_pauses()
    return home


@pytest.fixture(scope="module")
def eval_dag(airflow_db):
    """dayone_eval as the DAG processor parses it from dags/."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[1] / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag("dayone_eval")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A real S3-compatible server (SeaweedFS `weed mini`) on free loopback ports."""
    from tasks.state.local_s3 import SeaweedS3

    server = SeaweedS3(tmp_path_factory.mktemp("seaweed"))
    server.start()
    yield server
    server.stop()


@pytest.fixture()
def s3_conn(s3_server, monkeypatch: pytest.MonkeyPatch):
    """The `dayone_s3` Airflow connection pointing at the test S3 server."""
    monkeypatch.setenv("AIRFLOW_CONN_DAYONE_S3", s3_server.connection_uri())
    return s3_server


@pytest.fixture()
def run_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh DAYONE_WORKDIR for one test."""
    root = tmp_path / "runs"
    monkeypatch.setenv("DAYONE_WORKDIR", str(root))
    return root


# ---- a EngineContext against DayOne's simulator (checks and evidence tests) -----------------------
from tasks.config import parse_run_config  # noqa: E402
from tasks.engines.context import EngineContext, endpoint_for  # noqa: E402
from tasks.sim.process import SimProcess, start_sim  # noqa: E402
from tasks.state.storage import RunDir  # noqa: E402
# A small context limit keeps needle prompts short and fast.

CONTEXT_LIMIT = 4096
# Lengths that fit CONTEXT_LIMIT (the defaults are for million-token models).
SMALL_SCENARIOS = {
    "long_context": {"lengths": [1000, 2000]},
    "boundary": {"lengths": [3000, 3500]},
    "prefix_cache": {"prompt_tokens": 2000},
}
DIGEST = "sha256:" + "0" * 64


@contextmanager
def sim_context(
    root: Path, dialect: str = "sglang", profile: dict[str, Any] | None = None,
    scenarios: dict[str, Any] | None = None, run_id: str = "test-run",
) -> Iterator[tuple[SimProcess, EngineContext]]:
    profile = {"context_limit": CONTEXT_LIMIT, **(profile or {})}
    with start_sim(dialect, profile) as sim:
        config = parse_run_config({
            "run_id": run_id,
            "model": {"context_limit_tokens": CONTEXT_LIMIT},
            "engines": [{"name": f"sim-{dialect}", "dialect": dialect}],
            "scenarios": {**SMALL_SCENARIOS, **(scenarios or {})},
            "request_timeout_s": 30,
        })
        endpoint = endpoint_for(config, f"sim-{dialect}", sim.url, DIGEST)
        yield sim, EngineContext(config, endpoint, RunDir(run_id, root=root))


@pytest.fixture()
def sim_ctx(tmp_path: Path):
    """Factory: `with sim_ctx("vllm", {"dev_mode": True}) as (sim, ctx): ...`."""
    return lambda *args, **kwargs: sim_context(tmp_path, *args, **kwargs)

"""`make ui`'s real stack (dayone_airflow.ui: local S3 and `airflow standalone`) on free ports, and a
headless Chromium driven by Playwright.

The stack runs as a user starts it, in its own state directory, with nothing of the test session's
Airflow environment: standalone's scheduler, DAG processor, triggerer and API server, the simple
auth manager's generated admin password. On a failed test the standalone log's tail is printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from stack_priority import BackgroundPriority, stack_env
from ui_limits import API_TIMEOUT_S, STACK_READY_TIMEOUT_S
from tasks.core.ports import free_port

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "dayone_eval"
NIGHTLY_ID = "dayone_nightly"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"  # airflow's SimpleAuthManager writes it
LOG_TAIL_LINES = 80


@dataclass
class UiStack:
    base_url: str
    state: Path
    log: Path
    proc: subprocess.Popen
    username: str = "admin"
    password: str = ""
    token: str = ""

    @property
    def runs_root(self) -> Path:
        return self.state / "runs"  # DAYONE_WORKDIR as dayone_airflow.ui sets it

    def api(self, path: str, **params: object) -> httpx.Response:
        return httpx.get(f"{self.base_url}{path}", params=params, timeout=API_TIMEOUT_S,
                         headers={"Authorization": f"Bearer {self.token}"})

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no standalone log: {exc})"


def _wait(what: str, check, stack: UiStack, timeout_s: float, interval_s: float = 2.0):
    """check() until it returns something truthy; fails with the standalone log tail."""
    deadline = time.monotonic() + timeout_s
    while True:
        if stack.proc.poll() is not None:
            pytest.fail(f"the ui stack exited with {stack.proc.returncode} while waiting for {what}:\n"
                        f"{stack.log_tail()}")
        try:
            result = check()
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout_s:.0f} s; standalone log tail:\n{stack.log_tail()}")
        time.sleep(interval_s)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM reaches standalone as SIGINT (its clean shutdown) and then stops S3; the group if it hangs."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


# One stack for the directory's test files (one unit of work on one worker: tests/xdist_units.py), stopped after
# the directory's last test (pytest_runtest_teardown below). Playwright's sync API, whose event loop runs in this
# thread until it stops, keeps its module scope (headless_chromium.py): it must end with the UI tests, or every
# later asyncio.run() in this worker fails.
_RUNNING: list[subprocess.Popen] = []


@pytest.fixture(scope="session")
def ui_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiStack]:
    """`python -m dayone_airflow.ui` (what `make ui` runs) on a free port, once the API answers for
    the admin and both DayOne DAGs are parsed."""
    state = tmp_path_factory.mktemp("ui-stack")
    port = free_port()
    # The session's own Airflow settings (tests/conftest.py) and any dayone_s3 stay out: a fresh user's stack.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    # this checkout's tasks/ too: the venv's editable install may be another checkout's
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "plugins"), str(REPO)])
    env.update(stack_env())
    log = state / "standalone.log"
    with BackgroundPriority():  # the stack below the test workers' CPU priority while it runs
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "dayone_airflow.ui", "--state", str(state), "--port", str(port)],
                                    cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        stack = UiStack(base_url=f"http://127.0.0.1:{port}", state=state, log=log, proc=proc)
        _RUNNING.append(proc)
        try:
            passwords = state / "airflow" / PASSWORDS_FILE
            stack.password = _wait("the generated admin password", lambda: json.loads(passwords.read_text())["admin"],
                                   stack, STACK_READY_TIMEOUT_S)

            def token() -> str | None:
                answer = httpx.post(f"{stack.base_url}/auth/token", timeout=10,
                                    json={"username": stack.username, "password": stack.password})
                return answer.json()["access_token"] if answer.status_code in (200, 201) else None

            stack.token = _wait("the API server", token, stack, STACK_READY_TIMEOUT_S)
            # Both DAGs, not only the first: the DAG list page shows what the DB holds when it loads.
            for dag_id in (DAG_ID, NIGHTLY_ID):
                _wait(f"{dag_id} parsed", lambda: stack.api(f"/api/v2/dags/{dag_id}").status_code == 200, stack,
                      STACK_READY_TIMEOUT_S)
            yield stack
        finally:
            _stop(proc)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """The stack stops once the directory's last test and its module fixtures are torn down (they may still
    call the API), not at the worker's end: the worker goes on to other units (tests/xdist_units.py), and an
    idle stack would only take their CPU."""
    try:
        return (yield)
    finally:
        if nextitem is None or nextitem.path.parent != item.path.parent:
            while _RUNNING:
                _stop(_RUNNING.pop())




@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed UI test shows what standalone said last."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)  # for fixtures that keep evidence of a failure
    stack = getattr(item, "funcargs", {}).get("ui_stack")
    if report.failed and isinstance(stack, UiStack):
        report.sections.append(("standalone log tail", stack.log_tail()))

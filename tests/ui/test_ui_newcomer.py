"""A newcomer in the Airflow UI of `make ui`'s real stack, in headless Chromium: no `dag.test()`, the
run goes through standalone's scheduler, DAG processor and LocalExecutor.

Signs in with the admin password standalone generated, reads both DAGs' descriptions in the DAG list,
opens dayone_eval, finds the `local-sim` preset chosen in the trigger form (make ui's default) and
picks it, sees a bad value caught beside its field before submit, triggers, waits for the run's success, finds the run's two engines by name in
its grid with no skipped engine slots, opens the "DayOne report" tab on the run
page and checks the report's effects table against the run's summary.json; then the report URL
signed out (to the login page, and back after signing in), and `..` run ids (never served).

Screenshots go to $DAYONE_UI_SCREENSHOTS when set (`DAYONE_UI_SCREENSHOTS=docs/ui` refreshes the
docs' pictures), else to a temporary directory; a failed test also saves the page's DOM there.
"""

from __future__ import annotations

import ipaddress
import os
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urljoin, urlsplit

import httpx
import pytest
from tasks.stats.effects import ratio_digits
from run_progress import CAP_S, ended_tasks, wait_while_moving
from ui_limits import API_TIMEOUT_S, UI_TIMEOUT_MS

REPO = Path(__file__).resolve().parents[2]
# Stack start (about 1.5 min), the simulator run (about 6 min alone on 2 cores), the browser steps.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(CAP_S + 900)]  # the run's wait, then the pages

DAG_ID = "dayone_eval"
NIGHTLY_ID = "dayone_nightly"
PRESET = "local-sim"
VIEWPORT = {"width": 1400, "height": 1000}
REPORT_FRAME = "iframe[title='DayOne report']"
OUTSIDE_MARKER = "OUTSIDE-THE-RUNS-DIRECTORY"


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("DAYONE_UI_SCREENSHOTS")
    path = (REPO / chosen) if chosen else tmp_path_factory.mktemp("ui-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture()
def context(browser, shots: Path, request: pytest.FixtureRequest):
    """A fresh browser profile (signed out); on failure its pages' DOM and a screenshot are kept."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(UI_TIMEOUT_MS)
    yield context
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for i, page in enumerate(context.pages):
            name = f"failed-{request.node.name}-{i}"
            (shots / f"{name}.html").write_text(page.content())
            page.screenshot(path=shots / f"{name}.png")
            print(f"page {i} at {page.url}: DOM and screenshot in {shots / name}.*")
    context.close()


def _sign_in(page, stack) -> None:
    """On Airflow's login page (simple auth manager)."""
    page.get_by_label("Username").fill(stack.username)
    page.get_by_label("Password").fill(stack.password)
    page.get_by_role("button", name="Sign in").click()


def _wait_for_run(stack, run_id: str) -> dict:
    """The run once it has finished, through the scheduler; fails with the failed tasks' ids, or when the run
    stops moving (run_progress.py)."""
    path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}"
    run: dict = {}

    def final_state() -> str | None:
        try:
            run.update(stack.api(path).json())
        except httpx.TimeoutException:  # a loaded API server answers late: ask again
            return None
        return run["state"] if run.get("state") in ("success", "failed") else None

    def tasks_ended() -> int | None:
        try:
            return ended_tasks(stack.api(f"{path}/taskInstances", limit=1000).json()["task_instances"])
        except httpx.TimeoutException:
            return None

    wait_while_moving(f"run {run_id}", final_state, tasks_ended, interval_s=5)
    if run["state"] == "failed":
        tis = stack.api(f"{path}/taskInstances", state="failed").json().get("task_instances", [])
        # a try whose start the API never confirmed leaves no task log: the scheduler's event names it
        mismatches = stack.api("/api/v2/eventLogs", dag_id=DAG_ID, run_id=run_id, event="state mismatch").json()
        pytest.fail(f"run {run_id} failed; failed tasks: {[ti['task_id'] for ti in tis]}; scheduler: "
                    f"{[(e.get('task_id'), e.get('extra')) for e in mismatches.get('event_logs', [])]}")
    return run


def _same_path(url: str, path: str) -> bool:
    return unquote(urlsplit(url).path) == unquote(path)


def test_newcomer_triggers_the_simulator_preset_and_reads_the_report_from_the_run_page(ui_stack, context, shots):
    from playwright.sync_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)  # a run page renders its 60-odd tasks slowly on a loaded machine
    base = ui_stack.base_url
    page = context.new_page()

    # Sign in: opening the DAG sends a signed-out browser to the login page, and back after it.
    page.goto(f"{base}/dags/{DAG_ID}")
    _sign_in(page, ui_stack)
    page.wait_for_url(f"{base}/dags/{DAG_ID}")

    # The DAG list says what each DAG is: Airflow 3.3's DAG card shows the description over the DAG's name.
    page.goto(f"{base}/dags")
    for dag_id in (DAG_ID, NIGHTLY_ID):
        description = ui_stack.api(f"/api/v2/dags/{dag_id}").json()["description"]
        assert description, dag_id
        page.get_by_role("link", name=dag_id, exact=True).hover()
        expect(page.get_by_text(description, exact=True)).to_be_visible()
    page.screenshot(path=shots / "dag-list.png")  # with the nightly's description: no schedule until ...
    page.goto(f"{base}/dags/{DAG_ID}")

    # The trigger form: the preset is its first section; its options show each preset's name and title.
    # `make ui` makes local-sim the form's default, and the fields show its values (the Preset table says so).
    page.get_by_test_id("trigger-dag-button").click()  # "Trigger", labelled "Trigger Dag"
    form = page.get_by_role("dialog")
    form.get_by_role("button", name="Preset", exact=True).click()
    field = form.locator("#element_preset")  # the `preset` param's field (a react-select combobox)
    expect(form.locator("input[name=element_preset]")).to_have_value(PRESET)  # the default, before any click
    expect(form).to_contain_text(f"The fields below show {PRESET}'s values")
    field.get_by_role("combobox").click()
    page.get_by_role("option", name=re.compile(rf"^{PRESET}: ")).click()
    expect(form.locator("input[name=element_preset]")).to_have_value(PRESET)
    expect(field).to_contain_text(f"{PRESET}: DayOne's engine simulator")
    page.screenshot(path=shots / "trigger-form-local-sim.png")

    # A bad value is caught beside its field before submit: an emptied required number is flagged and holds
    # the Trigger button; a value over the field's maximum is brought back into range as the field is left.
    form.get_by_role("button", name="SLOs and limits", exact=True).click()
    timeout = form.locator("input[name=element_request_timeout_s]")
    shown_timeout = timeout.input_value()
    timeout.fill("")
    timeout_row = timeout.locator(
        "xpath=ancestor::*[@data-scope='field' and @data-part='root'][1]")
    expect(timeout_row).to_contain_text("This field is required")
    expect(form.get_by_test_id("trigger-dag-submit")).to_be_disabled()
    error_rate = form.locator("input[name=element_round_error_rate_max]")
    shown_rate = error_rate.input_value()
    error_rate.fill("5")
    error_rate.press("Tab")
    expect(error_rate).to_have_value("1")  # the schema's maximum: 5 never reaches the run
    timeout_row.scroll_into_view_if_needed()
    page.screenshot(path=shots / "trigger-form-bad-values.png")
    timeout.fill(shown_timeout)
    error_rate.fill(shown_rate)
    error_rate.press("Tab")
    expect(timeout_row).not_to_contain_text("This field is required")
    expect(form.get_by_test_id("trigger-dag-submit")).to_be_enabled()
    form.get_by_test_id("trigger-dag-submit").click()

    # Triggering opens the new run's page.
    page.wait_for_url(re.compile(rf"/dags/{DAG_ID}/runs/[^/]+$"))
    run_id = unquote(urlsplit(page.url).path.rsplit("/", 1)[1])
    run_page = page.url
    # An open run page redraws its tasks every few seconds: on two cores, time the run itself needs.
    page.goto("about:blank")
    run = _wait_for_run(ui_stack, run_id)
    assert run["conf"]["preset"] == PRESET
    assert run["conf"]["round_error_rate_max"] == float(shown_rate)  # restored: the run is the preset's
    page.goto(run_page)
    expect(page.get_by_test_id("state-badge").first).to_have_text("Success")

    # The grid holds the run's own engines, by name, and no empty engine slots: every task instance is a
    # run-level step's or one engine's of the mapped group `engines`, and none was skipped.
    engines = {e["name"] for e in ui_stack.api(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json()["conf"].get(
        "engines") or []} or {"sim-sglang", "sim-vllm"}  # the preset's, when the form left them to it
    instances = ui_stack.api(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances",
                             limit=500).json()["task_instances"]
    mapped = [ti for ti in instances if ti["map_index"] >= 0]
    assert {ti["rendered_map_index"] for ti in mapped} == engines, {ti["rendered_map_index"] for ti in mapped}
    assert all(ti["task_id"].startswith("engines.") for ti in mapped)
    assert not [ti["task_id"] for ti in instances if ti["state"] == "skipped"]
    assert not [ti["task_id"] for ti in instances if re.match(r"engines_\d", ti["task_id"])]
    expect(page.get_by_text(re.compile(r"^engines\b")).first).to_be_visible()  # the group, in the grid
    for name in sorted(engines):  # the run page's task instances, each named by its engine (Map Index)
        expect(page.get_by_role("link", name=name, exact=True).first).to_be_visible()
    page.screenshot(path=shots / "grid.png")

    # The report where a user looks first: the run page's "DayOne report" tab.
    page.get_by_role("link", name="DayOne report", exact=True).click()
    report = page.frame_locator(REPORT_FRAME)
    expect(report.locator("h1")).to_contain_text("DayOne report")
    expect(report.locator("table.effects")).to_be_visible()
    page.screenshot(path=shots / "run-page-dayone-report-tab.png")
    report_url = urljoin(base, page.locator(REPORT_FRAME).get_attribute("src"))
    assert _same_path(report_url, f"/dayone/reports/{DAG_ID}/{run_id}")

    # A figure on the page against summary.json: every effect's ratio, interval and verdict.
    answer = context.request.get(f"{report_url}/summary.json")
    assert answer.status == 200, answer.text()
    comparisons = answer.json()["comparisons"]
    assert comparisons, "two simulated engines and no comparison between them"
    rows = report.locator("table.effects tr")
    expect(rows).to_have_count(len(comparisons) + 1)  # and the header
    for i, c in enumerate(comparisons, start=1):
        cells = rows.nth(i).locator("td").all_inner_texts()
        assert cells[:2] == [c["scenario"], c["level"]], cells
        assert cells[3] == f"{c['engine']} vs {c['base']}", cells
        if c["low"] is None:  # no interval (too few good rounds): the verdict stands in its place
            assert cells[4] == c["verdict"] == cells[5] and c["verdict"] == "not enough rounds", (cells, c)
            continue
        # the page prints as many decimals as keep the interval's side of 1 visible (ratio_digits)
        d = ratio_digits(c["low"], c["high"])
        assert cells[4].startswith(f"{c['ratio']:.{d}f}×"), (cells, c)
        assert f"{c['low']:.{d}f}–{c['high']:.{d}f}" in cells[4], (cells, c)
        assert cells[5] == c["verdict"], (cells, c)

    # The report opened by itself (the tab's address).
    assert page.goto(report_url).status == 200
    expect(page.locator("h1")).to_contain_text("DayOne report")
    page.screenshot(path=shots / "report.png")

    # Signed out: the report URL leads to the login page, which comes back to the report.
    signed_out = context.browser.new_context(viewport=VIEWPORT)
    try:
        visitor = signed_out.new_page()
        visitor.goto(report_url)
        login = urlsplit(visitor.url)
        assert login.path == "/auth/login", visitor.url
        assert _same_path(parse_qs(login.query)["next"][0], urlsplit(report_url).path)
        _sign_in(visitor, ui_stack)
        visitor.wait_for_url(lambda url: _same_path(url, urlsplit(report_url).path))
        expect(visitor.locator("table.effects")).to_be_visible()
    finally:
        signed_out.close()


def test_a_dot_dot_run_id_never_serves_a_page_from_outside_the_runs_directory(ui_stack, context):
    """`..` as the run id, percent-encoded so that it reaches the report app (a browser would resolve it
    away), with the signed-in browser's session: 404, and the files planted above the runs root unread."""
    from playwright.sync_api import expect

    base = ui_stack.base_url
    outside = ui_stack.runs_root.parent
    (outside / "report.html").write_text(f"<p>{OUTSIDE_MARKER}</p>")
    (outside / "summary.json").write_text(f'{{"marker": "{OUTSIDE_MARKER}"}}')

    page = context.new_page()
    page.goto(f"{base}/dags/{DAG_ID}")
    _sign_in(page, ui_stack)
    page.wait_for_url(f"{base}/dags/{DAG_ID}")
    session = {c["name"]: c["value"] for c in context.cookies()}
    browser_like = {"Accept": "text/html"}

    prefix = f"/dayone/reports/{DAG_ID}"
    for path in (f"{prefix}/%2E%2E", f"{prefix}/%2e%2e/summary.json", f"{prefix}/%2E%2E%2F",
                 f"{prefix}/..%2F..%2F{outside.name}", f"{prefix}/%2E%2E%2Fruns%2F%2E%2E"):
        answer = httpx.get(f"{base}{path}", cookies=session, headers=browser_like, timeout=API_TIMEOUT_S)
        assert answer.request.url.raw_path.decode() == path  # sent as written, not resolved by the client
        assert answer.status_code == 404, (path, answer.status_code, answer.text[:300])
        assert OUTSIDE_MARKER not in answer.text, path

    # Typed into the browser, the same address resolves before it is sent: no page either.
    page.goto(f"{base}{prefix}/%2E%2E")
    expect(page.locator("body")).not_to_contain_text(OUTSIDE_MARKER)
    assert OUTSIDE_MARKER not in page.content()


def test_the_stack_listens_on_loopback_only_with_executor_slots_sized_to_the_machine(ui_stack):
    """Every TCP socket the stack's processes listen on is a loopback one (Airflow's log servers bind
    every interface, so standalone's scheduler and triggerer run without them), and the LocalExecutor
    runs no more workers than `executor_slots()` for this machine (Airflow's default is 32)."""
    import psutil

    from dayone_airflow.ui import executor_slots

    stack_pids = [p for p in psutil.process_iter(["pid", "cmdline"]) if _in_session(p.pid, ui_stack.proc.pid)]
    assert stack_pids, "no process of the stack found"
    listening = [(p.info["cmdline"][:3], c.laddr) for p in stack_pids for c in _listening(p)]
    assert listening, "the stack listens on nothing?"
    wide = [(cmd, addr) for cmd, addr in listening if not ipaddress.ip_address(addr.ip).is_loopback]
    assert wide == [], f"listening beyond loopback: {wide}"
    workers = [p for p in stack_pids if "LocalExecutor" in " ".join(p.info["cmdline"] or [])]
    assert 0 < len(workers) <= executor_slots(), (len(workers), executor_slots())


def test_the_stack_re_reads_its_dags_every_two_minutes(ui_stack):
    """The DAG processor of the stack re-parses each DAG file every PARSE_INTERVAL_S, not Airflow's 30 s (an
    idle stack's largest cost): the setting reaches the DAG processor standalone starts."""
    import psutil
    from airflow.configuration import conf

    from dayone_airflow.ui import PARSE_INTERVAL_S

    assert PARSE_INTERVAL_S > int(conf.get_default_value("dag_processor", "min_file_process_interval"))
    processors = [p for p in psutil.process_iter(["pid", "cmdline"]) if _in_session(p.pid, ui_stack.proc.pid)
                  and "dag-processor" in " ".join(p.info["cmdline"] or [])]
    assert processors, "no DAG processor in the stack"
    for process in processors:
        assert _environ(process).get("AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL") == str(PARSE_INTERVAL_S), process


def test_every_process_of_the_stack_yields_the_cpu_to_the_tests_beside_it(ui_stack):
    """The stack waits more than it computes: standalone and all it starts (scheduler, API server, task
    processes, engines in sessions of their own) run at a lower priority, their sessions' autogroups too
    (Linux shares the CPU between those first), so a worker beside it that times requests keeps its core."""
    import psutil

    from stack_priority import STACK_MARKER, STACK_NICENESS

    expected = min(19, os.getpriority(os.PRIO_PROCESS, 0) + STACK_NICENESS)
    settled = time.time() - 3  # the stack's watcher lowers a new process within a second
    stack = [p for p in psutil.process_iter(["pid", "cmdline", "nice", "create_time"])
             if p.info["create_time"] < settled and _environ(p).get(STACK_MARKER) == "1"]
    assert len([p for p in stack if _in_session(p.pid, ui_stack.proc.pid)]) > 3, stack  # standalone, S3, ...
    assert {(p.info["nice"], " ".join(p.info["cmdline"] or [])[:60]) for p in stack if p.info["nice"] != expected} \
        == set(), expected
    own_session = os.getsid(0)
    groups = {_autogroup(p.pid) for p in stack if _session(p.pid) not in (None, own_session)}
    assert groups and all(g.endswith(f" nice {expected}") for g in groups if g), groups
    assert not _autogroup(os.getpid()).endswith(f" nice {expected}"), "the test workers' own priority is untouched"


def _environ(process) -> dict[str, str]:
    try:
        return process.environ()
    except (OSError, Exception):  # noqa: BLE001  (gone meanwhile, or not ours)
        return {}


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _autogroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().strip()
    except OSError:
        return ""


def _in_session(pid: int, session_id: int) -> bool:
    try:
        return os.getsid(pid) == session_id
    except OSError:
        return False


def _listening(process) -> list:
    try:
        return [c for c in process.net_connections(kind="tcp") if c.status == "LISTEN"]
    except (OSError, Exception):  # noqa: BLE001  (gone meanwhile)
        return []

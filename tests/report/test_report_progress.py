"""The DayOne report tab opened while the run goes (plugins/dayone_airflow/links.py, tasks/report/html.py
render_progress): before the report exists it shows what the run has measured so far, from its steps'
progress documents: each engine's steps done, the step running now with its round, the requests failed."""

from __future__ import annotations

import re
import time

import pytest

from tasks.core.progress import LoadProgress, StepProgress
from tasks.state.documents import progress_doc
from tasks.state.storage import RunDir

AIRFLOW_RUN_ID = "manual__2026-12-06T18:45:15.370122+00:00"
RUN_ID = "manual__2026-12-06T18-45-15.370122-00-00"
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def _mid_run(root, t: float) -> None:
    """Two engines measured together in `short` since t + 100, round 2 of 6 under way; earlier steps ended
    each way."""
    run_dir = RunDir(RUN_ID, root=root)
    load = LoadProgress(label="a, b short", round="short-in64-out32-c4-r2", planned=48, done=20, failed=3,
                        output_tokens=640, elapsed_s=32.0)
    steps = [
        StepProgress(step="plan", started=t, ended=t + 2, state="ok"),
        StepProgress(step="functional", engine="a", started=t + 10, ended=t + 40, state="ok"),
        StepProgress(step="functional", engine="b", started=t + 10, ended=t + 41, state="failed",
                     detail="RuntimeError: 4 checks failed"),
        StepProgress(step="rate", engine="a", started=t + 42, ended=t + 42, state="skipped",
                     detail="rate disabled in the run config"),
        StepProgress(step="warmup", engine="a", started=t + 50, ended=t + 90, state="ok",
                     load=LoadProgress(label="a warmup", planned=24, done=24, failed=1, elapsed_s=40.0)),
        StepProgress(step="short", engine="a", started=t + 100, load=load),
        StepProgress(step="short", engine="b", started=t + 100, load=load),
    ]
    for p in steps:
        run_dir.write_json(progress_doc(p.step, p.engine), p.model_dump(mode="json"))


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_page_says_each_engines_steps_done_the_current_round_and_the_failed_requests(tmp_path):
    from tasks.report.html import render_progress
    from tasks.state.progress import read_progress

    _mid_run(tmp_path, t=1_000_000.0)
    page = render_progress(RUN_ID, read_progress(RunDir(RUN_ID, root=tmp_path)), now=1_000_000.0 + 300)
    text = _text(page)
    assert "<meta http-equiv='refresh' content='15'>" in page and "<script" not in page
    assert "The report appears here once the run's report task has finished" in text
    assert "a 3 steps done (2 ok, 1 skipped); 4 of 44 requests failed so far." in text
    assert "b 1 step done (1 failed); 3 of 20 requests failed so far." in text
    assert "run 1 step done (1 ok)." in text
    assert text.count("Now: short , running for 3:20: round short-in64-out32-c4-r2, 20/48 requests, 3 failed, "
                      "20 output tok/s so far, about 0:45 left.") == 2, text
    assert "RuntimeError: 4 checks failed" in text


@pytest.fixture(scope="module")
def api(airflow_db):
    """Airflow's API server app, in process, with the plugins folder loaded, and a signed-in user's token."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    app = create_app("core")
    with TestClient(app) as client:
        yield client, get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))


def test_the_report_tab_mid_run_shows_the_progress_then_a_404_where_nothing_ran(api, tmp_path, monkeypatch):
    from urllib.parse import quote

    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    monkeypatch.delenv("DAYONE_STAGING", raising=False)
    client, token = api
    client.cookies.set("_token", token)
    url = f"/dayone/reports/dayone_eval/{quote(AIRFLOW_RUN_ID, safe='')}"
    assert client.get(url, headers=BROWSER).status_code == 404, "no step has written anything yet"
    assert not (tmp_path / RUN_ID).exists(), "asking creates nothing"
    _mid_run(tmp_path, t=time.time() - 300)
    page = client.get(url, headers=BROWSER)
    assert page.status_code == 200, page.text[:300]
    assert page.headers["x-dayone-report-source"] == "progress"
    assert page.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "20/48 requests, 3 failed" in _text(page.text)
    summary = client.get(f"{url}/summary.json")
    assert summary.status_code == 404, "summary.json exists only once the report does"
    (tmp_path / RUN_ID / "report.html").write_bytes(b"<html>the report</html>")
    assert client.get(url, headers=BROWSER).content == b"<html>the report</html>", "the report once it exists"


def test_progress_documents_outside_the_runs_root_are_not_read(tmp_path, monkeypatch):
    from dayone_airflow.links import local_progress

    root, outside = tmp_path / "runs", tmp_path / "outside"
    _mid_run(outside, t=time.time())
    root.mkdir()
    (root / "linked").symlink_to(outside / RUN_ID, target_is_directory=True)
    (root / "one-file" / "progress").mkdir(parents=True)
    (root / "one-file" / "progress" / "plan.json").symlink_to(outside / RUN_ID / "progress" / "plan.json")
    monkeypatch.setenv("DAYONE_WORKDIR", str(root))
    assert local_progress("linked") == [] and local_progress("one-file") == []
    assert local_progress("..") == [] and not (root / "missing").exists()
    assert len(local_progress(f"../outside/{RUN_ID}")) == 0

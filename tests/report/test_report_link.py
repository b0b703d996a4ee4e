"""The Airflow plugin: a task's "DayOne report" link leads, through Airflow's own API server and its
login, to the run's report as archived in S3."""

from __future__ import annotations

import pytest

LINK_NAME = "DayOne report"


@pytest.fixture(scope="module")
def published(sim_run, s3_server):
    """The simulator run archived and its report published to the real S3 server (default bucket)."""
    from tasks.publish.archive import archive_run
    from tasks.report import publish_report

    s3 = s3_server.client()
    archive_run(sim_run.run_dir(), sim_run.cfg(), s3)
    result = publish_report(sim_run.run_dir(), sim_run.cfg(), s3)
    return s3, result


@pytest.fixture(scope="module")
def api(airflow_db, s3_server):
    """Airflow's API server app, in process, with the plugins folder loaded, and a signed-in user's token."""
    import os

    os.environ["AIRFLOW_CONN_DAYONE_S3"] = s3_server.connection_uri()
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    app = create_app("core")
    with TestClient(app) as client:
        token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
        yield client, token
    os.environ.pop("AIRFLOW_CONN_DAYONE_S3", None)


def _link():
    from airflow import plugins_manager

    links = [link for link in plugins_manager.get_global_operator_extra_links() if link.name == LINK_NAME]
    assert len(links) == 1, "the dayone_report plugin must register exactly one global link"
    return links[0]


def test_plugin_adds_the_report_link_to_dayone_tasks_only(sim_run):
    from airflow.models.taskinstancekey import TaskInstanceKey

    link = _link()
    url = link.get_link(None, ti_key=TaskInstanceKey("dayone_eval", "report", sim_run.airflow_run_id))
    assert url == "/dayone/reports/dayone_eval/manual__2026-11-30T08%3A00%3A00.123456%2B00%3A00"
    nightly = link.get_link(None, ti_key=TaskInstanceKey("dayone_nightly", "engines.short", "x"))
    assert nightly.endswith("/dayone/reports/dayone_nightly/x")
    assert link.get_link(None, ti_key=TaskInstanceKey("someone_elses_dag", "t", "r")) == ""


def test_link_opens_the_archived_report_behind_airflow_login(sim_run, published, api):
    from airflow.models.taskinstancekey import TaskInstanceKey

    s3, result = published
    client, token = api
    url = _link().get_link(None, ti_key=TaskInstanceKey("dayone_eval", "conclude", sim_run.airflow_run_id))

    client.cookies.clear()
    assert client.get(url).status_code == 401, "the report is behind Airflow's login"

    client.cookies.set("_token", token)
    page = client.get(url)
    assert page.status_code == 200, page.text[:500]
    report_key = next(k for k in result["keys"] if k.endswith("/report.html"))
    archived = s3.get_object(Bucket=result["bucket"], Key=report_key)["Body"].read()
    assert page.content == archived
    assert page.headers["x-dayone-report-source"] == f"s3://{result['bucket']}"
    assert page.headers["content-type"].startswith("text/html")
    assert "script-src" not in page.headers["content-security-policy"]
    assert "default-src 'none'" in page.headers["content-security-policy"]

    summary = client.get(url + "/summary.json")
    assert summary.status_code == 200 and summary.json()["run_id"] == sim_run.run_id

    missing = client.get("/dayone/reports/dayone_eval/manual__2026-01-01T00%3A00%3A00%2B00%3A00")
    assert missing.status_code == 404 and "report task has not finished" in missing.json()["detail"]
    assert client.get(f"/dayone/reports/someone_elses_dag/{sim_run.run_id}").status_code == 404


def test_publish_writes_charts_beside_the_report_once(sim_run, published):
    from tasks.report import publish_report

    s3, result = published
    prefixes = sim_run.run_dir().read_json("archive.json")["prefixes"]
    for prefix in prefixes.values():
        for rel in ("report.html", "summary.json", "charts/throughput.png", "charts/ttft.png",
                    "charts/long_context.png", "charts/prefix_cache.png", "charts/decode_prefill.png"):
            assert prefix + rel in result["keys"], rel
    again = publish_report(sim_run.run_dir(), sim_run.cfg(), s3)  # a retried report task
    assert again["keys"] == result["keys"]


def test_only_dayone_dags_by_exact_id_or_tag_get_the_link():
    from airflow.models.taskinstancekey import TaskInstanceKey

    from dayone_airflow.links import is_dayone_dag

    assert _link().get_link(None, ti_key=TaskInstanceKey("dayone_evil", "t", "r")) == ""
    assert not is_dayone_dag("dayone_evil") and not is_dayone_dag("dayone")
    assert is_dayone_dag("dayone_evil", ["dayone"]), "the tag read from the metadata database still counts"


# ---- what the app must never serve --------------------------------------------------------------------

SECRET = b"<html>a file beside the runs directory, never to be served</html>"


@pytest.fixture()
def runs_with_outside_files(tmp_path, monkeypatch):
    """A runs root holding one real run, with report.html files outside it: in its parent, and behind
    a directory symlink and a file symlink inside it."""
    root, outside = tmp_path / "runs", tmp_path / "outside"
    (root / "local-run").mkdir(parents=True)
    outside.mkdir()
    (root / "local-run" / "report.html").write_bytes(b"<html>the local run</html>")
    (tmp_path / "report.html").write_bytes(SECRET)
    (outside / "report.html").write_bytes(SECRET)
    (root / "linked-dir").symlink_to(outside, target_is_directory=True)
    (root / "linked-file").mkdir()
    (root / "linked-file" / "report.html").symlink_to(outside / "report.html")
    (root / "loop").mkdir()
    (root / "loop" / "report.html").symlink_to(root / "loop" / "report.html")
    monkeypatch.setenv("DAYONE_WORKDIR", str(root))
    return root


# A literal `..` segment is removed by the HTTP client (as by browsers, and by curl without
# --path-as-is); the percent-encoded forms reach the app decoded.
@pytest.mark.parametrize("run_id", [
    "%2E%2E", "%2e%2e", "%2e%2e%2f", "%2E%2E/summary.json", "local-run%2F..%2F..", "x%2F..%2F..%2Freport.html",
    "%2E", "linked-dir", "linked-file", "loop",
])
def test_run_ids_outside_the_runs_root_answer_404(api, runs_with_outside_files, run_id):
    client, token = api
    client.cookies.set("_token", token)
    answer = client.get(f"/dayone/reports/dayone_eval/{run_id}", follow_redirects=False)
    assert answer.status_code == 404, (answer.status_code, answer.text[:300])
    assert SECRET not in answer.content


@pytest.mark.parametrize("run_id", ["..", ".", "../..", "linked-dir", "linked-file", "loop"])
def test_nothing_outside_the_runs_root_is_found(runs_with_outside_files, run_id):
    """As the app would see `curl --path-as-is .../dayone_eval/..`."""
    from dayone_airflow.links import find_report

    assert find_report("dayone_eval", run_id) is None


def test_a_local_run_is_served_for_dayone_dags_only(api, runs_with_outside_files):
    client, token = api
    client.cookies.set("_token", token)
    assert client.get("/dayone/reports/dayone_eval/local-run").content == b"<html>the local run</html>"
    evil = client.get("/dayone/reports/dayone_evil/local-run")
    assert evil.status_code == 404 and "not a DayOne DAG" in evil.json()["detail"]


def test_run_ids_are_directory_names_that_never_start_with_a_dot():
    from dayone_airflow.glue import dayone_run_id

    assert dayone_run_id("..") == "--" and dayone_run_id(".") == "-" and dayone_run_id(".hidden") == "-hidden"
    assert dayone_run_id("") == "-"
    assert dayone_run_id("a/../b") == "a-..-b"
    assert dayone_run_id("manual__2026-11-30T07:40:34.058616+00:00") == "manual__2026-11-30T07-40-34.058616-00-00"


# ---- browsers ------------------------------------------------------------------------------------------

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_a_signed_out_browser_goes_to_the_login_page_and_back(api, sim_run):
    from urllib.parse import parse_qs, unquote, urlsplit

    from airflow.api_fastapi.app import get_auth_manager

    client, _ = api
    client.cookies.clear()
    path = "/dayone/reports/dayone_eval/" + sim_run.airflow_run_id.replace(":", "%3A").replace("+", "%2B")
    answer = client.get(path, headers=BROWSER, follow_redirects=False)
    assert answer.status_code in (302, 307), (answer.status_code, answer.text[:300])
    location = answer.headers["location"]
    login = urlsplit(get_auth_manager().get_url_login())
    assert urlsplit(location).path == login.path
    [next_url] = parse_qs(urlsplit(location).query)["next"]
    assert unquote(next_url) == unquote(f"http://testserver{path}"), "back to this report after signing in"

    script = client.get(path, headers={"Accept": "application/json"}, follow_redirects=False)
    assert script.status_code == 401 and script.json()["detail"] == "Not authenticated"


def test_a_browser_reads_why_there_is_no_report(api, runs_with_outside_files):
    client, token = api
    client.cookies.set("_token", token)
    answer = client.get("/dayone/reports/someone_elses_dag/local-run", headers=BROWSER)
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html")
    assert "someone_elses_dag is not a DayOne DAG" in answer.text
    assert "default-src 'none'" in answer.headers["content-security-policy"]
    # a page styled like the report, not one bare line; the detail escaped as before
    assert "<style>" in answer.text and "<h1>DayOne report</h1>" in answer.text and "HTTP 404" in answer.text
    assert "$detail" not in answer.text and "$status" not in answer.text


def test_the_report_is_a_tab_on_the_dag_run_page(api, sim_run):
    """As the UI reads it: an external view for the DAG run page, whose href (once the UI fills in the
    run) is the task link's."""
    from urllib.parse import quote

    client, token = api
    answer = client.get("/api/v2/plugins", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text[:300]
    views = [v for plugin in answer.json()["plugins"] for v in plugin["external_views"]]
    tabs = [v for v in views if v["name"] == LINK_NAME]
    assert len(tabs) == 1 and tabs[0]["destination"] == "dag_run", tabs
    # The UI fills the placeholders with encodeURIComponent, which for run ids matches quote(safe="").
    href = tabs[0]["href"].replace("{DAG_ID}", "dayone_eval").replace("{RUN_ID}", quote(sim_run.airflow_run_id, safe=""))
    assert href == "/dayone/reports/dayone_eval/manual__2026-11-30T08%3A00%3A00.123456%2B00%3A00"

"""From a DayOne run's tasks in the Airflow UI to its report.

A small FastAPI app mounted on Airflow's API server at /dayone serves report.html from the write-once
archive (falling back to the run's state before it is archived), behind Airflow's login and with a
Content-Security-Policy that allows no script; before the report exists, a page of what the run has measured
so far, from its steps' progress documents (tasks/state/progress.py); a global operator extra link points every task of a
DayOne DAG at it, computed from the DAG id and run id alone. Why this and not a presigned S3 URL, and
how a run id maps to a path: docs/ARCHITECTURE.md, "How a reader reaches the report".
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from airflow.sdk import BaseOperatorLink

from tasks.state.documents import REPORT, SUMMARY

log = logging.getLogger("dayone.airflow.links")

URL_PREFIX = "/dayone"
REPORT_LINK_NAME = "DayOne report"
DAYONE_TAG = "dayone"
DAYONE_DAG_IDS = frozenset({"dayone_eval", "dayone_nightly"})
REPORT_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# What a browser sees before a report exists (or where none can be): styled like the report, no script.
NOT_THERE_PAGE = (
    "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>DayOne report</title><style>"
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;max-width:720px;margin:48px auto;padding:0 16px;"
    "color:#222;line-height:1.5}h1{font-size:20px;margin:0 0 8px}.box{background:#f7f9fc;border:1px solid #dbe4f0;"
    "border-radius:4px;padding:12px 16px}.code{color:#666;font-size:13px}</style></head><body>"
    "<h1>DayOne report</h1><div class='box'><p>$detail</p><p class='code'>HTTP $status. The report "
    "appears here once the run's <b>report</b> task has finished.</p></div></body></html>")
SERVED = {REPORT: "text/html; charset=utf-8", SUMMARY: "application/json"}


def is_dayone_dag(dag_id: str, tags: Any = None) -> bool:
    """DayOne's own DAG ids, or a DAG tagged `dayone`; never by prefix (anyone can name a DAG dayone_x)."""
    return dag_id in DAYONE_DAG_IDS or DAYONE_TAG in set(tags or ())


def report_path(dag_id: str, airflow_run_id: str, name: str = REPORT) -> str:
    """Where the plugin's app serves one run's report (the run id as Airflow spells it)."""
    base = f"{URL_PREFIX}/reports/{quote(dag_id, safe='')}/{quote(airflow_run_id, safe='')}"
    return base if name == REPORT else f"{base}/{name}"


# The run page tab's href: Airflow's UI fills in (and URL-encodes) both, as report_path does.
RUN_PAGE_PATH = f"{URL_PREFIX}/reports/{{DAG_ID}}/{{RUN_ID}}"


def report_url(dag_id: str, airflow_run_id: str, name: str = REPORT) -> str:
    return api_url(report_path(dag_id, airflow_run_id, name))


def api_url(path: str) -> str:
    """Absolute when [api] base_url is set (its path prefix kept), else relative to the UI's host."""
    from airflow.configuration import conf

    base_url = conf.get("api", "base_url", fallback=None) or ""
    if not base_url:
        return path
    parsed = urlparse(base_url)
    root = f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else ""
    return f"{root}{parsed.path.rstrip('/')}{path}"


class DayOneReportLink(BaseOperatorLink):
    """"DayOne report" on every task of a DayOne DAG run; empty (disabled) on any other DAG."""

    name = REPORT_LINK_NAME

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        dag = getattr(operator, "dag", None)
        if not is_dayone_dag(ti_key.dag_id, getattr(dag, "tags", None)):
            return ""
        return report_url(ti_key.dag_id, ti_key.run_id)


# ---- finding a run's report ------------------------------------------------------------------------


def archive_settings(run_conf: dict[str, Any] | None) -> Any:
    """The run's archive settings: its conf's `archive` section over the defaults."""
    from tasks.config.archive import ArchiveSettings

    try:
        return ArchiveSettings(**((run_conf or {}).get("archive") or {}))
    except (TypeError, ValueError):
        return ArchiveSettings()


def archived_object(s3: Any, bucket: str, root: str, run_id: str, name: str) -> bytes | None:
    """`name` from the first engine prefix of the run's index document, or None when it is not archived.

    The index lives at ROOT/MODEL/_index/RUN_ID.json; the model is not known from the run id, so the
    (few) model folders under ROOT are tried in turn.
    """
    from botocore.exceptions import ClientError

    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{root}/", Delimiter="/")
    try:
        models = [p["Prefix"] for page in pages for p in page.get("CommonPrefixes", [])]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchBucket", "404"):
            return None
        raise
    for model in models:
        index = _get(s3, bucket, f"{model}_index/{run_id}.json")
        if index is None:
            continue
        for engine in sorted(json.loads(index).get("prefixes") or {}):
            body = _get(s3, bucket, json.loads(index)["prefixes"][engine] + name)
            if body is not None:
                return body
    return None


def _get(s3: Any, bucket: str, key: str) -> bytes | None:
    from botocore.exceptions import ClientError

    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise


def local_object(run_id: str, name: str) -> bytes | None:
    """`name` from the run directory, or None when it is missing or resolves outside the runs root."""
    from tasks.state.storage import default_root

    try:
        root = Path(os.environ.get("DAYONE_WORKDIR") or default_root()).resolve()
        path = (root / run_id / name).resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path.read_bytes()


def staged_object(run_id: str, name: str) -> bytes | None:
    """`name` from the run's state under DAYONE_STAGING, or None when run state is not in S3 or lacks it."""
    run_dir = staged_run(run_id)
    return None if run_dir is None else run_dir.read_bytes(name)


def staged_run(run_id: str) -> Any:
    """The run's state under DAYONE_STAGING (a RunDir), or None when run state is not in S3."""
    from tasks.state.storage import RunDir
    from tasks.state.object_store import STAGING_ENV, S3Access, staging_from_env

    from dayone_airflow.connections import STAGING_CONN_ID

    if not os.environ.get(STAGING_ENV, "").strip():
        return None
    from airflow.models.connection import Connection

    conn = Connection.get_connection_from_secrets(STAGING_CONN_ID)
    extra = conn.extra_dejson or {}
    access = S3Access(extra.get("endpoint_url"), conn.login, conn.password, extra.get("region_name"))
    return RunDir(run_id, staging_from_env(access))  # run_id: one key segment, no dots first


def find_progress(airflow_run_id: str) -> list[Any]:
    """The run's progress documents (tasks/state/progress.py) where its tasks write them: under the S3 staging
    prefix, else this machine's run directory; empty where neither holds any."""
    from tasks.state.progress import read_progress

    from dayone_airflow.glue import dayone_run_id

    run_id = dayone_run_id(airflow_run_id)
    try:
        staged = staged_run(run_id)
        if staged is not None:
            return read_progress(staged)
    except Exception as exc:  # noqa: BLE001  (staging not reachable: said, and the local copy may serve)
        log.warning("progress of %s: run state in S3 not readable (%s)", run_id, exc)
    return local_progress(run_id)


def local_progress(run_id: str) -> list[Any]:
    """The progress documents in the run directory, none of them resolving outside the runs root; nothing is
    created where the run has no directory."""
    from tasks.core.progress import StepProgress
    from tasks.state.documents import PROGRESS_DIR
    from tasks.state.progress import in_start_order
    from tasks.state.storage import default_root

    try:
        root = Path(os.environ.get("DAYONE_WORKDIR") or default_root()).resolve()
        folder = (root / run_id / PROGRESS_DIR).resolve()
        if not folder.is_relative_to(root) or not folder.is_dir():
            return []
        found = []
        for doc in folder.glob("*.json"):
            path = doc.resolve()
            if path.is_relative_to(root) and path.is_file():
                try:
                    found.append(StepProgress.model_validate_json(path.read_bytes()))
                except ValueError:
                    continue  # being replaced, or not a progress document
    except (OSError, RuntimeError):  # a symlink loop
        return []
    return in_start_order(found)


def find_report(dag_id: str, airflow_run_id: str, name: str = REPORT) -> tuple[bytes, str] | None:
    """(bytes, where) of a run's report or summary: the archive first, then the run's state (under the
    S3 staging prefix, or this machine's run directory)."""
    from dayone_airflow.glue import dayone_run_id

    run_id = dayone_run_id(airflow_run_id)
    settings = archive_settings(_run_conf(dag_id, airflow_run_id))
    try:
        s3 = _s3_client(settings.conn_id)
        body = archived_object(s3, settings.bucket, settings.prefix, run_id, name)
        if body is not None:
            return body, f"s3://{settings.bucket}"
    except Exception as exc:  # noqa: BLE001  (no archive reachable: the local copy may still serve)
        log.warning("report for %s: archive not readable (%s); trying the run's state", run_id, exc)
    try:
        body = staged_object(run_id, name)
        if body is not None:
            return body, "run state (DAYONE_STAGING)"
    except Exception as exc:  # noqa: BLE001  (staging not reachable: said, and the local copy may serve)
        log.warning("report for %s: run state in S3 not readable (%s)", run_id, exc)
    body = local_object(run_id, name)
    return (body, "local run directory") if body is not None else None


def _run_conf(dag_id: str, airflow_run_id: str) -> dict[str, Any] | None:
    try:
        from sqlalchemy import select

        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            return session.scalar(select(DagRun.conf).where(DagRun.dag_id == dag_id, DagRun.run_id == airflow_run_id))
    except Exception as exc:  # noqa: BLE001  (no metadata database here: the defaults apply)
        log.debug("run conf of %s/%s not read: %s", dag_id, airflow_run_id, exc)
        return None


def _dag_tags(dag_id: str) -> list[str]:
    """The DAG's tags from the metadata database (the link is offered on the same test)."""
    if dag_id in DAYONE_DAG_IDS:
        return []
    try:
        from sqlalchemy import select

        from airflow.models.dag import DagTag
        from airflow.utils.session import create_session

        with create_session() as session:
            return list(session.scalars(select(DagTag.name).where(DagTag.dag_id == dag_id)))
    except Exception as exc:  # noqa: BLE001  (no metadata database: only the id decides)
        log.debug("tags of %s not read: %s", dag_id, exc)
        return []


def _s3_client(conn_id: str) -> Any:
    from airflow.models.connection import Connection

    from tasks.publish.archive import make_client

    conn = Connection.get_connection_from_secrets(conn_id)
    extra = conn.extra_dejson or {}
    return make_client(extra.get("endpoint_url"), conn.login, conn.password, extra.get("region_name"))


# ---- the app ---------------------------------------------------------------------------------------


def wants_html(request: Any) -> bool:
    """A browser opening the link (or the run page's tab), not curl or a script."""
    return "text/html" in request.headers.get("accept", "")


def build_report_app() -> Any:
    """The FastAPI app mounted at /dayone: GET /reports/{dag_id}/{run_id}[/summary.json]."""
    from html import escape

    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.exception_handlers import http_exception_handler
    from fastapi.responses import HTMLResponse, RedirectResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    from dayone_airflow.glue import dayone_run_id

    # No trailing-slash redirects: `/reports/d/%2E%2E%2F` answers 404, not a redirect to a `..` URL.
    app = FastAPI(title="DayOne reports", docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    can_read_run = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.RUN))

    @app.exception_handler(StarletteHTTPException)
    async def answer_browsers_in_html(request: Any, exc: StarletteHTTPException) -> Response:
        if not wants_html(request):
            return await http_exception_handler(request, exc)
        if exc.status_code == 401:  # not signed in: to the login page, and back here after it
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status_code=307)
        page = NOT_THERE_PAGE.replace("$detail", escape(str(exc.detail))).replace("$status", str(exc.status_code))
        return HTMLResponse(page, status_code=exc.status_code, headers={
            "Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff"})

    def serve(dag_id: str, run_id: str, name: str) -> Response:
        if not is_dayone_dag(dag_id, _dag_tags(dag_id)):
            raise HTTPException(404, f"{dag_id} is not a DayOne DAG")
        found = find_report(dag_id, run_id, name)
        if found is None and name == REPORT:
            steps = find_progress(run_id)
            if steps:  # the run is under way (or stopped before its report): what it has measured so far
                from tasks.report.html import render_progress

                return HTMLResponse(render_progress(dayone_run_id(run_id), steps), headers={
                    "Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff",
                    "Cache-Control": "no-store", "X-DayOne-Report-Source": "progress"})
        if found is None:
            raise HTTPException(404, f"no {name} for run {run_id} of {dag_id} yet: its report task has not "
                                     "finished, or the run was never archived")
        body, where = found
        return Response(body, media_type=SERVED[name], headers={
            "Content-Security-Policy": REPORT_CSP, "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, max-age=300", "X-DayOne-Report-Source": where,
        })

    @app.get("/reports/{dag_id}/{run_id}", dependencies=[can_read_run])
    def report(dag_id: str, run_id: str) -> Response:
        return serve(dag_id, run_id, REPORT)

    @app.get("/reports/{dag_id}/{run_id}/summary.json", dependencies=[can_read_run])
    def summary(dag_id: str, run_id: str) -> Response:
        return serve(dag_id, run_id, SUMMARY)

    return app


class LazyReportApp:
    """ASGI app built on its first request, so schedulers and workers that load plugins never import
    the API server's security modules."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = build_report_app()
        await self._app(scope, receive, send)

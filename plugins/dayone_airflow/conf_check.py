"""Run-config check at the API's front door: HTTP 400 naming the field, before a run is created.

Airflow's trigger route checks each Param's JSON schema on its own, and a JSON schema cannot compare two
values (a long-context length over the model's context limit). This ASGI middleware (an AirflowPlugin's
`fastapi_root_middlewares`) runs before the route for DAGs tagged `dayone`: it merges the conf over the
DAG's param values as Airflow does (top-level keys replace), runs the plan step's `parse_run_config` and
lane check, and answers 400 with `field: problem. Fix: ...` when they fail; otherwise the request goes on
unchanged. The UI's trigger form posts to the same route; backfills (POST /api/v2/backfills) are checked too.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from airflow.plugins_manager import AirflowPlugin

log = logging.getLogger("dayone.airflow.conf_check")

TRIGGER_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?$")
BACKFILL_PATH = re.compile(r"/api/v2/backfills/?$")
DAYONE_TAG = "dayone"


def check_conf(params: dict[str, Any], conf: dict[str, Any] | None) -> list[dict[str, str]]:
    """Problems of `conf` merged over the DAG's param values (top-level keys replace, as Airflow does)."""
    from dayone_airflow.glue import config_from_params
    from tasks.steps.lanes import check_lanes
    from tasks.config import ConfigError, parse_run_config

    merged = {**params, **(conf or {})}
    try:
        check_lanes(parse_run_config(config_from_params(merged, conf)))
    except ConfigError as exc:
        return [{"field": f, "problem": m, "fix": x} for f, m, x in exc.problems]
    return []


def _dag_params(dag_id: str) -> dict[str, Any] | None:
    """The DAG's param values, or None when it is not a DayOne DAG (or not known)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.serialization.serialized_objects import DagSerialization

    row = SerializedDagModel.get(dag_id)
    # Only the params and tags are read: deserializing the whole DAG costs seconds per trigger.
    encoded = ((row.data if row else None) or {}).get("dag") or {}
    if DAYONE_TAG not in (encoded.get("tags") or ()):
        return None
    params = DagSerialization._deserialize_params_dict(encoded.get("params") or [])
    if "engines" not in params:
        return None
    return {k: params.get_param(k).value for k in params}


def problems_for(path: str, body: bytes) -> tuple[str, list[dict[str, str]]] | None:
    m = TRIGGER_PATH.search(path)
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return None  # Airflow answers malformed JSON itself
    if not isinstance(doc, dict):
        return None
    if m:
        dag_id, conf = m.group("dag_id"), doc.get("conf")
    elif BACKFILL_PATH.search(path):
        dag_id, conf = doc.get("dag_id"), doc.get("dag_run_conf")
    else:
        return None
    if conf is not None and not isinstance(conf, dict):
        return None
    params = _dag_params(str(dag_id))
    if params is None:
        return None
    found = check_conf(params, conf)
    return (str(dag_id), found) if found else None


def message(dag_id: str, problems: list[dict[str, str]]) -> str:
    return f"Invalid run config for {dag_id}: " + "; ".join(
        f"{p['field']}: {p['problem']}. Fix: {p['fix']}" for p in problems)


class RunConfCheckMiddleware:
    """Pure ASGI: reads the POST body, checks it, then replays it to the app unchanged."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope.get("type") != "http" or scope.get("method") != "POST" or not (
                TRIGGER_PATH.search(path) or BACKFILL_PATH.search(path)):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            from starlette.concurrency import run_in_threadpool

            found = await run_in_threadpool(problems_for, path, body)
        except Exception:  # noqa: BLE001  (the check must never block a trigger; Airflow's own checks remain)
            log.exception("run-config check failed; passing the request on")
            found = None
        if found is not None:
            from starlette.responses import JSONResponse

            dag_id, problems = found
            response = JSONResponse({"detail": message(dag_id, problems), "problems": problems}, status_code=400)
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class DayOneRunConfCheckPlugin(AirflowPlugin):
    name = "dayone_run_conf_check"
    fastapi_root_middlewares = [
        {"middleware": RunConfCheckMiddleware, "args": [], "kwargs": {}, "name": "DayOne run-config check"},
    ]

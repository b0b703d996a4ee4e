"""Least privilege, derived: the calls DayOne's code makes against the Kubernetes API (its client
methods, scanned) and those KubernetesPodOperator makes for a runner pod (seen by the API server in
test_k8s_runner_pods_pipeline.py) are exactly what the Roles grant; docs/deploy.md shows those Roles."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import yaml

from tasks.k8s import api
from tasks.k8s.rbac import (POD_OPERATOR_CALLS, RUNNER_NAMESPACED, WORKER_CLUSTER, WORKER_NAMESPACED, Grant,
                            granted, roles)

REPO = Path(__file__).resolve().parents[2]
_CLIENT_CALL = re.compile(r"\b(list|read|create|delete|patch|replace)_namespaced_([a-z]+)(_status|_log)?\b|\bread_node\b")
_VERB = {"list": "list", "read": "get", "create": "create", "delete": "delete", "patch": "patch", "replace": "update"}
_GROUP = {"deployments": "apps"}


def calls_in(text: str) -> set[Grant]:
    """(apiGroup, resource, verb) of every Kubernetes client method named in `text`."""
    found: set[Grant] = set()
    for m in _CLIENT_CALL.finditer(text):
        if m.group(0) == "read_node":
            found.add(("", "nodes", "get"))
            continue
        resource = m.group(2) + "s"
        sub = {"_status": "/status", "_log": "/log"}.get(m.group(3) or "", "")
        found.add((_GROUP.get(resource, ""), resource + sub, _VERB[m.group(1)]))
    return found


def code_calls() -> set[Grant]:
    return {c for root in ("tasks", "plugins") for p in sorted((REPO / root).rglob("*.py"))
            for c in calls_in(p.read_text())}


def api_calls(requests: list[dict], user: str) -> set[Grant]:
    """What the local API server saw `user` do, as RBAC names it."""
    seen: set[Grant] = set()
    for r in requests:
        if r["user"] != user:
            continue
        parts = r["path"].strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        if "nodes" in parts:
            seen.add(("", "nodes", "get"))
            continue
        rest = parts[parts.index("namespaces") + 2:]
        resource = rest[0] + ("/" + rest[2] if len(rest) > 2 else "")
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(r["method"])
        if verb is None:
            verb = "watch" if r["query"].get("watch") in ("1", "true") else ("get" if len(rest) > 1 else "list")
        seen.add((group, resource, verb))
    return seen


def test_the_worker_roles_grant_every_call_dayone_makes_and_no_other():
    grants = granted(roles(), "dayone-worker") | granted(roles(), "dayone-worker-nodes")
    assert grants == WORKER_NAMESPACED | WORKER_CLUSTER
    assert grants == code_calls() | POD_OPERATOR_CALLS, (
        f"missing: {sorted(code_calls() | POD_OPERATOR_CALLS - grants)}; "
        f"unused: {sorted(grants - code_calls() - POD_OPERATOR_CALLS)}")


def test_the_runner_role_is_what_the_restart_readings_call():
    """A runner pod deploys nothing: around each step it reads the engine's pods and, after a restart, their events."""
    reads = calls_in(inspect.getsource(api.list_pods)) | calls_in(inspect.getsource(api.pod_events))
    assert granted(roles(), "dayone-runner") == RUNNER_NAMESPACED == reads


def test_deploy_docs_show_the_roles():
    text = (REPO / "docs" / "deploy.md").read_text()
    [block] = re.findall(r"```yaml\n(# dayone RBAC.*?)```", text, re.S)
    assert list(yaml.safe_load_all(block)) == roles()

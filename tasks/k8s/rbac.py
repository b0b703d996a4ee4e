"""The least rights DayOne needs on a cluster: the Role (and node ClusterRole) of the Airflow worker and
triggerer, and the Role of the runner pods. Each rule is a call the code makes; tests/k8s/test_k8s_rbac.py
derives the calls from the code and the API server's log and fails on a missing or an unused grant."""

from __future__ import annotations

from typing import Any

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

# KubernetesPodOperator's own calls for a runner pod (provider code, deferrable, no XCom sidecar, no event
# watch): create the pod, find it by labels, read it while waiting, read its log, label it checked, delete it.
POD_OPERATOR_CALLS: frozenset[Grant] = frozenset({
    ("", "pods", "create"), ("", "pods", "list"), ("", "pods", "get"), ("", "pods/log", "get"),
    ("", "pods", "patch"), ("", "pods", "delete")})

# The worker and triggerer, in the run's namespace: engines' (and OpenWebUI's) Deployments and Services made,
# watched and deleted, their pods, events and logs read, an engine's API key Secret read, OpenWebUI's Secret
# made and deleted, and the runner pods.
WORKER_NAMESPACED: frozenset[Grant] = frozenset({
    ("apps", "deployments", "create"), ("apps", "deployments", "list"), ("apps", "deployments", "delete"),
    ("apps", "deployments/status", "get"),
    ("", "services", "create"), ("", "services", "list"), ("", "services", "delete"),
    ("", "events", "list"), ("", "secrets", "get"),
    ("", "secrets", "create"), ("", "secrets", "list"), ("", "secrets", "delete"),
    *POD_OPERATOR_CALLS})
# Cluster-scoped: the node an engine runs on (its GPU labels, for the report's hardware).
WORKER_CLUSTER: frozenset[Grant] = frozenset({("", "nodes", "get")})
# A runner pod reads the engine's restarts around each step: its pods, and their events after a restart.
RUNNER_NAMESPACED: frozenset[Grant] = frozenset({("", "pods", "list"), ("", "events", "list")})


def _rules(grants: frozenset[Grant]) -> list[dict[str, Any]]:
    by_resource: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in sorted(grants):
        by_resource.setdefault((group, resource), []).append(verb)
    return [{"apiGroups": [g], "resources": [r], "verbs": sorted(v)} for (g, r), v in sorted(by_resource.items())]


def roles(namespace: str = "dayone") -> list[dict[str, Any]]:
    """The Role of the worker, its ClusterRole for nodes, and the runner pods' Role (bind them to the
    worker's and the runner's service accounts; docs/deploy.md, 'Least privilege')."""
    meta = {"namespace": namespace}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "dayone-worker", **meta}, "rules": _rules(WORKER_NAMESPACED)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "dayone-worker-nodes"}, "rules": _rules(WORKER_CLUSTER)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "dayone-runner", **meta}, "rules": _rules(RUNNER_NAMESPACED)},
    ]


def granted(objects: list[dict[str, Any]], name: str) -> frozenset[Grant]:
    """The (apiGroup, resource, verb) a Role or ClusterRole of `objects` grants."""
    [role] = [o for o in objects if o["metadata"]["name"] == name]
    return frozenset((g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                     for v in rule["verbs"])

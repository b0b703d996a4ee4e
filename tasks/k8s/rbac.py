"""The least rights DayOne needs on a cluster: the Role (and node ClusterRole) of the Airflow worker and
triggerer, and the Role of the runner pods. Each rule is a call the code makes: tests/k8s/test_k8s_rbac.py
derives the worker's calls from the code and the runner's from what every runner step calls on the local
API server, which enforces these Roles as a cluster does (tests/k8s/fake_apiserver.py), and fails on a
missing or an unused grant."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tasks.config import RunConfig

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

# KubernetesPodOperator's own calls for a runner pod (provider code, deferrable, no XCom sidecar, no event
# watch): create the pod, find it by labels, read it while waiting, read its log, label it checked, delete it.
POD_OPERATOR_CALLS: frozenset[Grant] = frozenset({
    ("", "pods", "create"), ("", "pods", "list"), ("", "pods", "get"), ("", "pods/log", "get"),
    ("", "pods", "patch"), ("", "pods", "delete")})

# The worker and triggerer, in the run's namespace: engines' (and OpenWebUI's) Deployments and Services made,
# watched and deleted, their pods, events and logs read, OpenWebUI's Secret made, and the runner pods.
# OpenWebUI's Secret has a generated name and is owned by its Service: the garbage collector deletes it with
# the Service, so the worker never lists, reads or deletes a Secret of its own making (RBAC cannot limit
# `create` by name; it creates nothing else).
WORKER_NAMESPACED: frozenset[Grant] = frozenset({
    ("apps", "deployments", "create"), ("apps", "deployments", "list"), ("apps", "deployments", "delete"),
    ("apps", "deployments/status", "get"),
    ("", "services", "create"), ("", "services", "list"), ("", "services", "delete"),
    ("", "events", "list"), ("", "secrets", "create"),
    *POD_OPERATOR_CALLS})
# Granted on the Secrets the config names only (resourceNames): an engine's API key (api_key_secret), read
# by the worker's steps and the readiness trigger. No list: a list returns every Secret's data.
WORKER_NAMED: frozenset[Grant] = frozenset({("", "secrets", "get")})
# Cluster-scoped: the node an engine runs on (its GPU labels, for the report's hardware).
WORKER_CLUSTER: frozenset[Grant] = frozenset({("", "nodes", "get")})
# A runner pod reads the engine's restart count around each step: its pods (a restart's causes are not read
# there; tests/k8s/test_k8s_rbac.py records what every runner step calls).
RUNNER_NAMESPACED: frozenset[Grant] = frozenset({("", "pods", "list")})


def config_secrets(config: RunConfig) -> list[str]:
    """The Secrets of the run's namespace the worker reads: those its engines' api_key_secret name."""
    return sorted({e.api_key_secret.name for e in config.engines if e.api_key_secret is not None})


def _rules(grants: frozenset[Grant], names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    by_resource: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in sorted(grants):
        by_resource.setdefault((group, resource), []).append(verb)
    named = {} if names is None else {"resourceNames": sorted(names)}
    return [{"apiGroups": [g], "resources": [r], **named, "verbs": sorted(v)}
            for (g, r), v in sorted(by_resource.items())]


def roles(namespace: str = "dayone", secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The Role of the worker (reading the Secrets named in `secrets`), its ClusterRole for nodes, and the
    runner pods' Role (bind them to the worker's and the runner's service accounts; docs/deploy.md, 'Least
    privilege')."""
    meta = {"namespace": namespace}
    secrets = sorted(set(secrets))
    worker = _rules(WORKER_NAMESPACED) + (_rules(WORKER_NAMED, secrets) if secrets else [])
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "dayone-worker", **meta}, "rules": worker},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "dayone-worker-nodes"}, "rules": _rules(WORKER_CLUSTER)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "dayone-runner", **meta}, "rules": _rules(RUNNER_NAMESPACED)},
    ]


def roles_for(config: RunConfig) -> list[dict[str, Any]]:
    """The Roles a run of `config` needs, in its namespace."""
    return roles(config.kubernetes.namespace, config_secrets(config))


def granted(objects: list[dict[str, Any]], name: str) -> frozenset[Grant]:
    """The (apiGroup, resource, verb) a Role or ClusterRole of `objects` grants (on some names or on all)."""
    [role] = [o for o in objects if o["metadata"]["name"] == name]
    return frozenset((g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                     for v in rule["verbs"])

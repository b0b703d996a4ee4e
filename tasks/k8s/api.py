"""The Kubernetes API calls DayOne makes, through the official client (`kubernetes`).

Every function takes a `kubernetes.client.ApiClient` (the Airflow side gets it from the
cncf-kubernetes provider's KubernetesHook, the CLI from a kubeconfig) and returns API objects as
plain JSON dicts, the form the manifests are written in and rollout.py reads.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tasks.k8s.manifests import LABEL_MANAGED_BY, LABEL_RUN, MANAGED_BY

LOG_LIMIT_BYTES = 4_000_000


def _plain(api_client: k8s.ApiClient, obj: Any) -> dict[str, Any]:
    return api_client.sanitize_for_serialization(obj)


def create_object(api_client: k8s.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Create a Deployment, a Service or a Secret (OpenWebUI's); the object as the API server made it (its
    uid, and its name where it was generated)."""
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    ns, kind = obj["metadata"]["namespace"], obj["kind"]
    if kind == "Deployment":
        made = apps.create_namespaced_deployment(ns, obj)
    elif kind == "Service":
        made = core.create_namespaced_service(ns, obj)
    elif kind == "Secret":
        made = core.create_namespaced_secret(ns, obj)
    else:
        raise ValueError(f"cannot create {kind}: DayOne only makes Deployments, Services and Secrets")
    return _plain(api_client, made)


def create_objects(api_client: k8s.ApiClient, objects: list[dict[str, Any]]) -> list[str]:
    """Create each object in turn; returns `Kind/name` for each created object."""
    return [f"{obj['kind']}/{create_object(api_client, obj)['metadata']['name']}" for obj in objects]


def read_deployment(api_client: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return _plain(api_client, k8s.AppsV1Api(api_client).read_namespaced_deployment_status(name, namespace))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_pods(api_client: k8s.ApiClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods = k8s.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector)
    return _plain(api_client, pods).get("items") or []


def read_node(api_client: k8s.ApiClient, name: str) -> dict[str, Any] | None:
    """A node (its labels carry the GPU feature-discovery facts); None when it is gone or not readable."""
    try:
        return _plain(api_client, k8s.CoreV1Api(api_client).read_node(name))
    except ApiException as exc:
        if exc.status in (403, 404):  # a runner without the node reader role still runs: the facts are unknown
            return None
        raise


def pod_events_selector(pod: str) -> str:
    """The field selector a pod's events are listed with, by this client and the trigger's async one."""
    return f"involvedObject.kind=Pod,involvedObject.name={pod}"


def pod_events(api_client: k8s.ApiClient, namespace: str, pod: str) -> list[dict[str, Any]]:
    events = k8s.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector=pod_events_selector(pod))
    return _plain(api_client, events).get("items") or []


def container_log(api_client: k8s.ApiClient, namespace: str, pod: str, container: str, previous: bool = False) -> str:
    """A container's log as text ('' when there is none yet).

    Read raw: the client would try to parse a log that happens to be JSON.
    """
    try:
        r = k8s.CoreV1Api(api_client).read_namespaced_pod_log(
            pod, namespace, container=container, previous=previous, limit_bytes=LOG_LIMIT_BYTES, _preload_content=False
        )
    except ApiException as exc:
        if exc.status in (400, 404):  # no such container run (yet), or no previous one
            return ""
        raise
    return r.data.decode("utf-8", errors="replace")


def delete_selected(api_client: k8s.ApiClient, namespace: str, selector: str) -> list[str]:
    """Delete the Deployments, Services and Pods matching `selector`; returns what was deleted.

    Deployments go first with background propagation (their ReplicaSets and Pods follow); Pods
    still listed are deleted directly, so nothing holding GPUs outlives a teardown. A Secret DayOne made
    (OpenWebUI's) is owned by its Service: the garbage collector deletes it with the Service, and DayOne
    never lists Secrets (a list returns their data).
    """
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    deleted = []
    body = k8s.V1DeleteOptions(propagation_policy="Background")
    kinds = (
        ("Deployment", apps.list_namespaced_deployment, apps.delete_namespaced_deployment),
        ("Service", core.list_namespaced_service, core.delete_namespaced_service),
        ("Pod", core.list_namespaced_pod, core.delete_namespaced_pod),
    )
    for kind, lister, deleter in kinds:
        for item in lister(namespace, label_selector=selector).items:
            name = item.metadata.name
            try:
                deleter(name, namespace, body=body)
            except ApiException as exc:
                if exc.status != 404:  # already gone: a GC or a concurrent teardown got there first
                    raise
            deleted.append(f"{kind}/{name}")
    return deleted


def list_managed(api_client: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    """Every Deployment, Service and Pod of a DayOne run's engines (and their OpenWebUIs) in the namespace,
    as plain dicts with kind. Only objects with a run label: the runner's own task pods (KubernetesExecutor)
    carry none. OpenWebUI's Secret goes with its Service (its owner), through the garbage collector."""
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}"
    out = []
    for kind, lister in (
        ("Deployment", apps.list_namespaced_deployment),
        ("Service", core.list_namespaced_service),
        ("Pod", core.list_namespaced_pod),
    ):
        for item in _plain(api_client, lister(namespace, label_selector=selector)).get("items") or []:
            out.append({**item, "kind": kind})
    return out


def delete_object(api_client: k8s.ApiClient, kind: str, namespace: str, name: str) -> bool:
    """Delete one object; False when it was already gone."""
    apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
    deleter = {
        "Deployment": apps.delete_namespaced_deployment,
        "Service": core.delete_namespaced_service,
        "Pod": core.delete_namespaced_pod,
    }[kind]
    try:
        deleter(name, namespace, body=k8s.V1DeleteOptions(propagation_policy="Background"))
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True

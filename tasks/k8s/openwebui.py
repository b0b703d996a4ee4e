"""OpenWebUI's Kubernetes objects beside an engine, as plain API dicts: pure functions.

A Service, a Secret DayOne fills with random values (OpenWebUI's session key, the admin's password, the
engine's API key) under a generated name and owned by that Service (the garbage collector deletes it with
the Service: the worker never lists or deletes Secrets), and a Deployment of one locked-down pod that
reads them by secretKeyRef. Labelled with the run like the engine's objects, but not with the engine's
label: the engine's Service and rollout select by that label, and must never count OpenWebUI's pod as
the engine's.
"""

from __future__ import annotations

import base64
from typing import Any

from tasks.config import RunConfig
from tasks.config.openwebui import ADMIN, offline_settings, serve_argv, tls_settings
from tasks.engines import adapter_for
from tasks.k8s.manifests import (LABEL_MANAGED_BY, LABEL_RUN, MANAGED_BY, PORT_NAME, _env, _pod_spec, _probe,
                                 _security, label_value, object_name, service_url)

LABEL_FOR = "dayone/openwebui-for"  # the engine OpenWebUI stands in front of
CONTAINER = "openwebui"
PORT = 8080  # the image's own (PORT in its Dockerfile)
UID = 10001  # non-root; the image's default user is root
WORKDIR = "/app/backend"  # the image's WORKDIR: `python -m uvicorn open_webui.main:app` imports from here
# Where it writes, each an emptyDir: its database and uploads, the static files it copies at start, temp files.
WRITABLE = {"data": "/var/lib/openwebui/data", "static": "/var/lib/openwebui/static", "tmp": "/tmp"}
# The Secret's keys and the variables that read them (the engine's key from its api_key_secret where it has one).
# The engine's CA bundle (its tls_ca_bundle, read where DayOne runs) as a key of the Secret, mounted as a file.
CA_KEY, CA_DIR, CA_FILE = "engine-ca.pem", "/etc/dayone/engine-ca", "ca.pem"
SECRET_KEYS = {"WEBUI_SECRET_KEY": "webui-secret-key", "WEBUI_ADMIN_PASSWORD": "admin-password",
               "OPENAI_API_KEYS": "openai-api-keys"}
# About 880 MiB resident after start, more while it streams a chat; no CPU limit (throttling slows its start).
RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
STARTUP_TIMEOUT_S = 300  # healthy in about 14 s on a CPU core; slack for a cold image pull


def openwebui_name(run_id: str, engine: str) -> str:
    return object_name(run_id, f"{engine}-openwebui")


def openwebui_selector(run_id: str, engine: str) -> str:
    """The label selector of OpenWebUI's objects in front of one engine of a run."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={label_value(run_id)},{LABEL_FOR}={engine}"


def _labels(run_id: str, engine: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, "app.kubernetes.io/name": "dayone-openwebui",
            "app.kubernetes.io/instance": openwebui_name(run_id, engine), LABEL_RUN: label_value(run_id),
            LABEL_FOR: engine}


def engine_v1_url(config: RunConfig, engine: str, scheme: str = "http") -> str:
    """The engine's Service as a pod in the namespace reaches it (cluster DNS), with OpenAI's /v1; `scheme`: the
    one DayOne reaches the engine with (https where it serves TLS)."""
    port = adapter_for(config.engine(engine).dialect).default_port
    url = service_url(object_name(config.run_id, engine), config.kubernetes.namespace, port) + "/v1"
    return scheme + url.removeprefix("http")


def pod_env(config: RunConfig, engine: str, secret: str, engine_url: str | None = None) -> list[dict[str, Any]]:
    """The local process's offline settings (tasks/openwebui/server.py), the pod's paths, keys by reference, and
    the engine's TLS trust (its CA bundle mounted from the Secret)."""
    spec = config.engine(engine)
    values = {**offline_settings(engine_url or engine_v1_url(config, engine)),
              **tls_settings(f"{CA_DIR}/{CA_FILE}" if spec.tls_ca_bundle else None, spec.tls_verify),
              "DATA_DIR": WRITABLE["data"], "STATIC_DIR": WRITABLE["static"], "HOME": WRITABLE["tmp"],
              "WEBUI_ADMIN_EMAIL": ADMIN["email"], "WEBUI_ADMIN_NAME": ADMIN["name"]}
    refs = {var: {"name": secret, "key": key} for var, key in SECRET_KEYS.items()}
    engine_key = config.engine(engine).api_key_secret
    if engine_key is not None:  # the engine's own Secret, read where it is rather than copied
        refs["OPENAI_API_KEYS"] = {"name": engine_key.name, "key": engine_key.key}
    return _env(values) + [{"name": var, "valueFrom": {"secretKeyRef": ref}} for var, ref in sorted(refs.items())]


def render_secret(config: RunConfig, engine: str, values: dict[str, str], owner: dict[str, Any],
                  ca_pem: str | None = None) -> dict[str, Any]:
    """The Secret of `values` (variable -> value, SECRET_KEYS' variables) and the engine's CA bundle `ca_pem`,
    owned by `owner` (OpenWebUI's Service as the API server made it), its name generated: a Secret of an earlier
    try that the garbage collector has not removed yet never holds the name. Never recorded by the run."""
    meta = owner["metadata"]
    data = {SECRET_KEYS[var]: base64.b64encode(value.encode()).decode() for var, value in values.items()}
    if ca_pem is not None:
        data[CA_KEY] = base64.b64encode(ca_pem.encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"generateName": openwebui_name(config.run_id, engine) + "-",
                         "namespace": config.kubernetes.namespace, "labels": _labels(config.run_id, engine),
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": meta["name"],
                                              "uid": meta["uid"]}]},
            "data": data}


def render_openwebui(config: RunConfig, engine: str, image_ref: str, secret: str | None = None,
                     engine_url: str | None = None) -> list[dict[str, Any]]:
    """[Deployment, Service] of OpenWebUI in front of `engine` (at `engine_url`, default its Service over http),
    running `image_ref` (pinned by digest), its keys and the engine's CA bundle read from the Secret `secret`
    (the name the API server gave it; a dry run shows OpenWebUI's own name)."""
    if "@sha256:" not in image_ref:
        from tasks.k8s.manifests import ManifestError

        raise ManifestError(f"scenarios.openwebui.image: {image_ref!r} is not pinned to a digest. "
                            "Fix: run the pin step (dayone pin) first, or give the image @sha256:<digest>")
    k8s, run_id = config.kubernetes, config.run_id
    name, labels = openwebui_name(run_id, engine), _labels(run_id, engine)
    selector = {LABEL_RUN: labels[LABEL_RUN], LABEL_FOR: engine}
    pod_security, container_security = _security(UID, read_only_root=True)
    container = {
        "name": CONTAINER,
        "image": image_ref,
        "imagePullPolicy": "IfNotPresent",
        "command": serve_argv("python", "0.0.0.0", PORT),
        "workingDir": WORKDIR,
        "env": pod_env(config, engine, secret or name, engine_url),
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "resources": RESOURCES,
        "volumeMounts": [{"name": n, "mountPath": path} for n, path in WRITABLE.items()],
        "startupProbe": _probe("/health", 2, 2, STARTUP_TIMEOUT_S // 2),
        "readinessProbe": _probe("/health", 5, 2, 3),
        "livenessProbe": _probe("/health", 30, 10, 5),
        "securityContext": container_security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    volumes: list[dict[str, Any]] = [{"name": n, "emptyDir": {}} for n in WRITABLE]
    if config.engine(engine).tls_ca_bundle:  # the engine's CA, from the Secret, where tls_settings points
        volumes.append({"name": "engine-ca", "secret": {"secretName": secret or name,
                                                        "items": [{"key": CA_KEY, "path": CA_FILE}]}})
        container["volumeMounts"].append({"name": "engine-ca", "mountPath": CA_DIR, "readOnly": True})
    pod_spec = _pod_spec(k8s.service_account, pod_security, container, volumes)
    if k8s.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in k8s.tolerations]
    meta = {"name": name, "namespace": k8s.namespace, "labels": labels}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 1,
                 "progressDeadlineSeconds": STARTUP_TIMEOUT_S + 300, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": dict(meta),
               "spec": {"type": "ClusterIP", "selector": selector,
                        "ports": [{"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME, "protocol": "TCP"}]}}
    return [deployment, service]

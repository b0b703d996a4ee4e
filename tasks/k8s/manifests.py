"""Kubernetes objects DayOne applies or hands over, as plain API dicts: pure functions.

For one engine of a run: a Deployment and a Service. For the runner image: the pod template
Airflow's KubernetesExecutor starts every DayOne task from.

What the GLM-5.3-Flash Day 1 Hands-on report learnt by hand on a shared 8-GPU host, written down
once:
- the image runs by digest (the linux/amd64 manifest), never by tag;
- a GPU slice is `nvidia.com/gpu` in limits with equal requests, placed by node/node selector;
- a cold start of a large model takes tens of minutes (weights, JIT, autotuning, CUDA graphs):
  the startup probe and progressDeadlineSeconds cover `kubernetes.startup_timeout_s`, and the
  liveness probe only starts once the startup probe passed, so it cannot kill a loading server;
- /dev/shm is a memory emptyDir (NCCL between tensor-parallel ranks needs more than 64 MiB).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
from typing import Any

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.engines import adapter_for
from tasks.telemetry.hardware import gpu_report_script

MANAGED_BY = "dayone"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_RUN = "dayone/run-id"
LABEL_ENGINE = "dayone/engine"
ANNOTATION_CREATED = "dayone/created-at"
ANNOTATION_RUN = "dayone/run-id"  # the full run id, when the label had to be shortened
CONTAINER = "engine"
PORT_NAME = "http"

PROBE_PERIOD_S = 10
# Slack on top of the startup timeout for scheduling and pulling a multi-GB image on a cold node.
PULL_AND_SCHEDULE_SLACK_S = 600
HOME = "/home/dayone"
# The runner image's user (USER in docker/Dockerfile) and the places it writes: everything else is read-only.
RUNNER_UID = 10001
RUNNER_ENV = {"DAYONE_WORKDIR": "/work/runs", "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/matplotlib"}
RUNNER_WRITABLE = {"tmp": "/tmp", "work": "/work"}
# KubernetesExecutor finds the task's container by this name and sets its args to the task's
# command (`python -m airflow.sdk.execution_time.execute_workload ...`), keeping the template's
# command. The image's entrypoint is `dayone`, so the template's command runs the args as they are.
EXECUTOR_CONTAINER = "base"
EXECUTOR_COMMAND = ["/usr/bin/env"]


class ManifestError(ValueError):
    """The run config cannot be rendered; the message names the field and the fix."""


def label_value(value: str) -> str:
    """A label value (<= 63 chars of [A-Za-z0-9._-], alphanumeric at both ends) that stays unique."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", value).strip("-._")
    if clean == value and len(clean) <= 63:
        return clean
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{clean[:52].rstrip('-._')}-{digest}".lstrip("-._")


def object_name(run_id: str, engine: str) -> str:
    """`dayone-<engine>-<run>`: a DNS-1035 label (Service names must be), <= 63 characters."""
    run = re.sub(r"[^a-z0-9-]", "-", run_id.lower()).strip("-")
    name = re.sub(r"-+", "-", f"dayone-{engine}-{run}").strip("-")
    if len(name) <= 63 and run_id.lower() == run_id:
        return name
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


def run_selector(run_id: str, engine: str | None = None) -> str:
    """The label selector of everything DayOne made for a run (or one engine of it)."""
    parts = [f"{LABEL_MANAGED_BY}={MANAGED_BY}", f"{LABEL_RUN}={label_value(run_id)}"]
    if engine:
        parts.append(f"{LABEL_ENGINE}={engine}")
    return ",".join(parts)


def labels_for(run_id: str, engine: str) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        "app.kubernetes.io/name": "dayone-engine",
        "app.kubernetes.io/instance": object_name(run_id, engine),
        LABEL_RUN: label_value(run_id),
        LABEL_ENGINE: engine,
    }


def image_by_digest(engine: EngineSpec, pinned: dict[str, Any]) -> str:
    ref = pinned.get("pinned_ref") or ""
    if not re.search(r"@sha256:[a-f0-9]{64}$", ref):
        raise ManifestError(
            f"engines[{engine.name}].image: {engine.image!r} is not pinned to a digest. "
            "Fix: run the pin step (dayone pin) first, or set engines[].digest"
        )
    return ref


def _probe(path: str, period_s: int, timeout_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period_s,
        "timeoutSeconds": timeout_s,
        "failureThreshold": failures,
        "successThreshold": 1,
    }


def _security(uid: int | None, read_only_root: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod, container) security contexts: no privilege, no capabilities, RuntimeDefault seccomp.

    Engines keep a writable root filesystem: their images JIT-compile kernels (Triton, FlashInfer,
    DeepGEMM) into caches some versions keep beside their packages. The runner needs none.
    """
    pod: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    container: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if uid is not None:
        non_root = uid != 0
        pod.update({"runAsUser": uid, "runAsGroup": uid, "fsGroup": uid, "runAsNonRoot": non_root})
        container.update({"runAsUser": uid, "runAsGroup": uid, "runAsNonRoot": non_root})
    return pod, container


def _pod_spec(service_account: str, pod_security: dict[str, Any], container: dict[str, Any],
              volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """The spec every DayOne pod shares: no API token (so no API rights), no host namespaces."""
    return {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": pod_security,
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
        "volumes": volumes,
    }


def _env(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def render_engine(
    config: RunConfig,
    engine: EngineSpec,
    pinned: dict[str, Any],
    created_at: dt.datetime | None = None,
) -> list[dict[str, Any]]:
    """[Deployment, Service] for one engine of the run, as plain API objects."""
    if not config.run_id:
        raise ManifestError("run_id: required to render Kubernetes objects. Fix: set run_id (the pipeline does)")
    k8s = config.kubernetes
    adapter = adapter_for(engine.dialect)
    port = adapter.default_port
    try:
        command = adapter.launch_command(engine, config.model, port)
    except NotImplementedError as exc:
        raise ManifestError(f"engines[{engine.name}].dialect: {exc}. Fix: use sglang, vllm or openai on kubernetes") from None
    env = {"HOME": HOME, **adapter.launch_env(engine)}
    name = object_name(config.run_id, engine.name)
    labels = labels_for(config.run_id, engine.name)
    selector = {LABEL_RUN: labels[LABEL_RUN], LABEL_ENGINE: engine.name}
    created = (created_at or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    annotations = {
        ANNOTATION_CREATED: created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        ANNOTATION_RUN: config.run_id,
        "dayone/image": engine.image or "",
        "dayone/index-digest": pinned.get("index_digest") or "",
        "dayone/platform-digest": pinned.get("platform_digest") or "",
    }
    pod_security, container_security = _security(k8s.run_as_user, read_only_root=False)

    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "home", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "home", "mountPath": HOME},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    for i, path in enumerate(adapter.launch_dirs):
        volumes.append({"name": f"launch-dir-{i}", "emptyDir": {}})
        mounts.append({"name": f"launch-dir-{i}", "mountPath": path})
    if k8s.model_volume_claim:
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": k8s.model_volume_claim, "readOnly": True}})
        mounts.append({"name": "model", "mountPath": k8s.model_mount_path, "readOnly": True})

    resources: dict[str, Any] = {}
    launch: dict[str, Any] = {"command": command}
    if engine.gpus:
        gpus = {"nvidia.com/gpu": str(engine.gpus)}
        resources = {"limits": dict(gpus), "requests": dict(gpus)}
        # The GPUs the pod was given are only visible from inside it: print them, leave the memory loop
        # running (memory per card), then exec the engine.
        launch = {"command": ["/bin/sh", "-c", gpu_report_script(k8s.gpu_memory_interval_s), "dayone-engine"],
                  "args": command}

    node_selector = dict(engine.node_selector)
    if engine.node:
        node_selector["kubernetes.io/hostname"] = engine.node

    startup_failures = math.ceil(k8s.startup_timeout_s / PROBE_PERIOD_S)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image_by_digest(engine, pinned),
        "imagePullPolicy": "IfNotPresent",
        **launch,
        "env": _env(env),
        "ports": [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "resources": resources,
        "volumeMounts": mounts,
        # Up to startup_timeout_s of cold start; liveness and readiness wait for it to pass.
        "startupProbe": _probe(adapter.liveness_path, PROBE_PERIOD_S, 5, startup_failures),
        # Traffic only once the model is listed (vLLM's /health passes before it serves).
        "readinessProbe": _probe(adapter.models_path, PROBE_PERIOD_S, 5, 3),
        # A near-1M-token prefill can hold the server for minutes: only a long silence is death.
        "livenessProbe": _probe(adapter.pod_liveness_path or adapter.liveness_path, 60, 30, 10),
        "securityContext": container_security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec = _pod_spec(k8s.service_account, pod_security, container, volumes)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if k8s.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in k8s.tolerations]

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": k8s.namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": 1,
            # GPUs are exclusive: a rolling update would wait forever for a second slice.
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": k8s.startup_timeout_s + PULL_AND_SCHEDULE_SLACK_S,
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": labels, "annotations": dict(annotations)}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": k8s.namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def runner_pod_template(image: str, namespace: str = "dayone", service_account: str = "dayone-runner") -> dict[str, Any]:
    """The Pod KubernetesExecutor starts each DayOne task from (`[kubernetes_executor] pod_template_file`).

    The runner image, non-root with a read-only root: it writes only to emptyDirs at /tmp and /work.
    Results leave through S3 (its connection comes in as env the deployment adds). The executor
    adds the task's args to the container named "base" (see EXECUTOR_COMMAND).
    """
    pod_security, container_security = _security(RUNNER_UID, read_only_root=True)
    container = {
        "name": EXECUTOR_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(EXECUTOR_COMMAND),
        "env": _env(RUNNER_ENV),
        "volumeMounts": [{"name": n, "mountPath": path} for n, path in RUNNER_WRITABLE.items()],
        "securityContext": container_security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    volumes = [{"name": n, "emptyDir": {}} for n in RUNNER_WRITABLE]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "dayone-runner",  # the executor names each task's pod itself
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, "app.kubernetes.io/name": "dayone-runner"},
        },
        "spec": {**_pod_spec(service_account, pod_security, container, volumes), "restartPolicy": "Never"},
    }


def engine_argv(container: dict[str, Any]) -> list[str]:
    """The engine's own command line in a rendered engine container (after the GPU report wrapper)."""
    return list(container.get("args") or container["command"])


def service_url(obj_name: str, namespace: str, port: int) -> str:
    """The in-cluster address of an engine's Service."""
    return f"http://{obj_name}.{namespace}.svc.cluster.local:{port}"


def validate_objects(objects: list[dict[str, Any]], kube_version: str | None = None, strict: bool = True) -> None:
    """Check objects against the official Kubernetes OpenAPI schema (kubernetes-validate).

    Raises ManifestError naming the object and the schema's complaint.
    """
    try:
        import kubernetes_validate
    except ImportError:
        raise ManifestError(
            "cannot check objects against the Kubernetes schema: kubernetes-validate is not installed. "
            "Fix: pip install kubernetes-validate (or render with --no-validate)"
        ) from None

    from kubernetes_validate.utils import VersionNotSupportedError, all_versions

    version = kube_version or kubernetes_validate.latest_version()
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=strict)
        except (VersionNotSupportedError, IndexError):  # IndexError: older than the oldest schema
            known = all_versions()
            raise ManifestError(
                f"Kubernetes {version}: kubernetes-validate has no schema for it. "
                f"Fix: pick a version from {known[0]} to {known[-1]}"
            ) from None
        except kubernetes_validate.ValidationError as exc:
            raise ManifestError(f"{obj['kind']}/{obj['metadata']['name']}: invalid for Kubernetes {version}: {exc.message}") from None

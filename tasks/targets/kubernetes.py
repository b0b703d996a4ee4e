"""The Kubernetes target: each engine as a Deployment and a Service on its GPU slice.

The local target's lifecycle: pin resolves the image tag to digests (tasks/k8s/images.py); deploy removes
what an earlier try left for this run and engine, then creates the objects tasks/k8s/manifests.py
renders; wait_ready is the one readiness wait over the rollout check (tasks/engines/readiness.py,
tasks/k8s/rollout.py); teardown deletes by the run's labels, cleanup what killed runs left behind.
Cluster, registry and the engine's address come from a `ClusterAccess` the run context passes in
(by default a kubeconfig, DAYONE_REGISTRY_USERNAME / DAYONE_REGISTRY_PASSWORD and the Service's
cluster DNS name; the Airflow glue passes connection-backed ones).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.engines.access import EndpointAccess
from tasks.engines import Readiness, adapter_for
from tasks.k8s import api
from tasks.k8s.manifests import CONTAINER, object_name, render_engine, run_selector, service_url
from tasks.k8s.rollout import (created_at, newest_pod, pods_to_explain, restart_causes, restart_total,
                                rollout_platform)
from tasks.engines.readiness import Platform, wait_until_serving
from tasks.state.storage import RunDir, run_id_of
from tasks.state.documents import OPENWEBUI_PINNED, applied_objects_doc, rendered_objects_doc
from tasks.targets.base import Deployment
from tasks.engines.readiness import DeployError

ApiClientFactory = Callable[[str], Any]  # Airflow connection id -> kubernetes.client.ApiClient
CredentialsFactory = Callable[[RunConfig], "tuple[str, str] | None"]
ServiceUrl = Callable[[str, str, int], str]  # (service name, namespace, port) -> base URL


def kubeconfig_client(conn_id: str) -> Any:
    """An API client from the local kubeconfig, or the pod's service account when in a cluster."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()


def env_credentials(config: RunConfig) -> tuple[str, str] | None:
    from tasks.k8s.images import credentials_from_env

    return credentials_from_env()


@dataclass(frozen=True)
class ClusterAccess:
    """Where a KubernetesTarget gets its API client, registry credentials and engines' addresses.

    The defaults read a kubeconfig (or the pod's service account) and DAYONE_REGISTRY_USERNAME /
    DAYONE_REGISTRY_PASSWORD; the Airflow glue passes connection-backed ones in the run context.
    """

    api_client: ApiClientFactory = kubeconfig_client
    registry_credentials: CredentialsFactory = env_credentials
    service_url: ServiceUrl = service_url


class KubernetesTarget:
    name = "kubernetes"

    def __init__(self, access: ClusterAccess | None = None, poll_interval_s: float = 5.0,
                 clock: Callable[[], float] = time.time):
        access = access or ClusterAccess()
        self._client_factory = access.api_client
        self._credentials = access.registry_credentials
        self._service_url = access.service_url
        self._clients: dict[str, Any] = {}
        self.poll_interval_s = poll_interval_s
        self.clock = clock

    def client(self, conn_id: str) -> Any:
        if conn_id not in self._clients:
            self._clients[conn_id] = self._client_factory(conn_id)
        return self._clients[conn_id]

    # ---- pin ---------------------------------------------------------------------------------
    def pin(self, config: RunConfig, engine: EngineSpec) -> dict[str, Any]:
        """Digests (index and linux/amd64) and the full command line, before anything starts."""
        from tasks.core.desensitize import recorded_env
        from tasks.k8s.images import pinned_from_config

        if not engine.image:
            raise DeployError(f"engines[{engine.name}].image: required when target is kubernetes")
        pinned = pinned_from_config(engine) or self.pin_image(config, engine.image, f"engines[{engine.name}].image")
        adapter = adapter_for(engine.dialect)
        command = adapter.launch_command(engine, config.model, adapter.default_port)
        identity = {
            "image": engine.image,
            "index_digest": pinned.get("index_digest"),
            "platform_digest": pinned["platform_digest"],
            "command": command,
            "env": recorded_env(adapter.launch_env(engine)),  # values, those of secret-named variables withheld
            "model_revision": config.model.revision,
            "gpus": engine.gpus,
        }
        return {**pinned, "identity": identity, "image_digest": pinned["platform_digest"]}

    def pin_image(self, config: RunConfig, image: str, field: str) -> dict[str, Any]:
        """An image's digests: the one its reference carries, else the registry's (errors name `field`)."""
        from tasks.k8s.images import pinned_from_ref
        from tasks.k8s.images import RegistryError, resolve

        pinned = pinned_from_ref(image)
        if pinned is not None:
            return pinned
        try:
            return {**resolve(image, self._credentials(config)).as_dict(), "source": "registry"}
        except RegistryError as exc:
            raise DeployError(f"{field}: {exc}") from exc

    def service_address(self, name: str, namespace: str, port: int) -> str:
        """Where this worker reaches a Service (the cluster access's `service_url`)."""
        return self._service_url(name, namespace, port).rstrip("/")

    # ---- deploy ------------------------------------------------------------------------------
    def deploy(self, config: RunConfig, engine: EngineSpec, run_dir: RunDir, pinned: dict[str, Any],
               launch_index: int = 0) -> Deployment:
        run_id = run_id_of(config, run_dir)
        config = config if config.run_id else config.model_copy(update={"run_id": run_id})
        objects = render_engine(config, engine, pinned)
        k8s = config.kubernetes
        name = object_name(run_id, engine.name)
        if config.dry_run:
            return self._dry_run(config, engine, run_dir, pinned, objects)
        self.teardown(config, engine.name, run_dir)  # a retry replaces what an earlier try made
        try:
            created = api.create_objects(self.client(k8s.conn_id), objects)
        except Exception as exc:
            raise DeployError(f"engine {engine.name}: creating its objects in namespace {k8s.namespace} failed: {exc}") from exc
        run_dir.write_json(applied_objects_doc(engine.name), _without_env_values(objects))
        port = adapter_for(engine.dialect).default_port
        dep = Deployment(
            engine=engine.name,
            base_url=self._service_url(name, k8s.namespace, port).rstrip("/"),
            image_digest=pinned["platform_digest"],
            identity=pinned.get("identity", {}),
            handle={
                "conn_id": k8s.conn_id,
                "namespace": k8s.namespace,
                "deployment": name,
                "service": name,
                "selector": run_selector(run_id, engine.name),
                "objects": created,
                "launch_index": launch_index,  # a relaunch is a fresh rollout: objects deleted, created anew
            },
        )
        dep.save(run_dir)
        return dep

    def _dry_run(self, config: RunConfig, engine: EngineSpec, run_dir: RunDir, pinned: dict[str, Any],
                 objects: list[dict[str, Any]]) -> Deployment:
        """Render and check everything, apply nothing: the objects land in k8s/<engine>.yaml, with OpenWebUI's
        beside the engine's where the openwebui step runs (its Secret is made with fresh values at deploy,
        so only the references to it are rendered)."""
        import yaml

        from tasks.k8s.manifests import validate_objects

        owui = run_dir.read_json(OPENWEBUI_PINNED) if config.scenarios.openwebui.enabled else None
        if owui:
            from tasks.k8s.openwebui import render_openwebui

            objects = [*objects, *render_openwebui(config, engine.name, owui["pinned_ref"])]
        validate_objects(objects)
        rendered = run_dir.write_bytes(rendered_objects_doc(engine.name),
                                       yaml.safe_dump_all(_without_env_values(objects), sort_keys=False).encode())
        run_dir.write_json(applied_objects_doc(engine.name), _without_env_values(objects))
        name = object_name(run_id_of(config, run_dir), engine.name)
        dep = Deployment(
            engine=engine.name,
            base_url=self._service_url(name, config.kubernetes.namespace, adapter_for(engine.dialect).default_port),
            image_digest=pinned["platform_digest"],
            identity=pinned.get("identity", {}),
            handle={"dry_run": True, "namespace": config.kubernetes.namespace, "deployment": name,
                    "rendered": rendered},
        )
        dep.save(run_dir)
        return dep

    # ---- readiness ---------------------------------------------------------------------------
    def platform(self, deployment: Deployment) -> Platform:
        """The rollout as the API tells it now (the sync reader): judged by tasks/k8s/rollout.py
        `rollout_platform`, as the Airflow trigger's async reader is."""
        h = deployment.handle
        client = self.client(h["conn_id"])
        dep = api.read_deployment(client, h["namespace"], h["deployment"])
        pods = api.list_pods(client, h["namespace"], h["selector"])
        now = self.clock()
        events = {pod: api.pod_events(client, h["namespace"], pod) for pod in pods_to_explain(dep, pods, now)}
        return rollout_platform(dep, pods, events, now)

    def wait_ready(self, config: RunConfig, deployment: Deployment, timeout_s: float,
                   access: EndpointAccess | None = None) -> Readiness:
        if deployment.handle.get("dry_run"):
            raise DeployError(
                f"engine {deployment.engine}: dry run, nothing was deployed (objects in {deployment.handle['rendered']})"
            )

        async def platform() -> Platform:
            return self.platform(deployment)

        adapter = adapter_for(config.engine(deployment.engine).dialect)
        return asyncio.run(wait_until_serving(deployment.engine, adapter, deployment.base_url, config.model.name,
                                              platform=platform, timeout_s=timeout_s, interval_s=self.poll_interval_s,
                                              access=access))

    # ---- observation -------------------------------------------------------------------------
    def restart_count(self, deployment: Deployment) -> int | None:
        h = deployment.handle
        return restart_total(api.list_pods(self.client(h["conn_id"]), h["namespace"], h["selector"]))

    def restart_causes(self, deployment: Deployment) -> list[dict[str, Any]]:
        """Why the engine container restarted (tasks/k8s/rollout.py `restart_causes`): probe kills from
        the pods' events, the last termination from their status."""
        h = deployment.handle
        client = self.client(h["conn_id"])
        pods = api.list_pods(client, h["namespace"], h["selector"])
        events = [e for p in pods for e in api.pod_events(client, h["namespace"], p["metadata"]["name"])]
        return restart_causes(pods, events)

    def startup_log(self, deployment: Deployment) -> str:
        """The engine container's log; after a restart, the crashed run's log comes first."""
        h = deployment.handle
        client = self.client(h["conn_id"])
        pod = newest_pod(api.list_pods(client, h["namespace"], h["selector"]))
        if pod is None:
            return ""
        name = pod["metadata"]["name"]
        text = api.container_log(client, h["namespace"], name, CONTAINER)
        if restart_total([pod]):
            previous = api.container_log(client, h["namespace"], name, CONTAINER, previous=True)
            text = previous + "\n" + text
        return text

    def hardware(self, config: RunConfig, deployment: Deployment) -> dict[str, Any]:
        """The node the engine's pod runs on, its GPU feature-discovery labels, and the GPUs the pod
        asked for; the UUIDs it got come from its container's log (tasks/telemetry/hardware.py)."""
        from tasks.telemetry.hardware import kubernetes_node

        h = deployment.handle
        client = self.client(h["conn_id"])
        pod = newest_pod(api.list_pods(client, h["namespace"], h["selector"]))
        node_name = ((pod or {}).get("spec") or {}).get("nodeName")
        node = api.read_node(client, node_name) if node_name else None
        limits = [((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
                  for c in ((pod or {}).get("spec") or {}).get("containers") or [] if c.get("name") == CONTAINER]
        pod_gpus = int(limits[0]) if limits and limits[0] is not None else None
        return kubernetes_node(node_name, node, pod_gpus)

    # ---- teardown ----------------------------------------------------------------------------
    def teardown(self, config: RunConfig, engine: str, run_dir: RunDir) -> list[str]:
        """Delete everything labelled with this run and engine, and the OpenWebUI in front of it; safe when
        nothing is there."""
        k8s = config.kubernetes
        if config.dry_run:
            return []  # a dry run applied nothing and may have no cluster to talk to
        run_id, client = run_id_of(config, run_dir), self.client(k8s.conn_id)
        deleted = api.delete_selected(client, k8s.namespace, run_selector(run_id, engine))
        if config.scenarios.openwebui.enabled:  # what an openwebui step stopped midway left in front of it
            from tasks.k8s.openwebui import openwebui_selector

            deleted += api.delete_selected(client, k8s.namespace, openwebui_selector(run_id, engine))
        return deleted

    def cleanup(self, config: RunConfig, older_than_s: float | None = None) -> list[str]:
        """Delete DayOne's objects older than `older_than_s` (default kubernetes.cleanup_age_s).

        Killed runs never reach their teardown; their engines would hold GPUs forever.
        """
        k8s = config.kubernetes
        age_s = float(older_than_s if older_than_s is not None else k8s.cleanup_age_s)
        client = self.client(k8s.conn_id)
        now = self.clock()
        deleted = []
        for obj in api.list_managed(client, k8s.namespace):
            born = created_at(obj)
            if born is not None and now - born > age_s:
                if api.delete_object(client, obj["kind"], k8s.namespace, obj["metadata"]["name"]):
                    deleted.append(f"{obj['kind']}/{obj['metadata']['name']}")
        return deleted


def _without_env_values(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The applied objects for the run's manifest: environment values kept, those of secret-named
    variables withheld; a value from a Secret (valueFrom) is recorded as its reference, never read."""
    import copy

    from tasks.core.desensitize import REDACTED, scrub_text, secret_name

    out = copy.deepcopy(objects)
    for obj in out:
        if obj["kind"] != "Deployment":
            continue
        for c in obj["spec"]["template"]["spec"]["containers"]:
            c["env"] = [e if "value" not in e else
                        {**e, "value": REDACTED if secret_name(e["name"]) else scrub_text(str(e["value"]))}
                        for e in c.get("env", [])]
    return out

"""OpenWebUI beside the engine on Kubernetes: pinned by digest in the pin step; in the openwebui step its
Service, Secret (random values, owned by the Service) and Deployment made in the engine's namespace, its
rollout and /health awaited, and all removed when the checks end (the engine's teardown, and the nightly's
cleanup for a killed run, remove by label what a stopped step left; the Secret goes with its Service).
The step runs on the worker, also under kubernetes.measure_from: cluster (tasks/steps/runner_pods.py): the
worker's Role makes these objects, the runner pods' reads restarts only."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from tasks.core.desensitize import register_secret
from tasks.core.polling import TimedOut, poll
from tasks.state.documents import OPENWEBUI_PINNED, openwebui_objects_doc


class ClusterRun(Protocol):
    """What OpenWebUI's deployment needs of a run (tasks/steps/context.py's RunContext has it)."""

    config: Any
    run_id: str
    run_dir: Any
    target: Any

    def endpoint_access(self, engine: str) -> Any: ...

    def deployment(self, engine: str) -> Any: ...

FIELD = "scenarios.openwebui.image"


class OpenWebUINotReady(RuntimeError):
    pass


@dataclass
class OpenWebUIPod:
    """A running OpenWebUI as the checks use it (like server.py's local one): its address, the time from
    creating its objects to healthy, and the password of the admin it made from its Secret."""

    base_url: str
    started_s: float
    admin_password: str


def pin_openwebui(ctx: ClusterRun) -> dict[str, Any]:
    """OpenWebUI's image pinned to its digests (through the registry unless the reference names one),
    kept for the step and recorded in the manifest beside the engines' pins."""
    cfg = ctx.config
    found = ctx.target.pin_image(cfg, cfg.scenarios.openwebui.image, FIELD)
    ctx.run_dir.write_json(OPENWEBUI_PINNED, found)
    return found


@contextmanager
def openwebui_beside_engine(ctx: ClusterRun, engine: str, timeout_s: float | None = None) -> Iterator[OpenWebUIPod]:
    """Deploy OpenWebUI in front of `engine`'s Service, wait until it serves, remove it afterwards."""
    from tasks.k8s import api
    from tasks.k8s.openwebui import (PORT, STARTUP_TIMEOUT_S, engine_v1_url, openwebui_name, openwebui_selector,
                                     render_openwebui)
    from tasks.engines.readiness import DeployError
    from tasks.targets.kubernetes import _without_env_values

    pinned = ctx.run_dir.read_json(OPENWEBUI_PINNED)
    if not pinned:
        raise DeployError(f"{FIELD}: not pinned; the pin step must run first")
    cfg = ctx.config if ctx.config.run_id else ctx.config.model_copy(update={"run_id": ctx.run_id})
    k8s, target = cfg.kubernetes, ctx.target
    values = {"WEBUI_SECRET_KEY": secrets.token_hex(32), "WEBUI_ADMIN_PASSWORD": secrets.token_urlsafe(24)}
    if cfg.engine(engine).api_key_secret is None:  # else the pod reads the engine's own Secret
        values["OPENAI_API_KEYS"] = ctx.endpoint_access(engine).api_key or "none"
    for value in values.values():
        register_secret(value)  # scrubbed from any error or log DayOne writes
    render_openwebui(cfg, engine, pinned["pinned_ref"])  # a reference not pinned fails before anything is made
    name, selector = openwebui_name(cfg.run_id, engine), openwebui_selector(cfg.run_id, engine)
    client = target.client(k8s.conn_id)
    api.delete_selected(client, k8s.namespace, selector)  # what an earlier try left (its Secret goes with it)
    started = time.monotonic()
    engine_url = engine_v1_url(cfg, engine, urlsplit(ctx.deployment(engine).base_url).scheme or "http")
    try:  # the engine at its Service, over TLS where DayOne reaches it so
        objects = create_openwebui(client, cfg, engine, pinned["pinned_ref"], values, engine_url)
        ctx.run_dir.write_json(openwebui_objects_doc(engine), _without_env_values(objects))  # the Secret never
        base_url = target.service_address(name, k8s.namespace, PORT)
        _wait_serving(target, client, k8s.namespace, name, selector, base_url, timeout_s or STARTUP_TIMEOUT_S)
        yield OpenWebUIPod(base_url, round(time.monotonic() - started, 3), values["WEBUI_ADMIN_PASSWORD"])
    except api.ApiException as exc:
        raise DeployError(f"OpenWebUI in front of {engine}: the cluster refused it in namespace "
                          f"{k8s.namespace}: {exc.status} {exc.reason}") from exc
    finally:
        api.delete_selected(client, k8s.namespace, selector)


def create_openwebui(client: Any, cfg: Any, engine: str, image_ref: str, values: dict[str, str],
                     engine_url: str | None = None) -> list[dict[str, Any]]:
    """OpenWebUI's objects made in order: the Service, the Secret of `values` (and the engine's CA bundle, read
    here from its tls_ca_bundle) that the Service owns (the garbage collector deletes it with the Service), then
    the Deployment reading that Secret, in front of the engine at `engine_url`. [Deployment, Service] as applied."""
    from tasks.k8s import api
    from tasks.k8s.openwebui import render_openwebui, render_secret

    ca_bundle = cfg.engine(engine).tls_ca_bundle
    ca_pem = Path(ca_bundle).read_text() if ca_bundle else None
    service = api.create_object(client, render_openwebui(cfg, engine, image_ref)[1])
    secret = api.create_object(client, render_secret(cfg, engine, values, owner=service, ca_pem=ca_pem))
    deployment, rendered_service = render_openwebui(cfg, engine, image_ref, secret["metadata"]["name"], engine_url)
    api.create_object(client, deployment)
    return [deployment, rendered_service]


def _wait_serving(target: Any, client: Any, namespace: str, name: str, selector: str, base_url: str,
                  timeout_s: float) -> None:
    """The rollout up (tasks/k8s/rollout.py, as for an engine), then OpenWebUI's /health through its Service."""
    from tasks.k8s import api
    from tasks.k8s.rollout import pods_to_explain, rollout_platform

    last = ["not created yet"]

    def serving() -> bool | None:
        dep = api.read_deployment(client, namespace, name)
        pods = api.list_pods(client, namespace, selector)
        now = target.clock()
        events = {pod: api.pod_events(client, namespace, pod) for pod in pods_to_explain(dep, pods, now)}
        platform = rollout_platform(dep, pods, events, now)
        if platform.failed:
            raise OpenWebUINotReady(f"OpenWebUI's pod failed: {platform.failed}")
        if platform.waiting:
            last[0] = platform.waiting
            return None
        try:
            code = httpx.get(base_url + "/health", timeout=5).status_code
        except httpx.HTTPError as exc:
            last[0] = f"/health: {type(exc).__name__}"
            return None
        last[0] = f"/health answered {code}"
        return True if code == 200 else None

    try:
        poll(serving, timeout_s=timeout_s, interval_s=min(1.0, target.poll_interval_s))
    except TimedOut:
        raise OpenWebUINotReady(f"OpenWebUI not serving after {timeout_s:.0f} s: {last[0]}") from None

"""Airflow glue for the Kubernetes target: the deferrable readiness wait.

`EngineReadinessOperator` defers to `EngineReadyTrigger`, which waits in the triggerer (no worker slot
held through a cold start) for the Deployment to be available and the engine to serve, failing fast on
image pull errors, crash loops and unschedulable pods with the pod's events (PROTOCOL.md section 8,
"Readiness"). The loop is DayOne's one readiness wait (tasks/engines/readiness.py); the trigger only reads the
API objects the one platform check judges (tasks/k8s/rollout.py `rollout_platform`). The wait's end is
recorded through the step protocol (tasks/steps/execution.py); cluster and registry access come from
Airflow connections (connections.py). Only Airflow's base classes load at import: DAG files stay cheap.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from tasks.engines.readiness import Platform

READY, FAILED, TIMEOUT = "ready", "failed", "timeout"


# ---- readiness -----------------------------------------------------------------------------
class EngineReadyTrigger(BaseTrigger):
    """Polls the Deployment and its pods (kubernetes_asyncio, via AsyncKubernetesHook), then the engine.

    Yields one event: {"status": "ready" | "failed" | "timeout", "message", "waited_s"}.
    The deadline is wall-clock from `started_at`, so a triggerer restart does not extend it.
    """

    clock: Callable[[], float] = time.time  # the platform check's now; the target's is injectable too

    def __init__(
        self,
        kubernetes_conn_id: str,
        namespace: str,
        deployment: str,
        selector: str,
        base_url: str,
        dialect: str,
        model: str,
        timeout_s: float,
        poll_interval_s: float = 10.0,
        started_at: float | None = None,
        engine: str = "",
        api_key_connection: str | None = None,
        api_key_secret: dict[str, str] | None = None,
        tls_ca_bundle: str | None = None,
        tls_verify: bool = True,
    ):
        super().__init__()
        self.engine = engine or deployment
        self.kubernetes_conn_id = kubernetes_conn_id
        self.namespace = namespace
        self.deployment = deployment
        self.selector = selector
        self.base_url = base_url
        self.dialect = dialect
        self.model = model
        self.timeout_s = float(timeout_s)
        self.poll_interval_s = float(poll_interval_s)
        self.started_at = float(started_at if started_at is not None else time.time())
        # where the engine's API key is read (never the key: the trigger's kwargs are stored)
        self.api_key_connection = api_key_connection
        self.api_key_secret = api_key_secret
        self.tls_ca_bundle = tls_ca_bundle
        self.tls_verify = tls_verify

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "namespace": self.namespace,
                "deployment": self.deployment,
                "selector": self.selector,
                "base_url": self.base_url,
                "dialect": self.dialect,
                "model": self.model,
                "timeout_s": self.timeout_s,
                "poll_interval_s": self.poll_interval_s,
                "started_at": self.started_at,
                "engine": self.engine,
                "api_key_connection": self.api_key_connection,
                "api_key_secret": self.api_key_secret,
                "tls_ca_bundle": self.tls_ca_bundle,
                "tls_verify": self.tls_verify,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield TriggerEvent(await self.wait())

    async def wait(self) -> dict[str, Any]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio import client as aclient

        from tasks.engines import adapter_for
        from tasks.engines.readiness import NotReadyInTime, wait_until_serving
        from tasks.engines.readiness import DeployError

        hook = AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)

        def event(status: str, message: str) -> dict[str, Any]:
            return {"status": status, "message": message, "waited_s": round(time.time() - self.started_at, 3)}

        async with hook.get_conn() as api_client:
            access = await self._access(aclient.CoreV1Api(api_client))
            # The deadline is wall-clock from started_at, so a triggerer restart does not extend it.
            try:
                probe = await wait_until_serving(self.engine, adapter_for(self.dialect), self.base_url, self.model,
                                                 platform=lambda: self.platform(api_client), timeout_s=self.timeout_s,
                                                 interval_s=self.poll_interval_s, started_at=self.started_at,
                                                 access=access)
            except NotReadyInTime as exc:
                return event(TIMEOUT, str(exc))
            except DeployError as exc:
                return event(FAILED, str(exc))
            return event(READY, probe.detail)

    async def platform(self, api_client: Any) -> Platform:
        """The rollout as the API tells it now (the async reader, kubernetes_asyncio): judged by
        tasks/k8s/rollout.py `rollout_platform`, as the target's sync reader is."""
        from kubernetes_asyncio import client as aclient

        from tasks.k8s.api import pod_events_selector
        from tasks.k8s.rollout import pods_to_explain, rollout_platform

        apps, core = aclient.AppsV1Api(api_client), aclient.CoreV1Api(api_client)

        def plain(found: Any) -> Any:
            return api_client.sanitize_for_serialization(found)

        try:
            dep = plain(await apps.read_namespaced_deployment_status(self.deployment, self.namespace))
        except aclient.ApiException as exc:
            if exc.status != 404:
                raise
            dep = None
        pods = plain(await core.list_namespaced_pod(self.namespace, label_selector=self.selector)).get("items") or []
        now = self.clock()
        events = {pod: plain(await core.list_namespaced_event(self.namespace, field_selector=pod_events_selector(pod)))
                  .get("items") or [] for pod in pods_to_explain(dep, pods, now)}
        return rollout_platform(dep, pods, events, now)

    async def _access(self, core: Any) -> Any:
        """The engine's API key, read here in the triggerer from its connection or Secret, and TLS trust."""
        import asyncio
        import base64

        from tasks.engines.access import EndpointAccess

        from dayone_airflow.connections import connection_password

        key = None
        if self.api_key_connection:
            key = await asyncio.to_thread(connection_password, self.api_key_connection)
        elif self.api_key_secret:
            secret = await core.read_namespaced_secret(self.api_key_secret["name"], self.namespace)
            key = base64.b64decode((secret.data or {})[self.api_key_secret["key"]]).decode("utf-8").strip()
        return EndpointAccess(api_key=key, ca_bundle=self.tls_ca_bundle, verify=self.tls_verify)


class EngineReadinessOperator(BaseOperator):
    """Wait until the engine deployed by the deploy step serves, then mark it ready for the steps.

    An operator, not a sensor: on Kubernetes it defers once to EngineReadyTrigger, holding no worker
    slot through a cold start, and the trigger's event is recorded through the step protocol like the
    local wait. For a local engine (or a dry run) it runs the wait_ready step in place (seconds).

    `engine` is templated, so the operator maps over engines like the other per-engine tasks. The
    timeout defaults to the engine's ready_timeout_s, else `kubernetes.startup_timeout_s`.
    """

    template_fields: Sequence[str] = ("engine",)

    def __init__(self, *, engine: str, timeout_s: float | None = None, poll_interval_s: float = 10.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.engine = engine
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s

    def execute(self, context: Any) -> Any:
        from tasks.state.documents import set_readiness
        from tasks.steps.engine_steps import ready_timeout_s
        from tasks.targets.base import Deployment

        from dayone_airflow.glue import run_context, run_step

        ctx = run_context(context["params"], context["run_id"])
        dep = Deployment.load(ctx.run_dir, self.engine)
        if ctx.config.target != "kubernetes" or dep is None or "deployment" not in dep.handle or dep.handle.get("dry_run"):
            # A local engine, a dry run or no deployment: the step polls, or says why it is not attempted.
            return run_step("wait_ready", context["params"], context["run_id"], self.engine)
        timeout_s = float(self.timeout_s or ready_timeout_s(ctx.config, self.engine))
        spec = ctx.config.engine(self.engine)
        set_readiness(ctx.run_dir, self.engine, False, "waiting for readiness")
        trigger = EngineReadyTrigger(
            kubernetes_conn_id=dep.handle["conn_id"],
            namespace=dep.handle["namespace"],
            deployment=dep.handle["deployment"],
            selector=dep.handle["selector"],
            base_url=dep.base_url,
            dialect=ctx.config.engine(self.engine).dialect,
            model=ctx.config.model.name,
            timeout_s=timeout_s,
            poll_interval_s=self.poll_interval_s,
            engine=self.engine,
            api_key_connection=spec.api_key_connection,
            api_key_secret=None if spec.api_key_secret is None else spec.api_key_secret.model_dump(),
            tls_ca_bundle=spec.tls_ca_bundle,
            tls_verify=spec.tls_verify,
        )
        # The trigger enforces the deadline and reports it; Airflow's timeout is only a backstop.
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=timeout_s + 300))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        from tasks.steps.engine_steps import readiness_reached
        from tasks.steps.execution import record
        from tasks.engines.readiness import DeployError

        from dayone_airflow.glue import run_context

        ctx = run_context(context["params"], context["run_id"])
        ready = event.get("status") == READY
        detail = str(event.get("message", ""))
        if not ready and not detail.startswith(f"engine {self.engine}:"):
            detail = f"engine {self.engine}: {detail}"
        try:
            result = record(ctx.run_dir, "wait_ready", self.engine,
                            lambda: readiness_reached(ctx, self.engine, ready, detail, float(event.get("waited_s", 0.0))))
        except DeployError as exc:
            raise AirflowException(str(exc)) from None
        return result.model_dump(mode="json")

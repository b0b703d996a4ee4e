"""Airflow glue for the Kubernetes target, through the cncf-kubernetes provider.

- `use_airflow_connections()`: KubernetesTarget then takes its API client from the provider's
  KubernetesHook (connection `kubernetes.conn_id`) and registry credentials from the connection
  `kubernetes.registry_conn_id` (login/password). Call it before a step runs on kubernetes.
- `EngineReadySensor` + `EngineReadyTrigger`: a deferrable wait for the engine's Deployment to be
  available and then for the engine to serve; image pull errors, crash loops and unschedulable
  pods fail fast with the pod's events in the message. The wait runs in the triggerer, holding no
  worker slot for the tens of minutes a cold start takes.
- `TeardownRunOperator` (deletes everything labelled with the run; use it as a teardown task)
  and `CleanupOperator` (deletes DayOne objects older than `kubernetes.cleanup_age_s`).
- `runner_pod_operator(...)`: a KubernetesPodOperator running any `dayone` command in-cluster in
  the runner image (docker/Dockerfile), non-root with a read-only root filesystem.

Nothing heavy is imported at module level beyond Airflow's own base classes: DAG files stay
cheap to parse.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

READY, FAILED, TIMEOUT = "ready", "failed", "timeout"


# ---- connections ---------------------------------------------------------------------------
def hook_api_client(conn_id: str) -> Any:
    """A `kubernetes.client.ApiClient` configured by the provider from an Airflow connection."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=conn_id).get_conn()


def registry_credentials(config: Any) -> tuple[str, str] | None:
    """(login, password) of `kubernetes.registry_conn_id`, or None for anonymous pulls."""
    conn_id = config.kubernetes.registry_conn_id
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if not conn.login:
        return None
    return conn.login, conn.password or ""


def use_airflow_connections() -> None:
    """Make every KubernetesTarget (tasks.targets.base.target_for) use Airflow's connections."""
    from tasks.targets.kubernetes import configure

    configure(api_client=hook_api_client, registry_credentials=registry_credentials)


def kubernetes_target() -> Any:
    from tasks.targets.kubernetes import KubernetesTarget

    use_airflow_connections()
    return KubernetesTarget()


def _run_context(context: Any) -> tuple[Any, Any]:
    """(validated RunConfig, RunDir) of the Airflow run, the way the step glue derives them."""
    from dayone_airflow.glue import config_from_params, dayone_run_id
    from tasks.staging import RunDir
    from tasks.steps import load_config

    run_id = dayone_run_id(context["run_id"])
    return load_config(config_from_params(context["params"]), run_id), RunDir(run_id)


# ---- readiness -----------------------------------------------------------------------------
class EngineReadyTrigger(BaseTrigger):
    """Polls the Deployment and its pods (kubernetes_asyncio, via AsyncKubernetesHook), then the engine.

    Yields one event: {"status": "ready" | "failed" | "timeout", "message", "waited_s"}.
    The deadline is wall-clock from `started_at`, so a triggerer restart does not extend it.
    """

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
    ):
        super().__init__()
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
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield TriggerEvent(await self.wait())

    async def wait(self) -> dict[str, Any]:
        import httpx
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
        from kubernetes_asyncio import client as aclient

        from tasks.engines import adapter_for
        from tasks.k8s.rollout import assess, describe_events

        adapter = adapter_for(self.dialect)
        hook = AsyncKubernetesHook(conn_id=self.kubernetes_conn_id)
        deadline = self.started_at + self.timeout_s
        last = "rollout not observed yet"

        def event(status: str, message: str) -> dict[str, Any]:
            return {"status": status, "message": message, "waited_s": round(time.time() - self.started_at, 3)}

        async with hook.get_conn() as api_client, httpx.AsyncClient(timeout=30) as http:
            apps, core = aclient.AppsV1Api(api_client), aclient.CoreV1Api(api_client)
            while True:
                try:
                    dep = api_client.sanitize_for_serialization(
                        await apps.read_namespaced_deployment_status(self.deployment, self.namespace)
                    )
                except aclient.ApiException as exc:
                    if exc.status != 404:
                        raise
                    dep = None
                pods = api_client.sanitize_for_serialization(
                    await core.list_namespaced_pod(self.namespace, label_selector=self.selector)
                ).get("items") or []
                state = assess(dep, pods, time.time())
                if state.failed:
                    events = "no pod"
                    if state.pod:
                        found = await hook.get_pod_events(state.pod, self.namespace)
                        events = describe_events(api_client.sanitize_for_serialization(found).get("items") or [])
                    return event(FAILED, f"{state.reason}. Events: {events}")
                if state.available:
                    probe = await adapter.probe_ready(http, self.base_url, self.model)
                    if probe.ready:
                        return event(READY, probe.detail)
                    last = f"Deployment available, engine not serving yet ({probe.stage}: {probe.detail})"
                else:
                    last = state.reason
                if time.time() >= deadline:
                    return event(TIMEOUT, f"not ready after {self.timeout_s:.0f} s ({last})")
                await asyncio.sleep(min(self.poll_interval_s, max(deadline - time.time(), 0.0)))


class EngineReadySensor(BaseSensorOperator):
    """Wait (deferred) until the engine deployed by the deploy step serves; mark it ready for the steps.

    On Kubernetes it defers to EngineReadyTrigger, holding no worker slot through a cold start; for a
    local engine it runs the wait_ready step in place (seconds).

    `engine` is templated, so the sensor maps over engines like the other per-engine tasks. The
    timeout defaults to `kubernetes.startup_timeout_s` of the run config.
    """

    template_fields: Sequence[str] = ("engine",)

    def __init__(self, *, engine: str, timeout_s: float | None = None, poll_interval_s: float = 10.0, **kwargs: Any):
        kwargs.setdefault("mode", "reschedule")
        super().__init__(poke_interval=poll_interval_s, **kwargs)
        self.engine = engine
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s

    def _deployment(self, context: Any) -> tuple[Any, Any, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from tasks.targets.base import Deployment

        config, run_dir = _run_context(context)
        dep = Deployment.load(run_dir, self.engine)
        if dep is None or "deployment" not in dep.handle:
            raise AirflowSkipException(f"engine {self.engine}: not deployed on kubernetes; nothing to wait for")
        return config, run_dir, dep

    def execute(self, context: Any) -> Any:
        from tasks.targets.base import Deployment

        config, run_dir = _run_context(context)
        dep = Deployment.load(run_dir, self.engine)
        if config.target != "kubernetes" or dep is None or "deployment" not in dep.handle:
            # A local engine (or a dry run): the step polls, or says why it is not attempted.
            from dayone_airflow.glue import run_step

            return run_step("wait_ready", context["params"], context["run_id"], self.engine)
        config, run_dir, dep = self._deployment(context)
        timeout_s = float(self.timeout_s or config.kubernetes.startup_timeout_s)
        run_dir.write_json(f"state/{self.engine}/ready.json", {"ready": False, "detail": "waiting for readiness"})
        trigger = EngineReadyTrigger(
            kubernetes_conn_id=dep.handle["conn_id"],
            namespace=dep.handle["namespace"],
            deployment=dep.handle["deployment"],
            selector=dep.handle["selector"],
            base_url=dep.base_url,
            dialect=config.engine(self.engine).dialect,
            model=config.model.name,
            timeout_s=timeout_s,
            poll_interval_s=self.poll_interval_s,
        )
        # The trigger enforces the deadline and reports it; Airflow's timeout is only a backstop.
        self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=timeout_s + 300))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        from tasks.steps import record_ready

        _, run_dir = _run_context(context)
        if event.get("status") != READY:
            detail = f"engine {self.engine}: {event.get('message')}"
            run_dir.write_json(f"state/{self.engine}/ready.json", {"ready": False, "detail": detail})
            run_dir.write_json(f"state/steps/{self.engine}-wait_ready.json",
                               {"step": "wait_ready", "engine": self.engine, "status": "failed", "detail": detail})
            raise AirflowException(detail)
        record_ready(run_dir, self.engine, float(event.get("waited_s", 0.0)), event.get("message", ""))
        run_dir.write_json(f"state/steps/{self.engine}-wait_ready.json",
                           {"step": "wait_ready", "engine": self.engine, "status": "ok"})
        return {"engine": self.engine, "ready": True, "waited_s": event.get("waited_s")}

    def poke(self, context: Any) -> bool:
        """The same judgement without deferral (one check per poke), for setups with no triggerer."""
        from airflow.sdk.exceptions import AirflowException

        from tasks.engines import adapter_for

        config, _, dep = self._deployment(context)
        target = kubernetes_target()
        state = target.rollout_state(dep)
        if state.failed:
            raise AirflowException(target.failure_message(dep, state))
        if not state.available:
            return False
        import httpx

        async def probe() -> bool:
            async with httpx.AsyncClient(timeout=30) as http:
                adapter = adapter_for(config.engine(self.engine).dialect)
                return (await adapter.probe_ready(http, dep.base_url, config.model.name)).ready

        return asyncio.run(probe())


# ---- teardown and cleanup --------------------------------------------------------------------
class TeardownRunOperator(BaseOperator):
    """Delete every object labelled with this run (all engines, or one); runs whatever failed before."""

    template_fields: Sequence[str] = ("engine",)

    def __init__(self, *, engine: str | None = None, **kwargs: Any):
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.engine = engine

    def execute(self, context: Any) -> list[str]:
        config, run_dir = _run_context(context)
        if config.target != "kubernetes":
            return []
        target = kubernetes_target()
        if self.engine:
            deleted = target.teardown(config, self.engine, run_dir)
        else:
            deleted = target.teardown_run(config)
        self.log.info("deleted %d objects of run %s: %s", len(deleted), config.run_id, ", ".join(deleted) or "none")
        return deleted


class CleanupOperator(BaseOperator):
    """Delete DayOne objects older than `older_than_s` (default kubernetes.cleanup_age_s) left by killed runs."""

    def __init__(self, *, older_than_s: float | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.older_than_s = older_than_s

    def execute(self, context: Any) -> list[str]:
        config, _ = _run_context(context)
        deleted = kubernetes_target().cleanup(config, self.older_than_s)
        self.log.info("cleanup deleted %d objects: %s", len(deleted), ", ".join(deleted) or "none")
        return deleted


# ---- benchmark steps in-cluster ----------------------------------------------------------------
def runner_pod_operator(
    *,
    task_id: str,
    arguments: list[str],
    image: str,
    namespace: str = "dayone",
    kubernetes_conn_id: str = "kubernetes_default",
    service_account: str = "dayone-runner",
    env: dict[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    """A KubernetesPodOperator running `dayone <arguments>` in the runner image.

    Results travel through S3 (the archive connection's endpoint and keys come in as env from a
    Secret the deployment provides) or, with do_xcom_push=True, through the XCom sidecar: the
    command then writes /airflow/xcom/return.json.
    """
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from kubernetes.client import models as k8s

    from tasks.k8s.manifests import LABEL_MANAGED_BY, MANAGED_BY

    volumes = [k8s.V1Volume(name=n, empty_dir=k8s.V1EmptyDirVolumeSource()) for n in ("tmp", "work")]
    mounts = [k8s.V1VolumeMount(name="tmp", mount_path="/tmp"), k8s.V1VolumeMount(name="work", mount_path="/work")]
    return KubernetesPodOperator(
        task_id=task_id,
        kubernetes_conn_id=kubernetes_conn_id,
        namespace=namespace,
        image=image,
        cmds=["dayone"],
        arguments=list(arguments),
        env_vars={"DAYONE_WORKDIR": "/work/runs", "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/matplotlib", **(env or {})},
        labels={LABEL_MANAGED_BY: MANAGED_BY, "app.kubernetes.io/name": "dayone-runner"},
        service_account_name=service_account,
        automount_service_account_token=False,
        volumes=volumes,
        volume_mounts=mounts,
        security_context=k8s.V1PodSecurityContext(
            run_as_non_root=True, run_as_user=10001, run_as_group=10001, fs_group=10001,
            seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
        ),
        container_security_context={
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        on_finish_action="delete_pod",
        get_logs=True,
        **kwargs,
    )

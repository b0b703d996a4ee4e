"""The Airflow side: the deferrable readiness operator and its trigger (AsyncKubernetesHook,
kubernetes_asyncio), and the teardown step through Airflow's connections."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import time

import kubernetes_validate
import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from k8s_helpers import CONN_ID, MODEL, later, run_config

from dayone_airflow.connections import hook_api_client
from dayone_airflow.glue import dayone_run_id, run_step
from dayone_airflow.kubernetes import FAILED, READY, TIMEOUT, EngineReadinessOperator, EngineReadyTrigger
from tasks.engines.readiness import UP
from tasks.state.storage import RunDir
from tasks.targets.kubernetes import ClusterAccess, KubernetesTarget

NS = "bench"
AIRFLOW_RUN_ID = "manual__2026-11-30T08:00:00+00:00"


def trigger_for(dep, timeout_s=30.0, dialect="sglang"):
    return EngineReadyTrigger(
        kubernetes_conn_id=CONN_ID, namespace=NS, deployment=dep.handle["deployment"], selector=dep.handle["selector"],
        base_url=dep.base_url, dialect=dialect, model=MODEL, timeout_s=timeout_s, poll_interval_s=0.05,
    )


async def first_event(trigger):
    async for event in trigger.run():
        return event.payload
    raise AssertionError("the trigger yielded nothing")


@pytest.fixture
def deployed(kube_conn, engine_url, tmp_path, monkeypatch):
    """The sglang engine of the Airflow run, deployed through the target as the deploy step does."""
    run_id = dayone_run_id(AIRFLOW_RUN_ID)
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    config = run_config(run_id=run_id, engines=("sglang",))
    target = KubernetesTarget(ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: engine_url))
    engine = config.engines[0]
    dep = target.deploy(config, engine, RunDir(run_id), target.pin(config, engine))
    return config, dep


def test_trigger_serializes_to_an_importable_class(deployed):
    _, dep = deployed
    trigger = trigger_for(dep)
    path, kwargs = trigger.serialize()
    module, _, cls = path.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), cls)(**kwargs)
    assert isinstance(rebuilt, EngineReadyTrigger)
    assert rebuilt.serialize() == (path, kwargs)
    assert path == "dayone_airflow.kubernetes.EngineReadyTrigger"


def test_trigger_reports_ready_once_the_rollout_is_available_and_the_engine_serves(apiserver, deployed):
    _, dep = deployed
    name = dep.handle["deployment"]
    later(0.4, lambda: (apiserver.start_pod(NS, name, running=True, ready=True), apiserver.set_available(NS, name)))
    event = asyncio.run(first_event(trigger_for(dep)))
    assert event["status"] == READY, event
    assert event["waited_s"] >= 0.4
    assert "1-token generation passed" in event["message"]


def test_trigger_fails_fast_on_an_image_pull_error_with_the_event(apiserver, deployed):
    _, dep = deployed
    pod = apiserver.start_pod(NS, dep.handle["deployment"], waiting=("ErrImagePull", "rpc error: code = NotFound"))
    apiserver.add_event(NS, pod, "Failed", "Failed to pull image: example.org/sglang@sha256:1111: not found")
    started = time.monotonic()
    event = asyncio.run(first_event(trigger_for(dep, timeout_s=600)))
    assert time.monotonic() - started < 5
    assert event["status"] == FAILED
    assert "ErrImagePull" in event["message"]
    assert "Warning Failed: Failed to pull image: example.org/sglang@sha256:1111: not found" in event["message"]


def test_trigger_times_out_with_the_last_state(apiserver, deployed):
    _, dep = deployed
    apiserver.start_pod(NS, dep.handle["deployment"], running=True)
    event = asyncio.run(first_event(trigger_for(dep, timeout_s=0.5)))
    assert event["status"] == TIMEOUT
    assert "0/1 replicas ready" in event["message"]


# ---- one platform check, two readers -------------------------------------------------------------
def _unschedulable(apiserver, name, minutes):
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=minutes)
    pod = apiserver.start_pod(NS, name, unschedulable_since=since)
    apiserver.add_event(NS, pod, "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")


ROLLOUTS = {  # what the cluster shows -> what both readers must say of it
    "no pod yet": (lambda api, name: None, "waiting"),
    "loading weights": (lambda api, name: api.start_pod(NS, name, running=True), "waiting"),
    "unschedulable within its grace": (lambda api, name: _unschedulable(api, name, 1), "waiting"),
    "image pull error": (lambda api, name: api.add_event(
        NS, api.start_pod(NS, name, waiting=("ImagePullBackOff", "Back-off pulling image")), "Failed",
        'Failed to pull image "example.org/sglang@sha256:111": manifest unknown'), "failed"),
    "crash loop": (lambda api, name: api.start_pod(NS, name, waiting=("CrashLoopBackOff", "back-off 40s"),
                                                   restart_count=3,
                                                   last_terminated={"exitCode": 137, "reason": "OOMKilled"}), "failed"),
    "unschedulable past its grace": (lambda api, name: _unschedulable(api, name, 10), "failed"),
    "deployment deleted": (lambda api, name: api.objects.pop(("deployments", NS, name)), "failed"),
    "available": (lambda api, name: (api.start_pod(NS, name, running=True, ready=True), api.set_available(NS, name)),
                  "up"),
}


@pytest.mark.parametrize("rollout", list(ROLLOUTS))
def test_trigger_and_target_judge_the_same_api_objects_alike(apiserver, deployed, rollout):
    """The target's sync reader and the trigger's async reader fetch; one decision judges what they fetched."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    _, dep = deployed
    show, expected = ROLLOUTS[rollout]
    show(apiserver, dep.handle["deployment"])
    now = time.time()  # one clock for both: "unschedulable for N s" must not straddle a second
    target = KubernetesTarget(ClusterAccess(api_client=hook_api_client), clock=lambda: now)
    trigger = trigger_for(dep)
    trigger.clock = lambda: now

    async def through_the_trigger():
        async with AsyncKubernetesHook(conn_id=CONN_ID).get_conn() as api_client:
            return await trigger.platform(api_client)

    synchronous, asynchronous = target.platform(dep), asyncio.run(through_the_trigger())
    assert synchronous == asynchronous
    assert {"failed": bool(synchronous.failed), "waiting": bool(synchronous.waiting and not synchronous.failed),
            "up": synchronous == UP}[expected], synchronous
    if expected == "failed":
        assert "Events: " in synchronous.failed


def _context(config):
    return {"params": config.model_dump(mode="json", exclude={"run_id"}), "run_id": AIRFLOW_RUN_ID}


def test_operator_defers_to_the_trigger_and_marks_the_engine_ready(apiserver, deployed):
    config, dep = deployed
    operator = EngineReadinessOperator(task_id="wait_ready", engine="sglang", poll_interval_s=0.05)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(_context(config))
    trigger = deferred.value.trigger
    assert isinstance(trigger, EngineReadyTrigger)
    assert trigger.timeout_s == config.kubernetes.startup_timeout_s == 1800
    assert (trigger.namespace, trigger.deployment, trigger.base_url) == (NS, dep.handle["deployment"], dep.base_url)
    name = dep.handle["deployment"]
    apiserver.start_pod(NS, name, running=True, ready=True)
    apiserver.set_available(NS, name)
    event = asyncio.run(first_event(trigger))
    result = operator.execute_complete(_context(config), event)
    assert result["data"]["ready"] is True and result["step"] == "wait_ready"
    assert RunDir(config.run_id).read_json("state/sglang/ready.json")["ready"] is True


def test_operator_failure_raises_and_records_the_reason(deployed):
    config, _ = deployed
    operator = EngineReadinessOperator(task_id="wait_ready", engine="sglang")
    event = {"status": FAILED, "message": "pod x container engine: ImagePullBackOff", "waited_s": 1.0}
    with pytest.raises(AirflowException, match="ImagePullBackOff"):
        operator.execute_complete(_context(config), event)
    ready = RunDir(config.run_id).read_json("state/sglang/ready.json")
    assert ready["ready"] is False and "ImagePullBackOff" in ready["detail"]
    outcome = RunDir(config.run_id).read_json("state/steps/sglang-wait_ready.json")
    assert outcome["status"] == "failed" and "ImagePullBackOff" in outcome["detail"]


def test_teardown_step_deletes_every_object_of_the_engine_through_the_connection(apiserver, deployed):
    config, dep = deployed
    apiserver.start_pod(NS, dep.handle["deployment"], running=True)
    assert apiserver.list("deployments", NS) and apiserver.list("services", NS)
    result = run_step("teardown", _context(config)["params"], AIRFLOW_RUN_ID, "sglang")
    assert result["data"]["deleted"] and sorted(d.split("/")[0] for d in result["data"]["deleted"]) == [
        "Deployment", "Service"]
    for kind in ("deployments", "services", "pods"):
        assert apiserver.list(kind, NS) == [], kind
    assert RunDir(config.run_id).read_json("state/steps/sglang-teardown.json")["status"] == "ok"

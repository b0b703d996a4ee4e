"""Restarts during the cold start (the Day-1 report's "meaningless restarts"), judged once the engine
is ready: the readiness operator, as the DAG runs it, records a startup finding with the restarts' causes
from the pod's status and events, and summary.json, the decision summary and the report say it."""

from __future__ import annotations

import asyncio

import pytest
from k8s_helpers import run_config

from dayone_airflow.connections import hook_api_client
from dayone_airflow.glue import dayone_run_id
from dayone_airflow.kubernetes import READY, EngineReadinessOperator
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir
from tasks.targets.kubernetes import ClusterAccess, KubernetesTarget

NS = "bench"
AIRFLOW_RUN_ID = "manual__2026-12-01T08:00:00+00:00"


@pytest.fixture
def deployed(kube_conn, engine_url, tmp_path, monkeypatch):
    run_id = dayone_run_id(AIRFLOW_RUN_ID)
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    config = run_config(run_id=run_id, engines=("sglang",))
    target = KubernetesTarget(ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: engine_url))
    engine = config.engines[0]
    return config, target.deploy(config, engine, RunDir(run_id), target.pin(config, engine))


def _ready_through_the_operator(config):
    """The deferrable wait as the DAG runs it: defer, the trigger's ready event, execute_complete."""
    from airflow.sdk.exceptions import TaskDeferred

    context = {"params": config.model_dump(mode="json", exclude={"run_id"}), "run_id": AIRFLOW_RUN_ID}
    operator = EngineReadinessOperator(task_id="wait_ready", engine="sglang", poll_interval_s=0.05)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)

    async def first():
        async for event in deferred.value.trigger.run():
            return event.payload

    event = asyncio.run(first())
    assert event["status"] == READY, event
    return operator.execute_complete(context, event)


def _published(config):
    run_dir = RunDir(config.run_id)
    summary = build_summary(run_dir, config)
    decision = " ".join(line.text for line in summary.decision)
    return summary.engines["sglang"], decision, render_html(summary, charts={})


def test_oom_kills_and_a_liveness_kill_before_ready_are_an_error_finding_in_the_summary_and_report(apiserver,
                                                                                               deployed):
    config, dep = deployed
    name = dep.handle["deployment"]
    pod = apiserver.start_pod(NS, name, running=True, ready=True, restart_count=2,
                              last_terminated={"reason": "OOMKilled", "exitCode": 137})
    apiserver.add_event(NS, pod, "Unhealthy", "Liveness probe failed: Get \"http://10.0.3.7:30000/health\": "
                        "connection refused", count=3)
    apiserver.add_event(NS, pod, "Killing", "Container engine failed liveness probe, will be restarted")
    apiserver.set_available(NS, name)
    result = _ready_through_the_operator(config)
    assert result["data"]["restarts_before_ready"].startswith("restarted 2 time(s) before ready")
    engine, decision, html = _published(config)
    finding = engine.restarts_before_ready
    assert finding is not None and finding.severity == "error", finding
    assert finding.line == ("restarted 2 time(s) before ready: Container engine failed liveness probe, will be "
                            "restarted; OOMKilled (exit 137): over its memory limit")
    assert f"sglang {finding.line}: a replica with these settings may not come up at all" in decision
    assert "restarted_before_ready" in html and "OOMKilled (exit 137)" in html
    assert "Startup warnings that cap performance" not in decision  # said once, in its own line


def test_a_probe_kill_alone_before_ready_warns(apiserver, deployed):
    config, dep = deployed
    name = dep.handle["deployment"]
    pod = apiserver.start_pod(NS, name, running=True, ready=True, restart_count=1,
                              last_terminated={"reason": "Error", "exitCode": 137})
    apiserver.add_event(NS, pod, "Killing", "Container engine failed startup probe, will be restarted")
    apiserver.set_available(NS, name)
    _ready_through_the_operator(config)
    engine, decision, _ = _published(config)
    assert engine.restarts_before_ready.severity == "warning"
    assert ("sglang restarted 1 time(s) before ready: Container engine failed startup probe, will be restarted: "
            "the probes' budget was shorter than this cold start") in decision


def test_a_single_start_has_no_finding(apiserver, deployed):
    config, dep = deployed
    name = dep.handle["deployment"]
    apiserver.start_pod(NS, name, running=True, ready=True, restart_count=0)
    apiserver.set_available(NS, name)
    result = _ready_through_the_operator(config)
    assert result["data"]["restarts_before_ready"] is None
    engine, decision, _ = _published(config)
    assert engine.restarts_before_ready is None and "before ready" not in decision


def test_a_relaunch_that_started_once_keeps_the_first_starts_finding(apiserver, deployed, engine_url):
    """measurement.launches starts the engine anew within a run: its clean readiness must not erase the
    first start's restarts, and a relaunch's own restarts are a finding of their own, named by launch."""
    config, dep = deployed
    name = dep.handle["deployment"]
    apiserver.start_pod(NS, name, running=True, ready=True, restart_count=1,
                        last_terminated={"reason": "OOMKilled", "exitCode": 137})
    apiserver.set_available(NS, name)
    _ready_through_the_operator(config)
    target = KubernetesTarget(ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: engine_url))
    engine = config.engines[0]
    for launch, restarts in ((1, 0), (2, 3)):
        dep = target.deploy(config, engine, RunDir(config.run_id), target.pin(config, engine), launch)
        apiserver.start_pod(NS, dep.handle["deployment"], running=True, ready=True, restart_count=restarts,
                            last_terminated={"reason": "Error", "exitCode": 1} if restarts else None)
        apiserver.set_available(NS, dep.handle["deployment"])
        _ready_through_the_operator(config)
    summary_engine, decision, _ = _published(config)
    assert summary_engine.restarts_before_ready.line.startswith("restarted 1 time(s) before ready: OOMKilled")
    lines = sorted(f.line for f in summary_engine.startup_findings if f.finding == "restarted_before_ready")
    assert lines == ["launch 2: restarted 3 time(s) before ready: Error (exit 1)",
                     "restarted 1 time(s) before ready: OOMKilled (exit 137): over its memory limit"]

"""A killed run never reaches its teardown and leaves its engines on the cluster; the cleanup
step (the nightly's `cleanup` task, before its own deploys) removes them once they are older than
kubernetes.cleanup_age_s, and leaves a run still going, and everything not DayOne's, alone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

NS = "bench"
DIGESTS = {"sglang": "sha256:" + "1" * 64, "vllm": "sha256:" + "2" * 64}
AGE_S = 3600


def _conf(conn_id: str, engines=("sglang", "vllm")) -> dict:
    return {
        "target": "kubernetes",
        "model": {"name": "m", "path": "/models/m"},
        "engines": [{"name": e, "dialect": e, "image": f"example.org/{e}:day1", "digest": DIGESTS[e], "gpus": 1}
                    for e in engines],
        "kubernetes": {"namespace": NS, "conn_id": conn_id, "cleanup_age_s": AGE_S},
    }


def _deploy(conf: dict, run_id: str, apiserver) -> None:
    from dayone_airflow.connections import cluster_access
    from tasks.steps.execution import execute
    from tasks.steps.context import RunContext

    cluster = replace(cluster_access(), service_url=lambda name, ns, port: "http://127.0.0.1:9")
    ctx = RunContext.build(conf, run_id, cluster=cluster)
    for step in ("plan", "pin"):
        execute(ctx, step)
    for engine in [e["name"] for e in conf["engines"]]:
        execute(ctx, "deploy", engine)
        apiserver.start_pod(NS, f"dayone-{engine}-{run_id}", running=True, ready=True)


def _age(apiserver, run_id: str, seconds: float) -> None:
    """Move the run's objects `seconds` into the past, as if it had been killed that long ago."""
    from tasks.k8s.manifests import ANNOTATION_CREATED

    then = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for obj in apiserver.objects.values():
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get("dayone/run-id") == run_id:
            meta["creationTimestamp"] = then
            if ANNOTATION_CREATED in (meta.get("annotations") or {}):
                meta["annotations"][ANNOTATION_CREATED] = then


def test_cleanup_task_removes_what_a_killed_run_left_and_nothing_else(apiserver, kube_conn_id, tmp_path,
                                                                      monkeypatch):
    from dayone_airflow.glue import run_step

    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    conf = _conf(kube_conn_id)
    _deploy(conf, "run-killed", apiserver)  # ... and then the worker died: no teardown ran
    _deploy(_conf(kube_conn_id, engines=("sglang",)), "run-live", apiserver)
    _age(apiserver, "run-killed", AGE_S + 600)
    # a long task pod of the runner (KubernetesExecutor, from the runner pod template): DayOne's, but no engine
    from tasks.k8s.manifests import runner_pod_template

    task_pod = runner_pod_template("registry.example.org/dayone-runner@sha256:" + "3" * 64, namespace=NS)
    task_pod["metadata"].update(name="dayone-eval-short-task", creationTimestamp="2020-01-01T00:00:00Z")
    apiserver.objects[("pods", NS, "dayone-eval-short-task")] = task_pod
    killed = "dayone/run-id=run-killed"
    assert {d["metadata"]["name"] for d in apiserver.list("deployments", NS, killed)} == {
        "dayone-sglang-run-killed", "dayone-vllm-run-killed"}
    assert len(apiserver.list("pods", NS, killed)) == 2

    deleted = run_step("cleanup", conf, "scheduled__nightly")["data"]["deleted"]

    assert sorted(deleted) == sorted(f"{kind}/dayone-{e}-run-killed" for kind in ("Deployment", "Service")
                                     for e in ("sglang", "vllm"))
    for kind in ("deployments", "services", "pods"):
        assert apiserver.list(kind, NS, killed) == [], kind
    live = "dayone/run-id=run-live"
    assert [d["metadata"]["name"] for d in apiserver.list("deployments", NS, live)] == ["dayone-sglang-run-live"]
    assert len(apiserver.list("pods", NS, live)) == 1
    assert [p["metadata"]["name"] for p in apiserver.list("pods", NS) if "dayone/run-id" not in p["metadata"]["labels"]] \
        == ["dayone-eval-short-task"], "a runner task pod is not an engine a killed run left"
    # a second cleanup finds nothing more to do
    assert run_step("cleanup", conf, "scheduled__nightly")["data"]["deleted"] == []

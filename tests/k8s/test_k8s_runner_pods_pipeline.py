"""dayone_eval with target kubernetes and kubernetes.measure_from: cluster, through dag.test(): each
measuring step is a KubernetesPodOperator task whose own code creates the runner pod on the local API
server, defers to its trigger, streams the pod's log into the task's log and deletes the pod; the pod
(fake_kubelet.py) runs the real `dayone step` as a process that reads the run's config and writes its
rows and outcome in the run's S3 staging, and measures the simulator behind the engine's Service. A round
past one runner pod's cores is measured by the step's pod and a peer pod its task creates, together."""

from __future__ import annotations

import base64
import re
import threading
import time
import uuid
from dataclasses import replace

import pytest
from fake_kubelet import FakeKubelet
from k8s_helpers import CONN_ID, DIGESTS, MODEL
from test_k8s_rbac import api_calls

from tasks.k8s.rbac import POD_OPERATOR_CALLS, RUNNER_NAMESPACED, WORKER_CLUSTER, WORKER_NAMESPACED

NS = "bench"
NODE = "h20-node-1"
RUNNER_IMAGE = "registry.example.org/dayone-runner@sha256:" + "3" * 64
RUN = {
    "target": "kubernetes",
    "model": {"name": MODEL, "path": "/models/glm", "context_limit_tokens": 32768},
    "engines": [{"name": "sglang", "dialect": "sglang", "image": "example.org/sglang:day1",
                 "digest": DIGESTS["sglang"], "gpus": 1, "node": NODE}],
    "kubernetes": {"namespace": NS, "conn_id": CONN_ID, "measure_from": "cluster",
                   # no read of a running pod's log: under dag.test() the trigger's reads log where this test does
                   # not capture, and a read at 10 s took a step's last line on a loaded machine (the reads while a pod
                   # runs: test_k8s_runner_pod_log.py); every line comes with the read when the pod ends
                   "runner": {"image": RUNNER_IMAGE, "cpu": 2, "s3_secret": {"name": "dayone-s3"},
                              "poll_interval_s": 0.2, "log_interval_s": 3600}},
    "scenarios": {
        "warmup": False, "quality": {"enabled": False}, "capacity": {"enabled": False},
        "short": {"concurrency": [1, 4], "rounds": 1, "requests_per_round": 8},
        "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
        "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
    },
    "archive": {"bucket": "dayone-runner-pods"},
    "request_timeout_s": 30,
}


def _secret(apiserver, name, data):
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                                 "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def _play_the_engine_rollout(apiserver, stop, serving):
    """The Deployment's controller and kubelet: its pod runs on NODE and serves once it was created
    (while `serving` is set; otherwise it never becomes available)."""
    def play():
        while not stop.is_set():
            if not serving.is_set():
                time.sleep(0.05)
                continue
            for dep in apiserver.list("deployments", NS):
                name = dep["metadata"]["name"]
                if not apiserver.list("pods", NS, f"app.kubernetes.io/instance={name}"):
                    pod = apiserver.start_pod(NS, name, running=True, ready=True, node=NODE)
                    apiserver.set_log(NS, pod, "engine started\n")
                    apiserver.set_available(NS, name)
            time.sleep(0.05)

    threading.Thread(target=play, daemon=True).start()


@pytest.fixture
def cluster_run(apiserver, kube_conn, engine_url, s3_conn, run_root, tmp_path, monkeypatch):
    """The cluster, its Secrets, the run state staged in S3, and a kubelet that runs runner pods."""
    from dayone_airflow import connections

    prefix = f"staging-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("DAYONE_STAGING", f"s3://dayone-runner-staging/{prefix}")
    real = connections.cluster_access
    monkeypatch.setattr(connections, "cluster_access",
                        lambda: replace(real(), service_url=lambda name, ns, port: engine_url))
    _secret(apiserver, "dayone-s3", {"access-key-id": s3_conn.access_key, "secret-access-key": s3_conn.secret_key})
    kubelet = FakeKubelet(apiserver, tmp_path / "kubelet")
    stop, serving = threading.Event(), threading.Event()
    serving.set()
    _play_the_engine_rollout(apiserver, stop, serving)
    yield apiserver, kubelet, prefix, serving
    stop.set()


def test_measuring_steps_run_as_runner_pods_through_kubernetes_pod_operator(eval_dag, cluster_run, s3_conn,
                                                                            capfd):
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    from dayone_airflow.glue import dayone_run_id, run_dir
    from tasks.steps.runner_pods import RUNNER_STEPS

    apiserver, kubelet, prefix, _ = cluster_run
    # the graph: every measuring step is a KubernetesPodOperator task, the others are not
    for t in eval_dag.tasks:
        step = t.task_id.rsplit(".", 1)[-1]
        assert isinstance(t, KubernetesPodOperator) == (step in RUNNER_STEPS), t.task_id

    # one core of 2 streams a pod: short's c=4 rounds take two pods, its c=1 rounds one
    conf = {**RUN, "load": {"streams_per_process": 2},
            "kubernetes": {**RUN["kubernetes"], "runner": {**RUN["kubernetes"]["runner"], "cpu": 1}}}
    run = eval_dag.test(run_conf=conf)

    assert str(run.state).endswith("success"), run.state
    state = run_dir(run.run_id)
    assert state.where().startswith(f"s3://dayone-runner-staging/{prefix}/")
    runner_pods = [r["body"] for r in apiserver.requests if r["method"] == "POST" and r["path"].endswith("/pods")]
    steps = sorted((p["metadata"]["labels"]["dayone/step"], p["metadata"]["labels"].get("dayone/shard-of", ""))
                   for p in runner_pods)
    assert steps == [("functional", ""), ("short", ""), ("short", "short-sglang")], steps
    commands = {p["metadata"]["labels"].get("dayone/shard-of", "lead"): p["spec"]["containers"][0]["command"]
                for p in runner_pods if p["metadata"]["labels"]["dayone/step"] == "short"}
    assert commands["lead"][-2:] == ["--shard", "0/2"] and commands["short-sglang"][-2:] == ["--shard", "1/2"]
    for pod in runner_pods:
        [c] = pod["spec"]["containers"]
        assert c["command"][:3] == ["dayone", "step", pod["metadata"]["labels"]["dayone/step"]]
        assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "1", "memory": "4Gi"}
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        env = {e["name"]: e for e in c["env"]}
        assert env["AWS_SECRET_ACCESS_KEY"] == {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {
            "secretKeyRef": {"name": "dayone-s3", "key": "secret-access-key"}}}
        assert s3_conn.secret_key not in repr(pod)  # credentials by reference only
        assert pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
            "labelSelector"]["matchLabels"]["dayone/engine"] == "sglang"
    # each pod ran `dayone step` to exit 0, then KubernetesPodOperator (the peer: the step's task) deleted it
    assert sorted(kubelet.exit_codes.values()) == [0, 0, 0]
    deleted = {r["path"].rsplit("/", 1)[-1] for r in apiserver.requests if r["method"] == "DELETE"
               and "/pods/" in r["path"]}
    assert {p["metadata"]["name"] for p in runner_pods} <= deleted
    assert not apiserver.list("pods", NS, "app.kubernetes.io/component=runner-step")
    # the pod's own log lines went into the task's log
    task_log = capfd.readouterr().out
    assert re.search(r"\[base\] logs: .*step sglang/short done", task_log)
    assert re.search(r"\[base\] logs: .*step sglang/functional done", task_log)
    # its rows and outcome are in the run's staging, the run archived and reported them
    assert state.read_json("state/steps/sglang-short.json")["status"] == "ok"
    assert state.read_json("state/steps/sglang-functional.json")["status"] == "ok"
    measured = [r for r in state.read_rows("requests", "sglang") if r["scenario"] == "short"]
    assert len(measured) == 16 and all(r["status"] == "ok" for r in measured)
    # the c=4 round merged both pods' rows, the peer's clock offset recorded with its uncertainty
    shards = [r for r in state.read_rows("client_shards", "sglang") if r["scenario"] == "short"]
    by_level = {c: sorted((r["pod"], r["pods"], r["pod_cores"]) for r in shards if r["concurrency"] == c)
                for c in (1, 4)}
    assert by_level == {1: [(0, 1, 1)], 4: [(0, 2, 1), (1, 2, 1)]}, by_level
    peer = [r for r in shards if r["pod"] == 1][0]
    assert peer["uncertainty_s"] > 0 and abs(peer["offset_s"]) <= peer["uncertainty_s"] + 0.005
    assert state.read_json("archive.json")["prefixes"]["sglang"].endswith(dayone_run_id(run.run_id) + "/")
    assert state.read_json("state/steps/report.json")["status"] == "ok"
    page = state.read_bytes("report.html").decode()
    assert "c=4 round 1: 2 runner pods of 1 core, 2 client processes" in page
    assert "c=1 round 1: 1 runner pod of 1 core, 1 client process" in page
    # the worker and the runner pods called only what their Roles grant (docs/deploy.md)
    worker = api_calls(apiserver.requests, "worker")
    assert POD_OPERATOR_CALLS - {("", "pods", "patch")} <= worker <= WORKER_NAMESPACED | WORKER_CLUSTER
    assert ("", "pods", "list") in api_calls(apiserver.requests, "runner") <= RUNNER_NAMESPACED


def test_steps_of_an_engine_that_never_served_are_skipped_without_a_pod(eval_dag, cluster_run):
    """A runner pod beside an engine pod that never started could not be scheduled: the worker finds no
    engine ready, records the steps as not attempted, and skips their tasks without creating a pod."""
    apiserver, kubelet, _, serving = cluster_run
    serving.clear()
    conf = {**RUN, "engines": [{**RUN["engines"][0], "ready_timeout_s": 2}]}

    run = eval_dag.test(run_conf=conf)

    assert str(run.state).endswith("failed"), run.state  # the readiness failure is the run's verdict
    states = {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}
    assert states["engines.wait_ready"] == "failed"
    assert states["engines.functional"] == states["engines.short"] == "skipped", states
    assert not [r for r in apiserver.requests if r["method"] == "POST" and r["path"].endswith("/pods")]
    from dayone_airflow.glue import run_dir

    outcome = run_dir(run.run_id).read_json("state/steps/sglang-functional.json")
    assert outcome["status"] == "not_attempted" and "not ready" in outcome["detail"]

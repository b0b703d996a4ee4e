"""A runner pod's log reaches the task's log while the pod runs: StepPodOperator defers to
KubernetesPodOperator's own trigger with logging_interval (kubernetes.runner.log_interval_s), which reads
the lines the pod printed since its last read (timestamps, sinceSeconds) from the local API server,
as the fake kubelet writes them, and logs them (in Airflow the triggerer's lines are the task's log): a
line the pod printed is in the log seconds before the pod ends."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import threading
import time

import pytest
from fake_kubelet import FakeKubelet
from k8s_helpers import CONN_ID, run_config

from dayone_airflow.connections import hook_api_client
from tasks.steps.runner_pods import runner_step_pod

NS = "bench"
RUNNER = {"image": "registry.example.org/dayone-runner@sha256:" + "3" * 64, "s3_secret": {"name": "dayone-s3"},
          "log_interval_s": 1, "poll_interval_s": 0.2}
# a step that says where it is, then measures for a while: 6 s, so that the line read at the next 1 s log
# interval is still seconds ahead of the end when the trigger waits a second or two for a core
MEASURING = [sys.executable, "-c", "import time; print('round 1 of 3 measured', flush=True); time.sleep(6); "
             "print('step done', flush=True)"]


def test_the_pods_log_reaches_the_task_log_while_the_pod_runs(apiserver, kube_conn, tmp_path, capfd):
    from kubernetes import client
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.sdk.exceptions import TaskDeferred

    from dayone_airflow.step_pods import StepPodOperator
    from tasks.k8s.manifests import labels_for

    apiserver._store("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "dayone-sglang-0", "namespace": NS, "labels": labels_for("run-1", "sglang")},
        "spec": {"nodeName": "h20-node-1", "containers": [{"name": "engine", "image": "example.org/sglang"}]}})
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dayone-s3", "namespace": NS},
                                 "data": {"access-key-id": "YQ==", "secret-access-key": "Yg=="}})
    kubelet = FakeKubelet(apiserver, tmp_path / "kubelet")
    config = run_config(engines=("sglang",), measure_from="cluster", runner=RUNNER)
    pod = runner_step_pod(config, "short", ["sglang"], "run-1", "s3://dayone/staging")
    pod["spec"]["containers"][0]["command"] = MEASURING
    name = client.CoreV1Api(hook_api_client(CONN_ID)).create_namespaced_pod(NS, pod).metadata.name
    deadline = time.monotonic() + 20
    while (NS, name) not in kubelet.processes and time.monotonic() < deadline:
        time.sleep(0.05)
    process = kubelet.processes[(NS, name)]

    operator = StepPodOperator(task_id="engines.short", step="short", engine="sglang", together=True)
    operator.kubernetes_conn_id, operator.namespace = CONN_ID, NS
    operator.watch(config.kubernetes.runner)  # as _configure sets it from the run config
    assert operator.logging_interval == 1
    operator.pod = KubernetesHook(conn_id=CONN_ID).get_pod(name, NS)
    with pytest.raises(TaskDeferred) as deferred:
        operator.invoke_defer_method()
    trigger = deferred.value.trigger

    ended = []
    waiter = threading.Thread(target=lambda: ended.append((process.wait(), time.time())), daemon=True)
    waiter.start()

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), 30))

    assert event.payload["status"] == "success", event.payload
    waiter.join(10)  # the process has ended; the thread that saw it may not have run since
    [(code, ended_at)] = ended
    # the task's log line (its own time first), against when the pod's process ended
    [logged] = [line for line in capfd.readouterr().out.splitlines() if "[base] round 1 of 3 measured" in line]
    logged_at = dt.datetime.fromisoformat(logged.split()[0].replace("Z", "+00:00")).timestamp()
    assert logged_at < ended_at - 1.0, (logged, ended_at)

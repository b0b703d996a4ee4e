"""How a runner pod ends, through KubernetesPodOperator's own code as StepPodOperator configures it: a
`dayone step` that exits 99 (not attempted) is a skipped task, its pod labelled checked and deleted;
killing the task deletes the pod and the kubelet stops its process; the runner pods a killed worker
left are deleted by the nightly's cleanup step, by their run label and age, and a live run's are kept."""

from __future__ import annotations

import datetime as dt
import sys
import time

import pytest
from fake_kubelet import FakeKubelet
from k8s_helpers import CONN_ID, run_config

from dayone_airflow.connections import hook_api_client
from tasks.k8s.rbac import POD_OPERATOR_CALLS
from tasks.steps.runner_pods import runner_step_pod

NS = "bench"
RUNNER = {"image": "registry.example.org/dayone-runner@sha256:" + "3" * 64, "s3_secret": {"name": "dayone-s3"}}
MEASURING_FOREVER = [sys.executable, "-c", "import time; time.sleep(120)"]  # a step still measuring


def _start_runner_pod(run_id: str, name: str, command: list[str] = MEASURING_FOREVER) -> str:
    """A runner pod of `run_id` created as KubernetesPodOperator creates it, its process still running."""
    from kubernetes import client

    from tasks.k8s.manifests import labels_for

    config = run_config(run_id=run_id, engines=("sglang",), measure_from="cluster", runner=RUNNER)
    engine_pod = f"dayone-sglang-{run_id}-0"  # the engine's pod the runner pod's affinity places it beside
    if ("pods", NS, engine_pod) not in _API.objects:
        _API._store("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": engine_pod, "namespace": NS, "labels": labels_for(run_id, "sglang")},
            "spec": {"nodeName": "h20-node-1", "containers": [{"name": "engine", "image": "example.org/sglang"}]}})
    pod = runner_step_pod(config, "short", ["sglang"], run_id, "s3://dayone/staging")
    pod["metadata"]["name"] = name
    pod["spec"]["containers"][0]["command"] = command
    client.CoreV1Api(hook_api_client(CONN_ID)).create_namespaced_pod(NS, pod)
    return name


def _running(kubelet: FakeKubelet, name: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (NS, name) not in kubelet.processes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kubelet.processes[(NS, name)].poll() is None


def _stopped(kubelet: FakeKubelet, name: str, timeout_s: float = 10.0) -> bool:
    proc = kubelet.processes[(NS, name)]
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll() is not None


_API = None  # this test's API server, for the engine pods the runner pods are placed beside


@pytest.fixture
def kubelet(apiserver, kube_conn, tmp_path):
    global _API
    _API = apiserver
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dayone-s3", "namespace": NS},
                                 "data": {"access-key-id": "YQ==", "secret-access-key": "Yg=="}})
    return FakeKubelet(apiserver, tmp_path / "kubelet")


def test_exit_99_is_a_skipped_task_and_the_pod_is_deleted(apiserver, kubelet):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from airflow.sdk.exceptions import AirflowSkipException

    from dayone_airflow.step_pods import StepPodOperator
    from tasks.steps.context import NOT_ATTEMPTED_EXIT

    name = _start_runner_pod("run-1", "dayone-short-sglang-skip",
                             [sys.executable, "-c", f"import sys; sys.exit({NOT_ATTEMPTED_EXIT})"])
    deadline = time.monotonic() + 20
    while name not in kubelet.exit_codes and time.monotonic() < deadline:
        time.sleep(0.05)
    operator = StepPodOperator(task_id="engines.short", step="short", engine="sglang", together=True)
    operator.kubernetes_conn_id = CONN_ID
    ended = KubernetesHook(conn_id=CONN_ID).get_pod(name, NS)
    assert ended.status.phase == "Failed"

    with pytest.raises(AirflowSkipException, match="exit code 99"):
        operator.cleanup(pod=ended, remote_pod=ended)

    assert apiserver.get("pods", NS, name) is None
    [patch] = [r for r in apiserver.requests if r["method"] == "PATCH"]
    assert patch["user"] == "worker" and patch["body"]["metadata"]["labels"] == {"already_checked": "True"}


def test_killing_the_task_deletes_its_runner_pod_and_stops_its_process(apiserver, kubelet):
    from kubernetes.client import models as k8s

    from dayone_airflow.step_pods import StepPodOperator

    name = _start_runner_pod("run-1", "dayone-short-sglang-abc123")
    _running(kubelet, name)
    operator = StepPodOperator(task_id="engines.short", step="short", engine="sglang", together=True)
    operator.kubernetes_conn_id = CONN_ID
    operator.pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name, namespace=NS))  # as execute left it

    operator.on_kill()

    assert apiserver.get("pods", NS, name) is None
    assert _stopped(kubelet, name)
    assert [r["user"] for r in apiserver.requests if r["method"] == "DELETE"] == ["worker"]
    assert ("", "pods", "patch") in POD_OPERATOR_CALLS  # labelled checked when a pod did not succeed


def test_the_nightly_cleanup_deletes_the_runner_pods_a_killed_run_left(apiserver, kubelet, tmp_path, monkeypatch):
    from dayone_airflow.glue import run_step

    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    killed = _start_runner_pod("run-killed", "dayone-short-sglang-killed")
    live = _start_runner_pod("run-live", "dayone-short-sglang-live")
    for name in (killed, live):
        _running(kubelet, name)
    config = run_config(run_id="nightly", engines=("sglang",))
    long_ago = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=config.kubernetes.cleanup_age_s + 600))
    apiserver.objects[("pods", NS, killed)]["metadata"]["creationTimestamp"] = long_ago.strftime("%Y-%m-%dT%H:%M:%SZ")

    conf = config.model_dump(mode="json", exclude={"run_id"})
    deleted = run_step("cleanup", conf, "scheduled__nightly")["data"]["deleted"]

    assert deleted == [f"Pod/{killed}"]
    assert _stopped(kubelet, killed)
    assert apiserver.get("pods", NS, live) is not None and kubelet.processes[(NS, live)].poll() is None
    assert run_step("cleanup", conf, "scheduled__nightly")["data"]["deleted"] == []

"""OpenWebUI beside the engine on "Kubernetes": the local API server (fake_apiserver.py) and, under its
Deployment, the real OpenWebUI from its own environment as the pod's process (fake_deployments.py plays the
controller, kubelet, readiness probe and kube-proxy). The openwebui step deploys it, judges it through its
Service, and removes it; the engine's teardown and the nightly's cleanup remove what a stopped step left (its
Secret with its Service, by the garbage collector). The API server enforces DayOne's Roles: all of it is the
worker's, whose Role reads and deletes no Secret."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from fake_deployments import DeploymentKubelet, openwebui_from_venv
from k8s_helpers import MODEL, run_config

from dayone_airflow.connections import hook_api_client
from tasks.k8s.openwebui import SECRET_KEYS, openwebui_name, render_openwebui
from tasks.openwebui.cluster import create_openwebui
from tasks.openwebui.server import venv_path
from tasks.steps.context import RunContext
from tasks.state.storage import RunDir
from tasks.steps.execution import execute
from tasks.targets.kubernetes import ClusterAccess, KubernetesTarget

NS = "bench"
IMAGE = "ghcr.io/open-webui/open-webui@sha256:" + "3" * 64  # a digest in the reference: pinned as it is
OWUI = "dayone-sglang-openwebui-run-1"
OPENWEBUI_CHECKS = {"openwebui_model_list": "pass", "openwebui_chat": "pass", "openwebui_reasoning": "pass",
                    "openwebui_usage": "not_applicable"}


def openwebui_config() -> dict:
    doc = run_config(engines=("sglang",)).model_dump(mode="json", exclude={"run_id"}, exclude_unset=True)
    doc["scenarios"] = {"openwebui": {"enabled": True, "image": IMAGE}}
    doc["model"]["reasoning"] = True
    return doc


def owui_objects(apiserver) -> dict[str, list[str]]:
    return {kind: [o["metadata"]["name"] for o in apiserver.list(kind, NS, "dayone/openwebui-for=sglang")]
            for kind in ("deployments", "services", "secrets", "pods")}


@pytest.fixture
def reasoning_engine():
    from tasks.sim.process import start_sim

    sim = start_sim("sglang", {"model": MODEL, "reasoning": True})
    yield sim
    sim.stop()


# A background unit (tests/xdist_units.py) at the lowest CPU priority: on a fully loaded machine OpenWebUI's
# start, some 14 s on a free core, once took over the step's 300 s, and once the test's 600 s (the suite's
# timeout, under the step's 900 s below): the test outlasts the step it waits for.
@pytest.mark.timeout(1200)
def test_the_openwebui_step_deploys_openwebui_beside_the_engine_judges_it_through_its_service_and_removes_it(
        apiserver, kube_conn, reasoning_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    monkeypatch.setattr("tasks.k8s.openwebui.STARTUP_TIMEOUT_S", 900)
    kubelet = DeploymentKubelet(apiserver, tmp_path / "kubelet",
                                images={"open-webui/open-webui": openwebui_from_venv(venv_path())},
                                backends={(NS, "dayone-sglang-run-1"): reasoning_engine.url})
    try:
        ctx = RunContext.build(openwebui_config(), "run-1",
                               cluster=ClusterAccess(api_client=hook_api_client, service_url=kubelet.service_url))
        execute(ctx, "pin")
        execute(ctx, "deploy", "sglang")
        apiserver.start_pod(NS, "dayone-sglang-run-1", running=True, ready=True)  # the engine's pod: the simulator
        apiserver.set_available(NS, "dayone-sglang-run-1")
        execute(ctx, "wait_ready", "sglang")
        result = execute(ctx, "openwebui", "sglang")
        run_dir = RunDir("run-1")
        rows = {r["check"]: r for r in run_dir.read_rows("checks", "sglang") if r["scenario"] == "openwebui"}
        assert {c: rows[c]["outcome"] for c in OPENWEBUI_CHECKS} == OPENWEBUI_CHECKS, \
            ({c: r["evidence"] for c, r in rows.items()}, kubelet.errors)
        assert result.data["checks_failed"] == 0

        # what was applied: the Service, a Secret with random values it owns, the Deployment reading them by
        # reference only; the worker did it all, and nothing was refused
        made = [b for b in apiserver.created()
                if (b["metadata"].get("name") or b["metadata"].get("generateName", "")).startswith(OWUI)]
        assert [b["kind"] for b in made] == ["Service", "Secret", "Deployment"]
        created = {b["kind"]: b for b in made}
        assert created["Secret"]["metadata"]["ownerReferences"][0]["kind"] == "Service"
        secret_values = [base64.b64decode(v).decode() for v in created["Secret"]["data"].values()]
        [container] = created["Deployment"]["spec"]["template"]["spec"]["containers"]
        assert container["image"] == IMAGE
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
        [secret_name] = {r["name"] for r in refs.values()}
        assert secret_name.startswith(OWUI + "-")  # generated: never an earlier try's
        assert refs == {var: {"name": secret_name, "key": key} for var, key in SECRET_KEYS.items()}
        assert apiserver.forbidden() == [] and {r["user"] for r in apiserver.requests} == {"worker"}
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        assert env["OPENAI_API_BASE_URLS"] == "http://dayone-sglang-run-1.bench.svc.cluster.local:30000/v1"
        password = base64.b64decode(created["Secret"]["data"]["admin-password"]).decode()
        [pod_env] = kubelet.envs.values()
        assert len(password) >= 24 and pod_env["WEBUI_ADMIN_PASSWORD"] == password  # the pod read the Secret
        recorded = b"".join(p.read_bytes() for p in Path(tmp_path / "runs").rglob("*") if p.is_file())
        for value in (v for v in secret_values if v != "none"):
            assert value not in json.dumps(created["Deployment"]) and value.encode() not in recorded
        assert run_dir.read_json("k8s/sglang-openwebui.json")[0]["kind"] == "Deployment"
        assert run_dir.read_json("manifest.json")["openwebui_pinned"]["pinned_ref"] == IMAGE

        # the chat went to the engine through its Service: OpenWebUI stored the engine's answers
        chat = run_dir.read_json("openwebui/sglang/chat.json")
        assert len([m for m in chat["chat"]["history"]["messages"].values() if m["role"] == "assistant"]) == 2
        # removed when the checks ended: objects and process
        assert owui_objects(apiserver) == {"deployments": [], "services": [], "secrets": [], "pods": []}
        assert kubelet.running() == []
        assert apiserver.get("deployments", NS, "dayone-sglang-run-1") is not None  # the engine stays for the rest
    finally:
        kubelet.close()


@pytest.fixture
def leftover(apiserver, kube_conn, tmp_path, monkeypatch):
    """An openwebui step stopped midway (its worker killed): OpenWebUI's objects left beside the engine."""
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    cluster = ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: "http://127.0.0.1:9")
    ctx = RunContext.build(openwebui_config(), "run-1", cluster=cluster)
    execute(ctx, "pin")
    execute(ctx, "deploy", "sglang")
    cfg = ctx.config.model_copy(update={"run_id": "run-1"})
    client = ctx.target.client(cfg.kubernetes.conn_id)
    create_openwebui(client, cfg, "sglang", IMAGE, {"WEBUI_SECRET_KEY": "k" * 32})
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vllm-key", "namespace": NS},
                                 "data": {"api-key": "eA=="}})  # a deployment's own Secret: never DayOne's to delete
    left = owui_objects(apiserver)
    assert left == {"deployments": [OWUI], "services": [OWUI], "secrets": left["secrets"], "pods": []}
    assert [s[:len(OWUI) + 1] for s in left["secrets"]] == [OWUI + "-"]
    return ctx


def test_the_engines_teardown_deletes_the_openwebui_a_stopped_step_left(apiserver, leftover):
    result = execute(leftover, "teardown", "sglang").data
    assert owui_objects(apiserver) == {"deployments": [], "services": [], "secrets": [], "pods": []}
    assert {f"Deployment/{OWUI}", f"Service/{OWUI}"} <= set(result["deleted"])  # the Secret went with its Service
    assert apiserver.forbidden() == []
    assert apiserver.list("deployments", NS) == []
    assert [s["metadata"]["name"] for s in apiserver.list("secrets", NS)] == ["vllm-key"]


def test_the_nightly_cleanup_deletes_a_killed_runs_openwebui_by_its_labels(apiserver, leftover):
    aged = KubernetesTarget(ClusterAccess(api_client=hook_api_client), clock=lambda: time.time() + 7 * 86400)
    deleted = aged.cleanup(leftover.config)
    assert {f"Deployment/{OWUI}", f"Service/{OWUI}"} <= set(deleted)  # the Secret went with its Service
    assert apiserver.forbidden() == []
    assert owui_objects(apiserver) == {"deployments": [], "services": [], "secrets": [], "pods": []}
    assert [s["metadata"]["name"] for s in apiserver.list("secrets", NS)] == ["vllm-key"]


def test_openwebuis_pod_is_not_counted_as_the_engines(leftover):
    """The engine's Service and rollout select by the engine's label, which OpenWebUI's pod never carries."""
    [dep, svc] = render_openwebui(leftover.config.model_copy(update={"run_id": "run-1"}), "sglang", IMAGE)
    assert "dayone/engine" not in dep["spec"]["template"]["metadata"]["labels"]
    assert openwebui_name("run-1", "sglang") == OWUI

"""Least privilege, derived and enforced. The local API server authorizes every request by the Roles DayOne
renders, as a cluster's RBAC authorizer does (fake_apiserver.py): a call the Role lacks gets 403 here as
there, so every Kubernetes test is also a test of the Roles. The worker's Role is what DayOne's code
calls (its client methods, scanned) and KubernetesPodOperator calls for a runner pod (seen by the API
server in test_k8s_runner_pods_pipeline.py); the runner's is what every runner step calls, each run as a
runner pod runs it and recorded by the API server; docs/deploy.md shows the Roles."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
import yaml
from fake_apiserver import RUNNER_TOKEN, forbidden_message, request_attributes
from k8s_helpers import CONN_ID, DIGESTS, MODEL

from tasks.k8s.rbac import (POD_OPERATOR_CALLS, RUNNER_NAMESPACED, WORKER_CLUSTER, WORKER_NAMESPACED, Grant, granted,
                            roles)

REPO = Path(__file__).resolve().parents[2]
NS, NODE = "bench", "h20-node-1"
OPENWEBUI_IMAGE = "ghcr.io/open-webui/open-webui@sha256:" + "3" * 64
_CLIENT_CALL = re.compile(r"\b(list|read|create|delete|patch|replace)_namespaced_([a-z]+)(_status|_log)?\b"
                          r"|\bread_node\b")
_VERB = {"list": "list", "read": "get", "create": "create", "delete": "delete", "patch": "patch", "replace": "update"}
_GROUP = {"deployments": "apps"}


def calls_in(text: str) -> set[Grant]:
    """(apiGroup, resource, verb) of every Kubernetes client method named in `text`."""
    found: set[Grant] = set()
    for m in _CLIENT_CALL.finditer(text):
        if m.group(0) == "read_node":
            found.add(("", "nodes", "get"))
            continue
        resource = m.group(2) + "s"
        sub = {"_status": "/status", "_log": "/log"}.get(m.group(3) or "", "")
        found.add((_GROUP.get(resource, ""), resource + sub, _VERB[m.group(1)]))
    return found


def code_calls() -> set[Grant]:
    return {c for root in ("tasks", "plugins") for p in sorted((REPO / root).rglob("*.py"))
            for c in calls_in(p.read_text())}


def api_calls(requests: list[dict], user: str) -> set[Grant]:
    """What the local API server saw `user` do, as RBAC names it."""
    seen: set[Grant] = set()
    for r in requests:
        if r["user"] == user and (a := request_attributes(r["method"], r["path"], r["query"])) is not None:
            seen.add((a["group"], a["resource"], a["verb"]))
    return seen


def test_the_worker_roles_grant_every_call_dayone_makes_and_no_other():
    from tasks.k8s.rbac import WORKER_NAMED

    grants = granted(roles(secrets=["vllm-key"]), "dayone-worker") | granted(roles(), "dayone-worker-nodes")
    assert grants == WORKER_NAMESPACED | WORKER_NAMED | WORKER_CLUSTER
    assert grants == code_calls() | POD_OPERATOR_CALLS, (
        f"missing: {sorted(code_calls() | POD_OPERATOR_CALLS - grants)}; "
        f"unused: {sorted(grants - code_calls() - POD_OPERATOR_CALLS)}")


def test_the_worker_reads_only_the_secrets_the_config_names_and_lists_none(apiserver, kube_conn):
    """A list returns every Secret's data: the worker may read an engine's api_key_secret by name, and
    create OpenWebUI's; no other Secret of the namespace, by list or by name."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from dayone_airflow.connections import hook_api_client
    from tasks.config import parse_run_config

    for name, value in (("vllm-key", "k-engine"), ("other-teams-db", "hunter2")):
        apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                                     "data": {"v": base64.b64encode(value.encode()).decode()}})
    core = client.CoreV1Api(hook_api_client(CONN_ID))
    for call in (lambda: core.list_namespaced_secret(NS), lambda: core.read_namespaced_secret("other-teams-db", NS)):
        with pytest.raises(ApiException) as refused:
            leaked = call()
            raise AssertionError(f"the worker read Secrets it was never meant to: {leaked}")
        assert refused.value.status == 403, refused.value
    from tasks.k8s.rbac import roles_for

    config = parse_run_config({
        "run_id": "r", "target": "kubernetes", "model": {"name": MODEL},
        "engines": [{"name": "vllm", "dialect": "vllm", "image": "example.org/vllm:day1",
                     "api_key_secret": {"name": "vllm-key"}}],
        "kubernetes": {"namespace": NS, "conn_id": CONN_ID}})
    [rule] = [r for r in roles_for(config)[0]["rules"] if r["resources"] == ["secrets"] and "get" in r["verbs"]]
    assert rule == {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["vllm-key"], "verbs": ["get"]}
    apiserver.grant(roles_for(config))
    assert core.read_namespaced_secret("vllm-key", NS).data == {"v": base64.b64encode(b"k-engine").decode()}
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_secret("other-teams-db", NS)
    assert refused.value.status == 403
    assert not any(r["resources"] == ["secrets"] and {"list", "watch", "delete"} & set(r["verbs"])
                   for r in roles_for(config)[0]["rules"])


def test_a_call_the_role_lacks_is_forbidden_as_a_cluster_answers_it(apiserver):
    """The runner pods' service account creating a Secret, as OpenWebUI's step would from a runner pod."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    runner = client.CoreV1Api(config.new_client_from_config_dict(apiserver.kubeconfig(RUNNER_TOKEN)))
    with pytest.raises(ApiException) as refused:
        runner.create_namespaced_secret(NS, {"apiVersion": "v1", "kind": "Secret",
                                             "metadata": {"name": "s", "namespace": NS}, "data": {}})
    status = __import__("json").loads(refused.value.body)
    assert refused.value.status == 403 and status["kind"] == "Status" and status["reason"] == "Forbidden"
    assert status["message"] == ('secrets is forbidden: User "runner" cannot create resource "secrets" in API '
                                 'group "" in the namespace "bench"')
    assert apiserver.get("secrets", NS, "s") is None
    assert runner.list_namespaced_pod(NS).items == []  # what its Role grants
    with pytest.raises(ApiException) as refused:
        runner.list_namespaced_pod("kube-system")  # a Role grants in its own namespace only
    assert refused.value.status == 403
    a = request_attributes("GET", "/api/v1/namespaces/bench/pods/p/log", {})
    assert forbidden_message("runner", a) == ('pods "p" is forbidden: User "runner" cannot get resource "pods/log" '
                                              'in API group "" in the namespace "bench"')


# ---- the runner's Role: what every runner step calls, recorded -------------------------------------------
def _runner_run(dataset: Path) -> dict:
    """Every runner step switched on, each as small as it goes."""
    one = {"concurrency": [1], "rounds": 1, "requests_per_round": 2}
    return {
        "target": "kubernetes",
        "model": {"name": MODEL, "path": "/models/glm", "context_limit_tokens": 32768},
        "engines": [{"name": "sglang", "dialect": "sglang", "image": "example.org/sglang:day1",
                     "digest": DIGESTS["sglang"], "gpus": 1, "node": NODE}],
        "kubernetes": {"namespace": NS, "conn_id": CONN_ID, "measure_from": "cluster",
                       "runner": {"image": "registry.example.org/dayone-runner@sha256:" + "3" * 64,
                                  "s3_secret": {"name": "dayone-s3"}}},
        "slo": {"ttft_s": 30},
        "scenarios": {
            "warmup": True,
            "quality": {"enabled": True, "items_per_family": 1, "kv_context_tokens": [256],
                        "nll_lengths_tokens": [], "max_tokens": 8},
            "short": {**one, "input_tokens": 16, "output_tokens": 4},
            "prefill": {**one, "input_tokens": 64, "output_tokens": 4},
            "decode": {**one, "input_tokens": 16, "output_tokens": 8},
            "rate": {"enabled": True, "rates": [20.0], "rounds": 1, "requests_per_round": 2, "input_tokens": 16,
                     "output_tokens": 4},
            "capacity": {"enabled": True, "start": 1, "max": 1, "rounds": 1, "extra_rounds": 0,
                         "requests_per_round": 2, "input_tokens": 16, "output_tokens": 4},
            "trace": {"enabled": True, "synthetic": {"requests": 3, "rate_rps": 20, "max_input_tokens": 64,
                                                     "max_output_tokens": 4}, "rounds": 1, "block_tokens": 16},
            "long_context": {"lengths": [600], "depths": [0.5], "include_model_limit": False, "output_tokens": 8},
            "boundary": {"lengths": [700], "output_tokens": 4},
            "prefix_cache": {"prompt_tokens": 200, "repeats": 1, "output_tokens": 4},
            "sessions": {"enabled": True, "sessions": 1, "turns": 2, "concurrency": [1], "rounds": 1,
                         "user_tokens": 16, "output_tokens": 4, "think_time_s": 0},
            "shared_prefix": {"enabled": True, "groups": 1, "prefix_tokens": 64, "suffix_tokens": 8,
                              "requests_per_group": 2, "output_tokens": 4, "concurrency": [1], "rounds": 1},
            "dataset": {"enabled": True, "path": str(dataset), "concurrency": [1], "rounds": 1, "max_tokens": 4},
            # on too, pinned: were it a runner step, it would run here as one
            "openwebui": {"enabled": True, "image": OPENWEBUI_IMAGE},
        },
        "request_timeout_s": 30,
    }


def test_the_runner_role_is_what_every_runner_step_calls(apiserver, engine_url, tmp_path, monkeypatch):
    """Each runner step run as `dayone step` runs it in a runner pod (the pod's service account, the run's
    state, the engine's Service), with the engine restarting during one of them; what the API server saw
    the runner do is exactly what its Role grants, and none of it was refused."""
    from kubernetes import config as kube_config

    from tasks.config import parse_run_config
    from tasks.k8s.manifests import labels_for, run_selector
    from tasks.state.documents import MANIFEST, OPENWEBUI_PINNED, outcome_doc, set_readiness
    from tasks.steps.context import RunContext
    from tasks.steps.execution import execute
    from tasks.steps.registry import STEPS
    from tasks.steps.runner_pods import RUNNER_STEPS
    from tasks.targets.base import Deployment
    from tasks.targets.kubernetes import ClusterAccess

    run_id = "run-rbac"
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text('{"prompt": "Say hello."}\n{"prompt": "Count to three."}\n')
    config = parse_run_config({**_runner_run(dataset), "run_id": run_id})
    assert [s for s in RUNNER_STEPS if not STEPS[s].enabled(config)] == []
    # what the worker's plan, deploy and readiness left: the plan, the engine's pod on NODE, served by the simulator
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    monkeypatch.delenv("DAYONE_STAGING", raising=False)
    kubeconfig = tmp_path / "serviceaccount-kubeconfig.yaml"  # the runner pod's mounted token
    kubeconfig.write_text(yaml.safe_dump(apiserver.kubeconfig(token=RUNNER_TOKEN)))
    # as `dayone step` builds it in a pod: the pod's own cluster access (kubeconfig_client, from its token)
    ctx = RunContext.build(config, run_id, cluster=ClusterAccess(
        api_client=lambda conn_id: kube_config.new_client_from_config(str(kubeconfig))))
    ctx.run_dir.write_json(MANIFEST, {"config": config.model_dump(mode="json"), "engines": [{"name": "sglang"}]})
    Deployment("sglang", engine_url, DIGESTS["sglang"], handle={
        "conn_id": CONN_ID, "namespace": NS, "deployment": "dayone-sglang", "service": "dayone-sglang",
        "selector": run_selector(run_id, "sglang"), "objects": [], "launch_index": 0}).save(ctx.run_dir)
    set_readiness(ctx.run_dir, "sglang", True, "served")
    ctx.run_dir.write_json(OPENWEBUI_PINNED, {"pinned_ref": OPENWEBUI_IMAGE})
    apiserver._store("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "dayone-sglang-0", "namespace": NS, "labels": labels_for(run_id, "sglang")},
        "spec": {"nodeName": NODE, "containers": [{"name": "engine", "image": "example.org/sglang"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "engine", "image": "example.org/sglang",
                                                              "imageID": "", "restartCount": 0, "ready": True,
                                                              "state": {"running": {}}}]}})

    def restart_once(request: dict) -> None:  # the engine restarts between the step's readings before and after
        if request["user"] == "runner" and request["path"].endswith("/pods"):
            readings.append(request)
            if len(readings) == 2:
                apiserver.set_container_state(NS, "dayone-sglang-0", restartCount=1)

    readings: list[dict] = []
    calls: dict[str, set[Grant]] = {}
    for step in RUNNER_STEPS:
        first = len(apiserver.requests)
        if step == "functional":
            apiserver.on_request.append(restart_once)
        try:
            result = execute(ctx, step, "sglang")
        finally:
            apiserver.on_request.clear()
        assert result.status == "ok", (step, ctx.run_dir.read_json(outcome_doc(step, "sglang")))
        calls[step] = api_calls(apiserver.requests[first:], "runner")
    functional = [r for r in ctx.run_dir.read_rows("checks", "sglang") if r["check"] == "engine_restarts"
                  and r["scenario"] == "functional"]
    assert [r["outcome"] for r in functional] == ["fail"]  # the restart was seen: its reading path was taken
    print({step: sorted(c) for step, c in calls.items()})
    assert apiserver.forbidden() == []
    assert all(calls.values()), calls  # every step reads the engine's restarts around it
    assert granted(roles(), "dayone-runner") == RUNNER_NAMESPACED == set().union(*calls.values()), calls


def test_deploy_docs_show_the_roles():
    text = (REPO / "docs" / "deploy.md").read_text()
    [block] = re.findall(r"```yaml\n(# dayone RBAC.*?)```", text, re.S)
    assert list(yaml.safe_load_all(block)) == roles("dayone", ["vllm-key"])


def test_dayone_render_writes_the_roles_a_config_needs(tmp_path):
    """The worker's Role depends on the config (the Secrets its engines name): `dayone render` writes it."""
    from test_k8s_manifests import seed_config

    from tasks import cli
    from tasks.config import parse_run_config
    from tasks.k8s.rbac import roles_for

    doc = seed_config().model_dump(mode="json")
    for engine in doc["engines"]:
        engine["digest"] = "sha256:" + "5" * 64
    doc["engines"][1]["api_key_secret"] = {"name": "vllm-key", "key": "api-key"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert cli.main(["render", "--config", str(path), "--out", str(tmp_path / "out"), "--offline"]) == 0
    written = list(yaml.safe_load_all((tmp_path / "out" / "rbac.yaml").read_text()))
    assert written == roles_for(parse_run_config({**doc, "run_id": "dry-run", "target": "kubernetes"}))
    [named] = [r for r in written[0]["rules"] if r.get("resourceNames")]
    assert named == {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["vllm-key"], "verbs": ["get"]}

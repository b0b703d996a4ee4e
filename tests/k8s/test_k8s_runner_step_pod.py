"""A measuring step's runner pod, as rendered (tasks/steps/runner_pods.py), and the run config that asks for
it: the runner pod template's lockdown, whole cores requested as limited, the engine's node, credentials
only as Secret references; and measure_from: cluster refused, naming the field and the fix, where runner
pods cannot work."""

from __future__ import annotations

import kubernetes_validate
import pytest
from k8s_helpers import run_config

from tasks.config import ConfigError
from tasks.k8s.manifests import runner_pod_template
from tasks.steps.runner_pods import RUNNER_STEPS, runner_step_pod

IMAGE = "registry.example.org/dayone-runner@sha256:" + "3" * 64
RUNNER = {"image": IMAGE, "cpu": 4, "memory": "8Gi", "s3_secret": {"name": "dayone-s3"}}


def _cluster(**runner):
    return run_config(measure_from="cluster", runner={**RUNNER, **runner})


def test_measure_from_defaults_to_the_worker():
    assert run_config().kubernetes.measure_from == "worker"


def test_the_runner_pod_is_the_locked_down_template_with_whole_cores_of_its_own():
    pod = runner_step_pod(_cluster(), "short", ["sglang"], "run-1", "s3://dayone/staging", "https://s3.example")
    kubernetes_validate.validate(pod, "1.33.0", strict=True)
    template = runner_pod_template(IMAGE, namespace="bench", service_account="dayone-runner")
    [c], [t] = pod["spec"]["containers"], template["spec"]["containers"]
    assert c["securityContext"] == t["securityContext"] and pod["spec"]["securityContext"] == template["spec"]["securityContext"]
    assert pod["spec"]["volumes"] == template["spec"]["volumes"] and c["volumeMounts"] == t["volumeMounts"]
    assert c["command"] == ["dayone", "step", "short", "--engine", "sglang", "--run-id", "run-1"]
    assert c["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
    assert pod["metadata"]["labels"]["dayone/run-id"] == "run-1"
    assert "dayone/engine" not in pod["metadata"]["labels"]  # an engine's teardown selects by it: not a runner's
    env = {e["name"]: e for e in c["env"]}
    assert env["DAYONE_STAGING"]["value"] == "s3://dayone/staging"
    assert env["DAYONE_S3_ENDPOINT_URL"]["value"] == "https://s3.example"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {"secretKeyRef": {"name": "dayone-s3", "key": "access-key-id"}}
    assert all("value" in e or "valueFrom" in e for e in c["env"])


def test_placed_on_the_engines_node_unless_the_config_places_it():
    [term] = runner_step_pod(_cluster(), "functional", ["vllm"], "run-1", "s3://b/p")["spec"]["affinity"][
        "podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "dayone",
                                                    "dayone/run-id": "run-1", "dayone/engine": "vllm"}
    together = runner_step_pod(_cluster(), "short", ["sglang", "vllm"], "run-1", "s3://b/p")["spec"]["affinity"]
    assert len(together["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]) == 2
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in together["podAffinity"]
    chosen = runner_step_pod(_cluster(node_selector={"pool": "clients"}), "short", ["sglang"], "run-1", "s3://b/p")
    assert chosen["spec"]["nodeSelector"] == {"pool": "clients"} and "affinity" not in chosen["spec"]


def test_an_engines_api_key_reaches_the_pod_from_its_secret_and_is_read_from_the_env(monkeypatch, tmp_path):
    from tasks.engines.access import api_key_env
    from tasks.steps.context import RunContext
    from tasks.state.storage import RunDir

    config = run_config(measure_from="cluster", runner=RUNNER).model_dump(mode="json")
    config["engines"][1]["api_key_secret"] = {"name": "vllm-key", "key": "token"}
    cfg = run_config().model_validate(config)
    pod = runner_step_pod(cfg, "functional", ["vllm"], "run-1", "s3://b/p")
    [key] = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == api_key_env("vllm")]
    assert key["valueFrom"] == {"secretKeyRef": {"name": "vllm-key", "key": "token"}}
    monkeypatch.setenv(api_key_env("vllm"), "dk-from-the-secret")
    ctx = RunContext(cfg, RunDir("run-1", root=tmp_path))  # no cluster access: the pod reads no Secret
    assert ctx.endpoint_access("vllm").headers() == {"Authorization": "Bearer dk-from-the-secret"}


def test_only_measuring_steps_get_runner_pods():
    assert "startup_findings" not in RUNNER_STEPS and {"functional", "short", "prefix_cache"} <= set(RUNNER_STEPS)
    with pytest.raises(ValueError, match="not a measuring step"):
        runner_step_pod(_cluster(), "deploy", ["sglang"], "run-1", "s3://b/p")
    with pytest.raises(ValueError, match="measures one engine"):
        runner_step_pod(_cluster(), "functional", ["sglang", "vllm"], "run-1", "s3://b/p")


@pytest.mark.parametrize(("k8s", "top", "field", "fix"), [
    ({"runner": {"s3_secret": {"name": "s"}}}, {}, "kubernetes.runner.image", "runner image"),
    ({"runner": {"image": IMAGE}}, {}, "kubernetes.runner.s3_secret", "Secret with the S3 keys"),
    ({"runner": {**RUNNER, "cpu": 1.5}}, {}, "kubernetes.runner.cpu", "whole cores"),
    ({"runner": RUNNER}, {"measurement": {"launches": 2}}, "measurement.launches", "launches: 1"),
    ({"runner": RUNNER}, {"target": "local", "engines": [{"name": "a", "dialect": "vllm", "launcher": "sim"}]},
     "kubernetes.measure_from", "target: kubernetes"),
    ({"runner": RUNNER}, {"engines": [{"name": "v", "dialect": "vllm", "image": "example.org/vllm:1",
                                       "api_key_connection": "vllm_key"}]},
     "engines[0].api_key_connection", "api_key_secret"),
])
def test_measure_from_cluster_is_refused_where_runner_pods_cannot_work(k8s, top, field, fix):
    from tasks.config import parse_run_config

    doc = run_config().model_dump(mode="json", exclude={"run_id"})
    doc["kubernetes"].update(measure_from="cluster", **k8s)
    doc.update(top)
    with pytest.raises(ConfigError) as err:
        parse_run_config(doc)
    assert any(f == field and fix in x for f, _, x in err.value.problems), err.value.problems

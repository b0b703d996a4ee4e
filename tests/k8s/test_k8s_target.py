"""KubernetesTarget through the provider's KubernetesHook against a local Kubernetes REST API."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from k8s_helpers import CONN_ID, later, run_config

from dayone_airflow.connections import hook_api_client
from tasks.steps.context import NotAttempted, RunContext
from tasks.steps.engine_steps import startup_finding_rows
from tasks.steps.execution import execute
from tasks.state.storage import RunDir
from tasks.k8s.manifests import render_engine
from tasks.state.tables import TABLES, to_frame
from tasks.engines.readiness import DeployError
from tasks.engines.context import EngineContext, endpoint_for
from tasks.config import parse_run_config
from tasks.targets.kubernetes import ClusterAccess, KubernetesTarget, _without_env_values

NS = "bench"


@pytest.fixture
def target(kube_conn, engine_url):
    return KubernetesTarget(ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: engine_url),
                            poll_interval_s=0.05)


def deploy(target, run_dir, engine="sglang", config=None):
    config = config or run_config()
    spec = config.engine(engine)
    pinned = target.pin(config, spec)
    return config, target.deploy(config, spec, run_dir, pinned)


def test_deploy_creates_exactly_the_rendered_objects(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir)
    posts = [r for r in apiserver.requests if r["method"] == "POST"]
    assert [r["path"] for r in posts] == [
        f"/apis/apps/v1/namespaces/{NS}/deployments",
        f"/api/v1/namespaces/{NS}/services",
    ]
    created = [r["body"] for r in posts]
    stamp = created[0]["metadata"]["annotations"]["dayone/created-at"]
    expected = render_engine(config, config.engine("sglang"), target.pin(config, config.engine("sglang")),
                             dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    assert created == expected
    assert created[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "example.org/sglang@sha256:" + "1" * 64
    assert dep.handle == {
        "conn_id": CONN_ID, "namespace": NS, "deployment": "dayone-sglang-run-1", "service": "dayone-sglang-run-1",
        "selector": "app.kubernetes.io/managed-by=dayone,dayone/run-id=run-1,dayone/engine=sglang",
        "objects": ["Deployment/dayone-sglang-run-1", "Service/dayone-sglang-run-1"],
        "launch_index": 0,  # the run's first start (measurement.launches relaunches count on)
    }
    assert dep.image_digest == "sha256:" + "1" * 64
    # the run keeps what was applied, environment values included (HOME here; secrets: see below)
    applied = run_dir.read_json("k8s/sglang.json")
    assert applied[0]["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "HOME", "value": "/home/dayone"}, {"name": "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "value": "0"}]


def test_the_applied_objects_and_the_pin_keep_env_values_but_withhold_secret_ones(apiserver, target, run_dir):
    """An engine switch set as a variable stays (the start can be repeated); a secret-named value and a
    value from a Secret never reach the run's records."""
    doc = run_config(engines=("vllm",)).model_dump(mode="json")
    doc["engines"][0]["env"] = {"VLLM_USE_DEEP_GEMM": "1", "HF_TOKEN": "hf_plantedplantedplanted01",
                                "ENGINE_LICENSE_KEY": "planted-license-77"}
    config = parse_run_config(doc)
    pinned = target.pin(config, config.engine("vllm"))
    expected = {"ENGINE_LICENSE_KEY": "<redacted>", "HF_TOKEN": "<redacted>", "VLLM_SERVER_DEV_MODE": "1",
                "VLLM_USE_DEEP_GEMM": "1"}
    assert pinned["identity"]["env"] == expected
    objects = render_engine(config, config.engine("vllm"), pinned)
    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "engine-key", "key": "k"}}})
    [recorded] = _without_env_values(objects)[0]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value", e.get("valueFrom")) for e in recorded["env"]} == {
        **expected, "HOME": "/home/dayone", "API_KEY": {"secretKeyRef": {"name": "engine-key", "key": "k"}}}
    target.deploy(config, config.engine("vllm"), run_dir, pinned)
    applied = json.dumps(run_dir.read_json("k8s/vllm.json"))
    assert '"VLLM_USE_DEEP_GEMM", "value": "1"' in applied
    assert "planted" not in applied and "hf_planted" not in json.dumps(pinned)


def test_pin_records_digests_and_the_full_command_line(target):
    config = run_config()
    pinned = target.pin(config, config.engine("vllm"))
    assert pinned["image_digest"] == pinned["platform_digest"] == "sha256:" + "2" * 64
    assert pinned["identity"]["command"][:3] == ["vllm", "serve", "/models/glm"]
    assert pinned["identity"]["env"] == {"VLLM_SERVER_DEV_MODE": "1"}


def test_a_retried_deploy_replaces_the_earlier_objects(apiserver, target, run_dir):
    deploy(target, run_dir)
    apiserver.start_pod(NS, "dayone-sglang-run-1", running=True)
    deploy(target, run_dir)
    assert [d["metadata"]["name"] for d in apiserver.list("deployments", NS)] == ["dayone-sglang-run-1"]
    assert len(apiserver.list("services", NS)) == 1
    assert apiserver.list("pods", NS) == []  # the old pod went with its Deployment


def test_readiness_waits_for_the_rollout_then_for_the_engine(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir)

    def roll_out():
        apiserver.start_pod(NS, dep.handle["deployment"], running=True, ready=True)
        apiserver.set_available(NS, dep.handle["deployment"])

    started = time.monotonic()
    later(0.5, roll_out)
    state = target.wait_ready(config, dep, timeout_s=30)
    assert state.ready and state.stage == "ready"
    assert time.monotonic() - started >= 0.5  # not before the Deployment was available
    polls = [r for r in apiserver.requests if r["path"].endswith("/deployments/dayone-sglang-run-1/status")]
    assert len(polls) >= 2


def test_image_pull_error_fails_fast_with_the_pod_events(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir)
    pod = apiserver.start_pod(NS, dep.handle["deployment"], waiting=("ImagePullBackOff", "Back-off pulling image"))
    apiserver.add_event(NS, pod, "Scheduled", "Successfully assigned bench/pod to h20-node-1", type_="Normal")
    apiserver.add_event(NS, pod, "Failed", 'Failed to pull image "example.org/sglang@sha256:111": manifest unknown')
    started = time.monotonic()
    with pytest.raises(DeployError) as err:
        target.wait_ready(config, dep, timeout_s=600)
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert "ImagePullBackOff" in message and "the image cannot be pulled" in message
    assert 'Warning Failed: Failed to pull image "example.org/sglang@sha256:111": manifest unknown' in message
    assert message.index("Warning Failed") < message.index("Normal Scheduled")  # warnings first


def test_crash_loop_fails_fast_with_the_last_exit(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir)
    apiserver.start_pod(NS, dep.handle["deployment"], waiting=("CrashLoopBackOff", "back-off 40s restarting"),
                        restart_count=3, last_terminated={"exitCode": 137, "reason": "OOMKilled"})
    with pytest.raises(DeployError, match=r"CrashLoopBackOff.*last exit 137 \(OOMKilled\)"):
        target.wait_ready(config, dep, timeout_s=600)


def test_unschedulable_pod_fails_after_its_grace_not_before(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir)
    now = dt.datetime.now(dt.timezone.utc)
    pod = apiserver.start_pod(NS, dep.handle["deployment"], unschedulable_since=now)
    state = target.platform(dep)
    assert state.waiting and not state.failed  # the previous engine may still hold the GPUs
    apiserver.objects[("pods", NS, pod)]["status"]["conditions"][0]["lastTransitionTime"] = (
        (now - dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    apiserver.add_event(NS, pod, "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    with pytest.raises(DeployError, match="unschedulable for 6.. s.*Warning FailedScheduling: 0/3 nodes"):
        target.wait_ready(config, dep, timeout_s=600)


def test_timeout_names_the_last_stage(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir)
    apiserver.start_pod(NS, dep.handle["deployment"], running=True)
    with pytest.raises(DeployError, match=r"not ready after 1 s \(0/1 replicas ready\)"):
        target.wait_ready(config, dep, timeout_s=1)


def test_restart_counts_and_startup_log_findings(apiserver, target, run_dir):
    config, dep = deploy(target, run_dir, engine="vllm", config=run_config(engines=("vllm",)))
    pod = apiserver.start_pod(NS, dep.handle["deployment"], running=True, ready=True, restart_count=0)
    assert target.restart_count(dep) == 0
    apiserver.set_container_state(NS, pod, restartCount=2)
    assert target.restart_count(dep) == 2
    apiserver.set_log(NS, pod, "INFO torch.cuda.OutOfMemoryError: CUDA out of memory\n", previous=True)
    apiserver.set_log(NS, pod, "\n".join([
        "INFO Loading weights took 412.3 seconds",
        "WARNING Using default MoE config. Performance might be sub-optimal!",
        "INFO Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%",
        '{"msg": "a log line that is JSON"}',
    ]))
    text = target.startup_log(dep)
    assert text.index("OutOfMemoryError") < text.index("Using default MoE config")  # crashed run first
    assert '{"msg": "a log line that is JSON"}' in text
    ectx = EngineContext(config, endpoint_for(config, "vllm", dep.base_url, dep.image_digest), run_dir)
    rows = startup_finding_rows(ectx, text)
    assert {(r["finding"], r["severity"]) for r in rows} == {
        ("out_of_memory", "error"), ("missing_tuned_config", "warning"), ("cuda_graph_capture", "info")}
    frame = to_frame("startup_findings", rows)
    assert list(frame.columns) == TABLES["startup_findings"].column_names
    assert set(frame["image_digest"]) == {"sha256:" + "2" * 64}


def test_teardown_after_a_failed_benchmark_deletes_everything_of_the_run(apiserver, kube_conn, engine_url, tmp_path,
                                                                         monkeypatch):
    """Through the pipeline's steps, as the DAG runs them: the benchmark fails, teardown still cleans up."""
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    cluster = ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: "http://127.0.0.1:9")
    config = run_config().model_dump(mode="json", exclude={"run_id"})
    config["engines"][0]["ready_timeout_s"] = 0.5
    other = KubernetesTarget(ClusterAccess(api_client=hook_api_client))
    other_config = run_config(run_id="run-other", engines=("sglang",))
    other.deploy(other_config, other_config.engines[0], RunDir("run-other", root=tmp_path),
                 other.pin(other_config, other_config.engines[0]))
    ctx = RunContext.build(config, "run-1", cluster=cluster)
    execute(ctx, "pin")
    for engine in ("sglang", "vllm"):
        execute(ctx, "deploy", engine)
        apiserver.start_pod(NS, f"dayone-{engine}-run-1", running=True, ready=True)
        apiserver.set_available(NS, f"dayone-{engine}-run-1")
    # the Service address answers nothing: the engine never serves, the benchmark steps fail
    with pytest.raises(DeployError):
        execute(ctx, "wait_ready", "sglang")
    with pytest.raises(NotAttempted):
        execute(ctx, "functional", "sglang")
    assert RunDir("run-1").read_json("state/steps/sglang-wait_ready.json")["status"] == "failed"
    assert RunDir("run-1").read_json("state/steps/sglang-functional.json")["status"] == "not_attempted"
    selector = "dayone/run-id=run-1"
    assert len(apiserver.list("pods", NS, selector)) == 2
    for engine in ("sglang", "vllm"):
        execute(ctx, "teardown", engine)
    for kind in ("deployments", "services", "pods"):
        assert apiserver.list(kind, NS, selector) == [], kind
    # the other run is untouched
    assert [d["metadata"]["name"] for d in apiserver.list("deployments", NS)] == ["dayone-sglang-run-other"]
    assert [r["method"] for r in apiserver.requests if r["path"].startswith(f"/apis/apps/v1/namespaces/{NS}/deployments/dayone-vllm")] == ["DELETE"]


def test_teardown_is_safe_when_nothing_was_deployed(apiserver, target, run_dir):
    assert target.teardown(run_config(), "sglang", run_dir) == []
    assert {r["method"] for r in apiserver.requests} == {"GET"}


def test_cleanup_removes_only_dayone_objects_older_than_the_age(apiserver, target, run_dir):
    config = run_config(cleanup_age_s=3600)
    deploy(target, run_dir, config=config)
    apiserver.start_pod(NS, "dayone-sglang-run-1", running=True)
    # someone else's Deployment in the same namespace, old as well
    foreign = render_engine(config, config.engines[0], target.pin(config, config.engines[0]))[0]
    foreign["metadata"].update(name="not-dayone", labels={"app": "other"})
    foreign["spec"]["template"]["metadata"]["labels"] = foreign["spec"]["selector"]["matchLabels"] = {"app": "other"}
    apiserver.objects[("deployments", NS, "not-dayone")] = foreign
    assert target.cleanup(config) == []  # young: a running benchmark keeps its engine
    aged = KubernetesTarget(ClusterAccess(api_client=hook_api_client), clock=lambda: time.time() + 3700)
    deleted = aged.cleanup(config)
    # its pod went with the Deployment (garbage collection), so only two deletions were needed
    assert sorted(deleted) == ["Deployment/dayone-sglang-run-1", "Service/dayone-sglang-run-1"]
    assert [d["metadata"]["name"] for d in apiserver.list("deployments", NS)] == ["not-dayone"]
    assert apiserver.list("services", NS) == [] and apiserver.list("pods", NS) == []


def test_dry_run_renders_and_checks_everything_and_applies_nothing(apiserver, target, run_dir):
    config = run_config().model_copy(update={"dry_run": True})
    spec = config.engine("vllm")
    dep = target.deploy(config, spec, run_dir, target.pin(config, spec))
    assert apiserver.requests == []  # not even a read
    import yaml

    docs = list(yaml.safe_load_all((run_dir.path / "k8s" / "vllm.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["image"].endswith("@sha256:" + "2" * 64)
    with pytest.raises(DeployError, match="dry run, nothing was deployed"):
        target.wait_ready(config, dep, timeout_s=5)
    assert target.teardown(config, "vllm", run_dir) == []
    assert apiserver.requests == []


def test_dry_run_renders_openwebui_beside_the_engine_where_its_step_runs(apiserver, target, run_dir):
    import yaml

    from tasks.state.documents import OPENWEBUI_PINNED

    config = run_config().model_copy(update={"dry_run": True})
    config = config.model_copy(update={"scenarios": config.scenarios.model_copy(update={
        "openwebui": config.scenarios.openwebui.model_copy(update={"enabled": True})})})
    ref = "ghcr.io/open-webui/open-webui@sha256:" + "4" * 64
    run_dir.write_json(OPENWEBUI_PINNED, {"pinned_ref": ref})  # as the pin step records it
    spec = config.engine("vllm")
    target.deploy(config, spec, run_dir, target.pin(config, spec))
    assert apiserver.requests == []
    docs = list(yaml.safe_load_all((run_dir.path / "k8s" / "vllm.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "Deployment", "Service"]
    [owui] = docs[2]["spec"]["template"]["spec"]["containers"]
    assert owui["image"] == ref
    assert all("value" not in e for e in owui["env"] if e["name"].startswith(("WEBUI_SECRET", "WEBUI_ADMIN_PASS")))

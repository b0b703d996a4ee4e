"""Rendered engine objects: what the GLM-5.3-Flash Day 1 Hands-on report set by hand, and valid for
Kubernetes 1.30 to 1.37."""

from __future__ import annotations

import datetime as dt

import kubernetes_validate
import pytest
import yaml

from tasks import cli
from tasks.config import parse_run_config
from tasks.cli.k8s import render_run
from tasks.k8s.manifests import (ManifestError, engine_argv, label_value, object_name, render_engine,
                                  validate_objects)

DIGEST_SGL = "sha256:" + "1" * 64
DIGEST_VLLM = "sha256:" + "2" * 64
KUBE_VERSIONS = [f"1.{minor}.0" for minor in range(30, 38)]
CREATED = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone.utc)


def seed_config(**k8s):
    """The Day 1 Hands-on report's layout: SGLang and vLLM on non-overlapping 4-GPU slices of one 8-GPU host."""
    return parse_run_config(
        {
            "run_id": "nightly-2026-11-30",
            "target": "kubernetes",
            "model": {"name": "glm-5.3-flash", "path": "/models/GLM-5.3-Flash", "revision": "abc123"},
            "engines": [
                {
                    "name": "sglang", "dialect": "sglang", "image": "lmsysorg/sglang:glm53",
                    "gpus": 4, "node": "h20-node-1", "node_selector": {"dayone/slice": "gpu0-3"},
                    "args": ["--ep-size", "4", "--reasoning-parser", "glm45", "--tool-call-parser", "glm47",
                             "--max-running-requests", "32", "--chunked-prefill-size", "8192"],
                },
                {
                    "name": "vllm", "dialect": "vllm", "image": "vllm/vllm-openai:glm53",
                    "gpus": 4, "node": "h20-node-1", "node_selector": {"dayone/slice": "gpu4-7"},
                    "args": ["--reasoning-parser", "glm45", "--tool-call-parser", "glm47"],
                    "env": {"VLLM_USE_DEEP_GEMM": "1"},
                },
            ],
            "kubernetes": {
                "namespace": "bench",
                "model_volume_claim": "glm-weights",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                **k8s,
            },
        }
    )


def pins():
    return {
        "sglang": {"pinned_ref": f"docker.io/lmsysorg/sglang@{DIGEST_SGL}", "index_digest": "sha256:" + "a" * 64,
                   "platform_digest": DIGEST_SGL},
        "vllm": {"pinned_ref": f"docker.io/vllm/vllm-openai@{DIGEST_VLLM}", "index_digest": None,
                 "platform_digest": DIGEST_VLLM},
    }


def rendered(config=None):
    config = config or seed_config()
    return {e.name: render_engine(config, e, pins()[e.name], CREATED) for e in config.engines}


def _container(objs):
    return objs[0]["spec"]["template"]["spec"]["containers"][0]


def test_image_runs_by_platform_digest_never_by_tag():
    objs = rendered()
    assert _container(objs["sglang"])["image"] == f"docker.io/lmsysorg/sglang@{DIGEST_SGL}"
    assert _container(objs["vllm"])["image"] == f"docker.io/vllm/vllm-openai@{DIGEST_VLLM}"
    config = seed_config()
    with pytest.raises(ManifestError, match=r"engines\[sglang\].image: 'lmsysorg/sglang:glm53' is not pinned"):
        render_engine(config, config.engines[0], {"pinned_ref": "lmsysorg/sglang:glm53"})


def test_gpu_slice_is_limits_equal_requests_placed_on_its_node():
    for name, slice_ in (("sglang", "gpu0-3"), ("vllm", "gpu4-7")):
        objs = rendered()[name]
        c = _container(objs)
        assert c["resources"] == {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}
        pod = objs[0]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"dayone/slice": slice_, "kubernetes.io/hostname": "h20-node-1"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_shm_is_memory_and_model_volume_is_read_only():
    pod = rendered()["sglang"][0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "glm-weights", "readOnly": True}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["dshm"]["mountPath"] == "/dev/shm"
    assert mounts["model"] == {"name": "model", "mountPath": "/models", "readOnly": True}


@pytest.mark.parametrize("startup_timeout_s", [1800, 2700])
def test_probes_cover_the_cold_start_and_liveness_waits_for_startup(startup_timeout_s):
    objs = rendered(seed_config(startup_timeout_s=startup_timeout_s))["vllm"]
    c = _container(objs)
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= startup_timeout_s >= 1800
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    # vLLM's /health passes before the model serves: traffic waits for the model list
    assert c["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    # liveness exists (Kubernetes starts it only after the startup probe succeeded) and tolerates long prefills
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 600
    assert objs[0]["spec"]["progressDeadlineSeconds"] >= startup_timeout_s + 600
    assert objs[0]["spec"]["strategy"] == {"type": "Recreate"}


def test_labels_carry_run_and_engine_and_the_service_selects_the_pod():
    deployment, service = rendered()["sglang"]
    labels = deployment["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "dayone"
    assert labels["dayone/run-id"] == "nightly-2026-11-30"
    assert labels["dayone/engine"] == "sglang"
    assert deployment["metadata"]["annotations"]["dayone/created-at"] == "2026-11-30T08:00:00Z"
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert set(service["spec"]["selector"].items()) <= set(labels.items())
    assert service["spec"]["ports"] == [{"name": "http", "port": 30000, "targetPort": "http", "protocol": "TCP"}]
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "dayone-sglang-nightly-2026-11-30"
    assert deployment["metadata"]["namespace"] == "bench"


def test_security_context_is_tight():
    pod = rendered()["sglang"][0]["spec"]["template"]["spec"]
    c = pod["containers"][0]["securityContext"]
    assert c["allowPrivilegeEscalation"] is False and c["privileged"] is False
    assert c["capabilities"] == {"drop": ["ALL"]}
    assert c["runAsNonRoot"] is True and c["runAsUser"] == 1000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["hostNetwork"] is False and pod["hostPID"] is False and pod["hostIPC"] is False
    assert pod["serviceAccountName"] == "dayone-engine"
    # an image that must run as its own user: no UID forced, and no false runAsNonRoot claim
    pod = rendered(seed_config(run_as_user=None))["sglang"][0]["spec"]["template"]["spec"]
    assert "runAsUser" not in pod["securityContext"] and "runAsNonRoot" not in pod["containers"][0]["securityContext"]


def test_sglang_command_comes_from_its_adapter():
    c = _container(rendered()["sglang"])
    cmd = engine_argv(c)
    assert cmd[:3] == ["python3", "-m", "sglang.launch_server"]
    pairs = dict(zip(cmd[3::1], cmd[4::1]))
    assert pairs["--host"] == "0.0.0.0" and pairs["--port"] == "30000" and pairs["--tp-size"] == "4"
    assert pairs["--model-path"] == "/models/GLM-5.3-Flash" and pairs["--served-model-name"] == "glm-5.3-flash"
    for flag, value in (("--ep-size", "4"), ("--reasoning-parser", "glm45"), ("--tool-call-parser", "glm47"),
                        ("--max-running-requests", "32"), ("--chunked-prefill-size", "8192")):
        assert pairs[flag] == value
    assert "--enable-metrics" in cmd and "--enable-cache-report" in cmd
    assert c["ports"] == [{"name": "http", "containerPort": 30000, "protocol": "TCP"}]


def test_vllm_command_and_env_come_from_its_adapter():
    c = _container(rendered()["vllm"])
    cmd = engine_argv(c)
    assert cmd[:3] == ["vllm", "serve", "/models/GLM-5.3-Flash"]
    pairs = dict(zip(cmd, cmd[1:]))
    assert pairs["--tensor-parallel-size"] == "4" and pairs["--max-model-len"] == "1048576"
    assert pairs["--tool-call-parser"] == "glm47" and pairs["--reasoning-parser"] == "glm45"
    assert "--enable-prefix-caching" in cmd and "--enable-auto-tool-choice" in cmd
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_USE_DEEP_GEMM"] == "1" and env["HOME"] == "/home/dayone"


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_manifest_validates_strictly(kube_version):
    known = {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}
    assert "1." + kube_version.split(".")[1] in known, f"kubernetes-validate has no schema for {kube_version}"
    configs = [seed_config(), seed_config(run_as_user=None, model_volume_claim=None, tolerations=[])]
    for config in configs:
        for objs in render_run(config, pins(), CREATED, kube_version).values():
            for obj in objs:
                assert kubernetes_validate.validate(obj, kube_version, strict=True) == kube_version.rsplit(".", 1)[0]


def test_schema_validation_catches_a_bad_manifest():
    deployment, _ = rendered()["sglang"]
    _container([deployment])["securityContext"]["dropCapabilities"] = ["ALL"]  # not a field
    with pytest.raises(ManifestError, match="invalid for Kubernetes"):
        validate_objects([deployment], "1.33.0")


def test_names_and_labels_stay_valid_for_airflow_run_ids():
    run_id = "manual__2026-11-30T07-40-34.058616-00-00" + "-x" * 30
    name = object_name(run_id, "vllm-preview")
    assert len(name) <= 63 and name[0].isalpha() and name == name.lower()
    assert object_name(run_id, "vllm-preview") != object_name(run_id + "y", "vllm-preview")
    value = label_value(run_id)
    assert len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()
    assert label_value("Manual_run.1") == "Manual_run.1"


def test_render_cli_writes_valid_yaml_offline(tmp_path):
    cfg = seed_config().model_dump(mode="json")
    cfg["engines"][0]["digest"] = DIGEST_SGL
    cfg["engines"][1]["image"] = f"vllm/vllm-openai@{DIGEST_VLLM}"
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli.main(["render", "--config", str(path), "--out", str(tmp_path / "out"), "--offline"]) == 0
    docs = list(yaml.safe_load_all((tmp_path / "out" / "vllm.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["image"] == f"docker.io/vllm/vllm-openai@{DIGEST_VLLM}"
    sgl = list(yaml.safe_load_all((tmp_path / "out" / "sglang.yaml").read_text()))
    assert sgl[0]["spec"]["template"]["spec"]["containers"][0]["image"] == f"docker.io/lmsysorg/sglang@{DIGEST_SGL}"


def test_render_cli_offline_refuses_a_bare_tag(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(seed_config().model_dump(mode="json")))
    assert cli.main(["render", "--config", str(path), "--out", str(tmp_path / "out"), "--offline"]) == 1
    assert "has no digest and --offline forbids pinning" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

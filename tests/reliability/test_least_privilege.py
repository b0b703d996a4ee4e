"""Least privilege in what DayOne applies to a cluster, checked on the rendered objects.

Engine pods: not privileged, no host network/PID/IPC, no host paths or ports, every capability
dropped and none added, no privilege escalation, non-root, RuntimeDefault seccomp, and a service
account without an API token (so it has no API rights, whatever RBAC says); nothing DayOne renders
grants rights (no Role or binding). The runner pod (KubernetesExecutor's pod template): read-only
root filesystem, non-root, no token.
"""

from __future__ import annotations

import pytest

from tasks.config import parse_run_config

DIGEST = "sha256:" + "4" * 64
ENGINE_KINDS = {"Deployment", "Service"}


def _config(**k8s):
    return parse_run_config({
        "run_id": "sec-run", "target": "kubernetes",
        "model": {"name": "m", "path": "/models/m"},
        "engines": [{"name": d, "dialect": d, "image": f"example.org/{d}:day1", "digest": DIGEST, "gpus": 2,
                     "env": {"HF_TOKEN": "planted-token-value"}} for d in ("sglang", "vllm")],
        "kubernetes": {"namespace": "bench", **k8s},
    })


def _rendered(config):
    from tasks.k8s.images import pinned_from_config
    from tasks.k8s.manifests import render_engine

    return {e.name: render_engine(config, e, pinned_from_config(e)) for e in config.engines}


def _pod_specs(objects):
    return [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"]


@pytest.mark.parametrize("uid", [1000, 4242])
def test_engine_pods_are_locked_down(uid):
    config = _config(run_as_user=uid)
    for engine, objects in _rendered(config).items():
        assert {o["kind"] for o in objects} <= ENGINE_KINDS, engine  # no Role, RoleBinding or ServiceAccount grants
        [spec] = _pod_specs(objects)
        assert spec["serviceAccountName"] == config.kubernetes.service_account
        assert spec["automountServiceAccountToken"] is False
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            assert spec.get(flag, False) is False, (engine, flag)
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == uid
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], engine
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False, (engine, c["name"])
            assert sc["capabilities"].get("drop") == ["ALL"] and not sc["capabilities"].get("add"), sc
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == uid
            assert not [p for p in c.get("ports", []) if p.get("hostPort")], c["ports"]


def test_engine_service_is_cluster_internal():
    for objects in _rendered(_config()).values():
        [svc] = [o for o in objects if o["kind"] == "Service"]
        assert svc["spec"].get("type", "ClusterIP") == "ClusterIP"
        assert not svc["spec"].get("externalIPs")


def test_root_engines_need_an_explicit_opt_in():
    assert _config().kubernetes.run_as_user == 1000  # the default is non-root
    [spec] = _pod_specs(_rendered(_config(run_as_user=0))["sglang"])
    assert spec["securityContext"]["runAsNonRoot"] is False  # said out loud, never implied
    assert spec["containers"][0]["securityContext"]["privileged"] is False


def test_the_applied_objects_kept_in_the_run_never_hold_env_values():
    from tasks.targets.kubernetes import _without_env_values

    for objects in _rendered(_config()).values():
        kept = _without_env_values(objects)
        assert "planted-token-value" not in repr(kept)


def test_runner_pod_has_a_read_only_root_and_runs_as_non_root():
    from tasks.k8s.manifests import runner_pod_template

    spec = runner_pod_template("registry.example.org/dayone-runner@" + DIGEST, namespace="bench")["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec.get("hostNetwork", False) is False
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    [container] = [c for c in spec["containers"] if c["name"] == "base"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert not sc.get("privileged")
    # writable places are emptyDirs, nothing from the host
    assert all("emptyDir" in v for v in spec["volumes"]), spec["volumes"]

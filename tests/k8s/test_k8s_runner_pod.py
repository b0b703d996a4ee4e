"""The runner pod template: the pod Airflow's KubernetesExecutor starts every DayOne task from.

Checked on its own (schema-valid, locked down), through `dayone render --runner-pod-template`,
against the runner image it runs, and merged by the executor's own code with a task's command.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tasks import cli
from tasks.k8s.manifests import LABEL_MANAGED_BY, MANAGED_BY, runner_pod_template

IMAGE = "registry.example.org/dayone-runner@sha256:" + "3" * 64
DOCKERFILE = Path(__file__).resolve().parents[2] / "docker" / "Dockerfile"


def _base(pod):
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "base"]
    return container


@pytest.mark.parametrize("kube_version", ["1.30.0", "1.33.0", "1.37.0"])
def test_runner_pod_template_is_valid_and_locked_down(kube_version):
    pod = runner_pod_template(IMAGE, namespace="bench")
    kubernetes_validate.validate(pod, kube_version, strict=True)
    assert (pod["apiVersion"], pod["kind"], pod["metadata"]["namespace"]) == ("v1", "Pod", "bench")
    assert [c["name"] for c in pod["spec"]["containers"]] == ["base"]  # the executor's container name
    container = _base(pod)
    assert container["image"] == IMAGE
    assert "args" not in container  # the executor sets the task's command as args
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["privileged"] is False
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "dayone-runner"
    # writable places are emptyDirs, nothing from the host
    assert spec["volumes"] == [{"name": "tmp", "emptyDir": {}}, {"name": "work", "emptyDir": {}}]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp", "/work"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"DAYONE_WORKDIR": "/work/runs", "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/matplotlib"}
    assert pod["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY == "dayone"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "dayone-runner"


def test_template_runs_as_the_image_user_and_writes_where_the_image_does():
    text = DOCKERFILE.read_text()
    [user] = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert runner_pod_template(IMAGE)["spec"]["securityContext"]["runAsUser"] == int(user.split(":")[0])
    for e in _base(runner_pod_template(IMAGE))["env"]:
        assert f"{e['name']}={e['value']}" in text


def test_render_cli_writes_the_runner_pod_template(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["render", "--runner-pod-template", IMAGE, "--out", str(out), "--kube-version", "1.30.0"]) == 0
    path = out / "runner-pod-template.yaml"
    assert capsys.readouterr().out.strip() == str(path)
    assert yaml.safe_load(path.read_text()) == runner_pod_template(IMAGE)
    assert sorted(p.name for p in out.iterdir()) == ["runner-pod-template.yaml"]  # no pinned.json: nothing pinned


def test_render_cli_reports_an_unknown_kube_version(tmp_path, capsys):
    args = ["render", "--runner-pod-template", IMAGE, "--out", str(tmp_path / "out"), "--kube-version", "0.1.0"]
    assert cli.main(args) == 1
    assert "Kubernetes 0.1.0: kubernetes-validate has no schema for it" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert cli.main([*args, "--no-validate"]) == 0  # the schema check is skipped, as for engine manifests


def test_render_takes_a_config_or_a_runner_image_not_both(tmp_path):
    for args in ([], ["--config", "run.yaml", "--runner-pod-template", IMAGE]):
        with pytest.raises(SystemExit) as exc:
            cli.main(["render", *args, "--out", str(tmp_path)])
        assert exc.value.code == 2


def test_the_executor_runs_the_task_command_in_the_locked_down_pod(tmp_path):
    """The executor's own merge: its task command runs as is (not behind the image's `dayone`).

    kube_image is None: [kubernetes_executor] worker_container_repository/tag left unset, so the
    template's image (by digest) is the one that runs.
    """
    from kubernetes.client import ApiClient

    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    assert cli.main(["render", "--runner-pod-template", IMAGE, "--out", str(tmp_path)]) == 0
    base_pod = PodGenerator.deserialize_model_file(str(tmp_path / "runner-pod-template.yaml"))
    task_command = ["python", "-m", "airflow.sdk.execution_time.execute_workload", "--json-string", "{}"]
    pod = PodGenerator.construct_pod(
        dag_id="dayone_eval", task_id="bench_short", pod_id="dayone-eval-bench-short", try_number=1,
        kube_image=None, date=None, args=task_command, pod_override_object=None,
        base_worker_pod=base_pod, namespace="bench", scheduler_job_id="1", run_id="manual__1",
    )
    doc = ApiClient().sanitize_for_serialization(pod)
    kubernetes_validate.validate(doc, "1.33.0", strict=True)
    container = _base(doc)
    assert container["command"] + container["args"] == ["/usr/bin/env", *task_command]
    assert container["image"] == IMAGE
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert doc["spec"]["securityContext"]["runAsNonRoot"] is True
    assert doc["spec"]["automountServiceAccountToken"] is False
    assert doc["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY

"""docs/helm/*.yaml, the Helm chart values docs/deploy.md gives, against what DayOne and Airflow expect.

What the chart's own values schema checks (the keys and their types) was checked by hand when they were
written (docs/deploy.md says against which chart); here, what only DayOne's code knows: every Airflow container
and task pod gets the staging prefix and the connections, credentials come from a Secret, the Airflow version
is the one DayOne pins, every `config:` option exists in the installed Airflow and its providers, and the
runner pod template is a valid Pod that keeps every lock-down of `dayone render --runner-pod-template`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES = sorted((REPO / "docs" / "helm").glob("*.yaml"))
BASES = {"celery.yaml": "CeleryExecutor", "kubernetes.yaml": "KubernetesExecutor"}
OVERLAYS = {"kubernetes-runner.yaml": "kubernetes.yaml"}  # applied over its base: -f base -f overlay
RELEASE = "dayone"


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "docs" / "helm" / name).read_text())


def _task_pod(values: dict[str, Any]) -> dict[str, Any]:
    """The podTemplate as the chart renders it (its only template expression here is the release name)."""
    return yaml.safe_load(values["podTemplate"].replace("{{ .Release.Name }}", RELEASE))


def _pinned_airflow() -> str:
    pyproject = (REPO / "pyproject.toml").read_text()
    return re.search(r'"apache-airflow==([^"]+)"', pyproject).group(1)


def test_every_values_file_is_a_base_or_an_overlay_of_one():
    assert {p.name for p in VALUES} == set(BASES) | set(OVERLAYS)
    for name, executor in BASES.items():
        values = _load(name)
        assert values["executor"] == executor
        assert values["airflowVersion"] == _pinned_airflow(), name


@pytest.mark.parametrize("name", list(BASES))
def test_every_airflow_container_gets_the_staging_prefix_and_the_connections_from_a_secret(name):
    from tasks.state.object_store import STAGING_ENV, parse_staging

    values = _load(name)
    env = {e["name"]: e["value"] for e in values["env"]}
    bucket, prefix = parse_staging(env[STAGING_ENV])
    assert bucket and prefix
    from_secrets = {s["envName"]: s for s in values["secret"]}
    assert from_secrets["AIRFLOW_CONN_DAYONE_S3"]["secretKey"], from_secrets
    assert "AIRFLOW_CONN_DAYONE_S3" not in env, "credentials in plain values"
    assert '"password"' not in yaml.safe_dump(values) and '"login"' not in yaml.safe_dump(values)


def test_every_config_option_exists_in_the_installed_airflow():
    from airflow.configuration import conf

    conf.load_providers_configuration()
    for name in [*BASES, *OVERLAYS]:
        for section, options in (_load(name).get("config") or {}).items():
            for option in options:
                assert conf.has_option(section, option), f"{name}: config.{section}.{option} is no Airflow option"


def test_the_runner_task_pod_is_a_valid_pod_that_keeps_every_lock_down_of_the_rendered_template():
    import kubernetes_validate

    from tasks.k8s.manifests import EXECUTOR_CONTAINER, runner_pod_template

    overlay = _load("kubernetes-runner.yaml")
    values = {**_load(OVERLAYS["kubernetes-runner.yaml"]), **overlay}
    pod = _task_pod(values)
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)

    rendered = runner_pod_template("registry.example.org/dayone-runner:0.1.0")["spec"]
    spec = pod["spec"]
    for key in ("securityContext", "automountServiceAccountToken", "enableServiceLinks", "hostNetwork", "hostPID",
                "hostIPC", "restartPolicy", "serviceAccountName"):
        assert spec[key] == rendered[key], key
    (want,) = rendered["containers"]
    (base,) = spec["containers"]
    assert base["name"] == EXECUTOR_CONTAINER  # the executor puts the task's command there
    image = overlay["config"]["kubernetes_executor"]  # the executor sets the container's image from these
    assert base["image"] == f"{image['worker_container_repository']}:{image['worker_container_tag']}"
    for key in ("command", "securityContext", "imagePullPolicy"):
        assert base[key] == want[key], key
    env = {e["name"]: e for e in base["env"]}
    for e in want["env"]:
        assert env[e["name"]] == e, e["name"]
    mounts = {m["name"]: m["mountPath"] for m in base["volumeMounts"]}
    assert all(mounts[m["name"]] == m["mountPath"] for m in want["volumeMounts"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert all(volumes[v["name"]] == v for v in rendered["volumes"])

    # what a task pod needs beyond the rendered template: the chart's config, staging and connections
    assert volumes["airflow-config"]["configMap"]["name"] == f"{RELEASE}-config"
    assert env["AIRFLOW_CONFIG"]["value"].startswith(mounts["airflow-config"] + "/")
    assert env["DAYONE_STAGING"]["value"] == {e["name"]: e["value"] for e in values["env"]}["DAYONE_STAGING"]
    for conn in ("AIRFLOW_CONN_DAYONE_S3", "AIRFLOW_CONN_KUBERNETES_DEFAULT"):
        assert "secretKeyRef" in env[conn]["valueFrom"], conn

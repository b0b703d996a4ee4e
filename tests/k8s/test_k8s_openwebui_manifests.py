"""OpenWebUI's objects beside an engine: valid for the official Kubernetes schema, a locked-down pod, keys only
by reference, and the offline settings of the local process (one function for both)."""

from __future__ import annotations

import kubernetes_validate
import pytest
from test_k8s_manifests import KUBE_VERSIONS, seed_config

from tasks.k8s.manifests import ManifestError, validate_objects
from tasks.k8s.openwebui import SECRET_KEYS, WRITABLE, openwebui_selector, render_openwebui, render_secret
from tasks.config.openwebui import offline_settings
from tasks.openwebui.server import offline_env

IMAGE = "ghcr.io/open-webui/open-webui@sha256:" + "3" * 64
SECRET_VALUES = {"WEBUI_SECRET_KEY": "planted-session-key-0123", "WEBUI_ADMIN_PASSWORD": "planted-admin-pass-4567",
                 "OPENAI_API_KEYS": "planted-engine-key-89ab"}


SECRET_NAME = "dayone-vllm-openwebui-nightly-2026-11-30-x7k2p"  # as the API server generated it
SERVICE_UID = "4f1c2e9a-0d3b-4c55-9a1e-5b7d8c9e0f12"


def objects():
    """[Secret, Deployment, Service] as OpenWebUI's step makes them: the Secret owned by the Service as the
    API server made it, the Deployment reading the Secret by the name the API server gave it."""
    config = seed_config()
    dep, svc = render_openwebui(config, "vllm", IMAGE, SECRET_NAME)
    made = {**svc, "metadata": {**svc["metadata"], "uid": SERVICE_UID}}
    return [render_secret(config, "vllm", SECRET_VALUES, owner=made), dep, svc]


def _pod(objs):
    return objs[1]["spec"]["template"]["spec"]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_openwebuis_objects_validate_strictly(kube_version):
    for obj in objects():
        assert kubernetes_validate.validate(obj, kube_version, strict=True) == kube_version.rsplit(".", 1)[0]


def test_the_pod_is_locked_down_with_resources_and_writes_only_to_empty_dirs():
    pod = _pod(objects())
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0 and sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False and pod["hostNetwork"] is False
    assert {v["name"]: v for v in pod["volumes"]} == {n: {"name": n, "emptyDir": {}} for n in WRITABLE}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["DATA_DIR"] == WRITABLE["data"] and env["STATIC_DIR"] == WRITABLE["static"]
    assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["image"] == IMAGE


def test_keys_reach_the_pod_only_by_reference():
    objs = objects()
    [c] = _pod(objs)["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    assert refs == {var: {"name": SECRET_NAME, "key": key} for var, key in SECRET_KEYS.items()}
    assert set(objs[0]["data"]) == set(SECRET_KEYS.values())
    spec = str(objs[1:])
    assert not any(value in spec for value in SECRET_VALUES.values())


def test_the_secret_has_a_generated_name_and_goes_with_its_service():
    """Owned by the Service, the garbage collector deletes it with the Service: the worker's Role needs no
    list, read or delete of Secrets (tasks/k8s/rbac.py); a generated name is never an earlier try's."""
    secret, _, svc = objects()
    assert "name" not in secret["metadata"] and secret["metadata"]["generateName"] == svc["metadata"]["name"] + "-"
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service",
                                                      "name": svc["metadata"]["name"], "uid": SERVICE_UID}]


def test_the_pod_and_the_local_process_share_the_offline_settings():
    [c] = _pod(objects())["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    engine = "http://dayone-vllm-nightly-2026-11-30.bench.svc.cluster.local:8000/v1"  # the engine's Service
    shared = offline_settings(engine)
    assert {k: env[k] for k in shared} == shared
    local = offline_env(WRITABLE["data"], engine, None, "k")  # type: ignore[arg-type]
    assert {k: local[k] for k in shared} == shared
    assert "FROM_INIT_PY" not in env  # the image keeps its front end where OpenWebUI looks by default


def test_the_service_selects_openwebuis_pod_and_not_the_engines():
    [secret, dep, svc] = objects()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert "dayone/engine" not in labels  # the engine's Service and rollout select by that label
    for obj in (secret, dep, svc):
        assert all(obj["metadata"]["labels"].get(k) == v for k, v in
                   (t.split("=") for t in openwebui_selector("nightly-2026-11-30", "vllm").split(",")))


def test_an_image_not_pinned_to_a_digest_is_refused_naming_the_field():
    with pytest.raises(ManifestError, match=r"scenarios\.openwebui\.image: .* not pinned to a digest"):
        render_openwebui(seed_config(), "vllm", "ghcr.io/open-webui/open-webui:v0.12.4")


def test_schema_validation_catches_a_bad_openwebui_manifest():
    dep = objects()[1]
    dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(ManifestError, match="Deployment/"):
        validate_objects([dep], "1.33.0")


def test_an_engine_key_in_a_secret_is_read_from_that_secret_not_copied():
    doc = seed_config().model_dump(mode="json", exclude_unset=True)
    doc["engines"][1]["api_key_secret"] = {"name": "vllm-key", "key": "api-key"}
    from tasks.config import parse_run_config

    [dep, _] = render_openwebui(parse_run_config(doc), "vllm", IMAGE)
    [c] = dep["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    assert refs["OPENAI_API_KEYS"] == {"name": "vllm-key", "key": "api-key"}
    assert refs["WEBUI_ADMIN_PASSWORD"]["name"] == dep["metadata"]["name"]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS[::3])
def test_the_pod_trusts_the_engine_as_every_other_path_does(kube_version):
    """The engine's CA bundle (tls_ca_bundle, read where DayOne runs) travels in OpenWebUI's Secret, is mounted
    as a file and named by AIOHTTP_CLIENT_SESSION_SSL, and the pod reaches the engine over https where DayOne
    does; with tls_verify false OpenWebUI checks no certificate either."""
    from tasks.config import parse_run_config
    from tasks.k8s.openwebui import CA_DIR, CA_FILE, CA_KEY, engine_v1_url

    pem = "-----BEGIN CERTIFICATE-----\nMIIB...internal CA...\n-----END CERTIFICATE-----\n"
    doc = seed_config().model_dump(mode="json", exclude_unset=True)
    doc["engines"][1]["tls_ca_bundle"] = "/etc/dayone/internal-ca.pem"
    config = parse_run_config(doc)
    dep, svc = render_openwebui(config, "vllm", IMAGE, SECRET_NAME, engine_v1_url(config, "vllm", "https"))
    secret = render_secret(config, "vllm", SECRET_VALUES, {**svc, "metadata": {**svc["metadata"], "uid": SERVICE_UID}},
                           ca_pem=pem)
    for obj in (secret, dep):
        kubernetes_validate.validate(obj, kube_version, strict=True)
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["AIOHTTP_CLIENT_SESSION_SSL"] == f"{CA_DIR}/{CA_FILE}"
    assert env["OPENAI_API_BASE_URLS"] == "https://dayone-vllm-nightly-2026-11-30.bench.svc.cluster.local:8000/v1"
    [volume] = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": SECRET_NAME, "items": [{"key": CA_KEY, "path": CA_FILE}]}
    assert {"name": volume["name"], "mountPath": CA_DIR, "readOnly": True} in c["volumeMounts"]
    assert __import__("base64").b64decode(secret["data"][CA_KEY]).decode() == pem

    doc["engines"][1].pop("tls_ca_bundle")
    doc["engines"][1]["tls_verify"] = False
    [dep, _] = render_openwebui(parse_run_config(doc), "vllm", IMAGE, SECRET_NAME)
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["AIOHTTP_CLIENT_SESSION_SSL"] == "False" and not [v for v in pod["volumes"] if "secret" in v]

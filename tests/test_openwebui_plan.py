"""A run with the openwebui step and no OpenWebUI environment fails at plan, before any deploy, naming
the field and the fix."""

from __future__ import annotations

import pytest

CONFIG = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim", "dialect": "sglang", "launcher": "sim"}],
    "request_timeout_s": 30,
}


def test_a_missing_openwebui_environment_fails_the_plan_naming_field_and_fix(tmp_path, monkeypatch):
    from tasks.openwebui.server import OpenWebUIError
    from tasks.steps.context import RunContext
    from tasks.steps.execution import execute

    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    missing = str(tmp_path / "no-openwebui-here")
    scenarios = {"openwebui": {"enabled": True, "venv": missing}, "long_context": {"enabled": False},
                 "boundary": {"enabled": False}}
    ctx = RunContext.build({**CONFIG, "scenarios": scenarios}, "owui-plan")
    with pytest.raises(OpenWebUIError) as failed:
        execute(ctx, "plan")
    assert "scenarios.openwebui.venv" in str(failed.value) and "make openwebui-venv" in str(failed.value)
    assert ctx.run_dir.read_json("manifest.json") is None  # nothing planned, so nothing deploys


def test_a_bad_openwebui_image_reference_is_refused_naming_the_field_and_fix():
    from tasks.config import ConfigError, parse_run_config

    with pytest.raises(ConfigError) as refused:
        parse_run_config({**CONFIG, "scenarios": {"openwebui": {"enabled": True, "image": "open webui:latest!"}}})
    assert "scenarios.openwebui.image" in str(refused.value) and "Fix: use NAME[:TAG]" in str(refused.value)


def test_on_kubernetes_the_plan_needs_no_local_openwebui_environment(tmp_path, monkeypatch):
    """There OpenWebUI runs from its image beside the engine (tests/k8s/test_k8s_openwebui.py)."""
    from tasks.steps.context import RunContext
    from tasks.steps.execution import execute

    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    config = {"target": "kubernetes", "model": {"name": "glm", "path": "/models/glm"},
              "engines": [{"name": "sglang", "dialect": "sglang", "image": "example.org/sglang:day1", "gpus": 1}],
              "scenarios": {"openwebui": {"enabled": True, "venv": str(tmp_path / "no-openwebui-here")}}}
    ctx = RunContext.build(config, "owui-plan-k8s")
    execute(ctx, "plan")
    assert ctx.run_dir.read_json("manifest.json")["scenarios"]["openwebui"]["image"].startswith(
        "ghcr.io/open-webui/open-webui:v")

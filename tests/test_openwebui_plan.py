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
    from tasks.run import RunContext
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

"""`dayone step NAME [--engine E]`: --engine given where it does not belong, or missing where it does,
is a clear usage error (exit 2) naming --engine and the fix, not a raw TypeError."""

from __future__ import annotations

import json

import pytest

from tasks.cli import main

CONFIG = {"engines": [{"name": "alpha", "dialect": "sglang"}, {"name": "beta", "dialect": "vllm"}]}


@pytest.fixture()
def config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    path = tmp_path / "run.json"
    path.write_text(json.dumps(CONFIG))
    return path


def _step(config_file, *argv):
    return main(["step", *argv, "--config", str(config_file), "--run-id", "engine-option"])


@pytest.mark.parametrize("step", ["plan", "pin", "validate", "archive", "report"])
def test_a_run_level_step_with_engine_names_the_option_and_the_fix(config_file, capsys, tmp_path, step):
    assert _step(config_file, step, "--engine", "alpha") == 2
    err = capsys.readouterr().err
    assert f"dayone step {step}: {step} is a run-level step and takes no --engine: drop --engine alpha" in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists(), "the step ran before the usage error"


@pytest.mark.parametrize("step", ["deploy", "short", "teardown"])
def test_a_per_engine_step_without_engine_asks_for_it(config_file, capsys, step):
    assert _step(config_file, step) == 2
    assert "give --engine NAME (the config's engines: alpha, beta)" in capsys.readouterr().err


def test_an_engine_not_in_the_config_is_named(config_file, capsys):
    assert _step(config_file, "short", "--engine", "gamma") == 2
    assert "--engine gamma is not an engine of the config (its engines: alpha, beta)" in capsys.readouterr().err


def test_plan_without_engine_still_runs(config_file, capsys, tmp_path):
    assert _step(config_file, "plan") == 0
    assert json.loads(capsys.readouterr().out)["data"]["engines"] == ["alpha", "beta"]
    assert (tmp_path / "runs" / "engine-option" / "manifest.json").exists()
    # a step run from the command line (as in a pod) records its outcome as a DAG task does
    outcome = json.loads((tmp_path / "runs" / "engine-option" / "state" / "steps" / "plan.json").read_text())
    assert outcome["status"] == "ok" and outcome["step"] == "plan"


def test_a_step_not_attempted_exits_99_and_records_why(config_file, capsys, tmp_path):
    assert _step(config_file, "short", "--engine", "alpha") == 99  # the runner pod's skip code
    assert "not attempted: engine alpha: not ready" in capsys.readouterr().err
    outcome = json.loads((tmp_path / "runs" / "engine-option" / "state" / "steps" / "alpha-short.json").read_text())
    assert outcome["status"] == "not_attempted"


def test_a_failed_step_exits_non_zero_and_records_the_error(config_file, tmp_path):
    with pytest.raises(Exception, match="not pinned"):
        _step(config_file, "deploy", "--engine", "alpha")
    outcome = json.loads((tmp_path / "runs" / "engine-option" / "state" / "steps" / "alpha-deploy.json").read_text())
    assert outcome["status"] == "failed" and "not pinned" in outcome["detail"]

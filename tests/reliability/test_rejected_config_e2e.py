"""A config the trigger form accepts but the plan rejects (a cross-field rule) must fail the run,
not end green with every task skipped, and nothing may be deployed."""

from __future__ import annotations

from rel_helpers import run_eval, s3_env

from tasks.steps.execution import verdict
from tasks.steps.registry import required_run_steps

# Two engines with one name: valid for the form's JSON schema, rejected by parse_run_config.
CONF = {"engines": [{"name": "twin", "dialect": "sglang"}, {"name": "twin", "dialect": "vllm"}]}


def test_a_config_rejected_by_the_plan_fails_the_run_before_any_deploy(eval_dag, planted_s3, tmp_path):
    run = run_eval(eval_dag, CONF, tmp_path / "runs", s3_env(planted_s3))
    assert str(run.run.state).endswith("failed"), run.run.state
    plan = run.outcome("plan")
    assert plan["status"] == "failed" and "engines" in plan["detail"] and "distinct" in plan["detail"]
    # plan has a retry for a lost try, none for a rejected config: the same config is rejected every time
    plan_ti = next(ti for ti in run.run.get_task_instances() if ti.task_id == "plan")
    assert str(plan_ti.state).endswith("failed") and plan_ti.try_number == 1, (plan_ti.state, plan_ti.try_number)
    assert not list((tmp_path / "runs").glob("*/deployments/*.json")), "an engine was deployed on bad input"
    # the verdict names the rejection and what never ran, and claims no validation that never happened
    problems = verdict(run.run_dir, required_run_steps())
    assert any(p.startswith("run/plan: ConfigError") for p in problems), problems
    assert any(p.startswith("run/validate: not attempted") for p in problems), problems
    assert not any("failed validation" in p or "quarantine" in p for p in problems), problems

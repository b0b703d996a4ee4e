"""A measurement is retried only after a try that left no outcome (its worker was killed): a try that
failed recorded its failure, and measuring again would replace its rows, the evidence."""

from __future__ import annotations

import pytest

CONFIG = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim", "dialect": "sglang", "launcher": "sim"}],
    "scenarios": {"functional": {"enabled": False}, "warmup": False,
                  "short": {"input_tokens": 16, "output_tokens": 8, "concurrency": [2], "rounds": 1,
                            "requests_per_round": 4},
                  "prefill": {"enabled": False}, "decode": {"enabled": False}, "long_context": {"enabled": False},
                  "boundary": {"enabled": False}, "prefix_cache": {"enabled": False}},
    "request_timeout_s": 30,
}


@pytest.fixture()
def ready_engine(tmp_path, monkeypatch):
    from tasks.steps.context import RunContext
    from tasks.steps.execution import execute

    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    ctx = RunContext.build(CONFIG, "retry")
    for step, engine in (("plan", None), ("pin", None), ("deploy", "sim"), ("wait_ready", "sim")):
        execute(ctx, step, engine)
    yield ctx
    execute(ctx, "teardown", "sim")


def _short_rows(ctx):
    return [r for r in ctx.run_dir.read_rows("requests", "sim") if r.get("scenario") == "short"]


@pytest.mark.parametrize("together", [False, True], ids=["one engine", "engines measured together"])
def test_a_try_that_failed_is_not_measured_again(ready_engine, together):
    from tasks.state.documents import StepOutcome, write_outcome
    from tasks.steps.execution import FailedBefore, execute, execute_group

    ctx = ready_engine
    execute(ctx, "short", "sim")
    first = _short_rows(ctx)
    assert len(first) == 4
    write_outcome(ctx.run_dir, StepOutcome(step="short", engine="sim", status="failed", detail="round 1 failed"))
    with pytest.raises(FailedBefore, match="round 1 failed"):
        execute_group(ctx, "short", ["sim"]) if together else execute(ctx, "short", "sim")
    assert _short_rows(ctx) == first  # the failed try's rows stand
    outcome = ctx.run_dir.read_json("state/steps/sim-short.json")
    assert outcome["status"] == "failed" and "not measured again" in outcome["detail"]


def test_a_try_that_left_no_outcome_is_measured_again(ready_engine):
    from tasks.steps.execution import execute
    from tasks.steps.registry import STEPS

    ctx = ready_engine
    STEPS["short"].run(ctx, "sim")  # a try whose worker died before it recorded an outcome
    first = {r["request_id"]: r["send_ts"] for r in _short_rows(ctx)}
    assert ctx.run_dir.read_json("state/steps/sim-short.json") is None
    execute(ctx, "short", "sim")
    again = {r["request_id"]: r["send_ts"] for r in _short_rows(ctx)}
    assert len(again) == 4 and all(again[k] > first[k] for k in first)  # measured anew, the partition replaced


def test_a_planned_step_that_left_no_outcome_fails_the_run(ready_engine):
    """A killed try with no retry left records nothing: the run must not pass on partial rows."""
    from tasks.steps.execution import execute, verdict
    from tasks.steps.registry import STEPS

    ctx = ready_engine
    execute(ctx, "startup_findings", "sim")
    STEPS["short"].run(ctx, "sim")  # measured, but the try never recorded how it ended
    problems = verdict(ctx.run_dir, ("plan", "pin"))
    assert any(p.startswith("sim/short: planned, but no outcome was recorded") for p in problems), problems
    assert not any(p.startswith("sim/startup_findings") for p in problems)
    execute(ctx, "short", "sim")
    assert not any(p.startswith("sim/short") for p in verdict(ctx.run_dir, ("plan", "pin")))


def test_an_engine_whose_deploy_or_teardown_left_no_outcome_fails_the_run(ready_engine):
    """A deploy task that never ran (a lost process, a stopped lane) leaves the engine's later steps saying only
    "not ready": the run must not pass as if it had measured the engine."""
    from tasks.state.documents import outcome_doc
    from tasks.steps.execution import verdict

    ctx = ready_engine
    assert any(p.startswith("sim/teardown: no outcome was recorded") for p in verdict(ctx.run_dir, ("plan", "pin")))
    assert not any(p.startswith("sim/deploy") for p in verdict(ctx.run_dir, ("plan", "pin")))
    (ctx.run_dir.path / outcome_doc("deploy", "sim")).unlink()  # as if its task had never run
    problems = verdict(ctx.run_dir, ("plan", "pin"))
    assert any(p.startswith("sim/deploy: no outcome was recorded") and "never deployed" in p for p in problems)

"""The capacity step as the pipeline runs it: from the registry, between restart readings, its
result where the report reads it, and the report's capacity part from that run."""

from __future__ import annotations

import pytest

from capacity_helpers import FAST, OUTPUT_TOKENS, SLO
from tasks.state import documents as run_documents
from tasks.report import write_report
from tasks.steps.context import RunContext
from tasks.steps.execution import execute

KNEE = 6
CONFIG = {
    "engines": [{"name": "sim-knee", "dialect": "vllm", "launcher": "sim", "sim_profile": {**FAST, "decode_knee": KNEE}}],
    "scenarios": {
        **{name: {"enabled": False} for name in ("functional", "short", "prefill", "decode", "rate", "long_context",
                                                 "boundary", "prefix_cache")},
        "capacity": {"enabled": True, "input_tokens": 16, "output_tokens": OUTPUT_TOKENS, "start": 2, "max": 16, "rounds": 2,
                     "requests_per_round": 24},
    },
    "slo": SLO,
    "request_timeout_s": 30,
}


def test_the_capacity_step_finds_the_knee_and_the_report_shows_it(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))
    ctx = RunContext.build(CONFIG, "capacity-step")
    for name in ("plan", "pin"):
        execute(ctx, name)
    assert {"engine": "sim-knee", "scenario": "capacity"} in run_documents.manifest(ctx.run_dir)["matrix"]
    execute(ctx, "deploy", "sim-knee")
    try:
        execute(ctx, "wait_ready", "sim-knee")
        done = execute(ctx, "capacity", "sim-knee")
    finally:
        execute(ctx, "teardown", "sim-knee")
    assert done.status == "ok" and done.data["outcome"] == "found" and done.data["capacity"] == KNEE
    assert done.data["engine_restarted"] is False
    outcome = next(o for o in run_documents.outcomes(ctx.run_dir) if o.step == "capacity")
    assert outcome.status == "ok"
    restarts = [c for c in ctx.run_dir.read_rows("checks", "sim-knee") if c["check"] == "engine_restarts"]
    assert [c["scenario"] for c in restarts] == ["capacity"] and restarts[0]["outcome"] == "pass"

    built = write_report(ctx.run_dir, ctx.config)
    capacity = built["summary"].engines["sim-knee"].capacity
    assert capacity is not None and capacity.capacity == KNEE and capacity.bracket == [KNEE, KNEE + 1]
    assert "capacity" in built["charts"] and "<b>6 concurrent</b>" in built["page"]
    assert (ctx.run_dir.path / "charts" / "capacity.png").exists()

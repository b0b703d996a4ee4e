"""The capacity section of the run config: off by default, and bad input names the field and the fix."""

from __future__ import annotations

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.steps.registry import SCENARIO_STEPS, STEPS

SLO = {"ttft_s": 0.5}


def test_capacity_is_off_by_default_and_its_step_is_skipped():
    cfg = parse_run_config({})
    assert cfg.scenarios.capacity.enabled is False
    assert not STEPS["capacity"].enabled(cfg)
    on = parse_run_config({"scenarios": {"capacity": {"enabled": True}}, "slo": SLO})
    assert STEPS["capacity"].enabled(on) and STEPS["capacity"].per_engine and STEPS["capacity"].scenario


def test_the_capacity_step_runs_after_the_performance_scenarios_and_before_long_context():
    assert SCENARIO_STEPS.index("rate") < SCENARIO_STEPS.index("capacity") < SCENARIO_STEPS.index("long_context")
    assert STEPS["capacity"].retries == 0  # a retried measurement would replace the failed try's rows


def test_defaults_and_requests_per_round():
    s = parse_run_config({"scenarios": {"capacity": {"enabled": True}}, "slo": SLO}).scenarios.capacity
    assert (s.mode, s.target_goodput_share, s.start, s.max, s.step, s.rounds) == ("concurrency", 0.9, 1, 64, 1, 3)
    assert s.requests_for(1) == 32 and s.requests_for(12) == 96
    rate = parse_run_config({"scenarios": {"capacity": {"mode": "rate", "start": 0.5, "step": 0.25}}}).scenarios.capacity
    assert rate.start == 0.5 and rate.requests_for(10.5) == 84  # 8 s of arrivals


@pytest.mark.parametrize(
    ("capacity", "slo", "field", "fix"),
    [
        ({"enabled": True}, {}, "scenarios.capacity.enabled", "slo.ttft_s"),
        ({"target_goodput_share": 1.5}, SLO, "scenarios.capacity.target_goodput_share", "between 0 and 1"),
        ({"target_goodput_share": 0}, SLO, "scenarios.capacity.target_goodput_share", "between 0 and 1"),
        ({"start": 1.5}, SLO, "scenarios.capacity.start", "mode: rate"),
        ({"step": 0.5}, SLO, "scenarios.capacity.step", "integer"),
        ({"start": 0}, SLO, "scenarios.capacity.start", "concurrency >= 1"),
        ({"start": 16, "max": 8}, SLO, "scenarios.capacity.max", "max >= start"),
        ({"mode": "tokens"}, SLO, "scenarios.capacity.mode", "concurrency"),
        ({"rounds": 0}, SLO, "scenarios.capacity.rounds", ">= 1"),
        ({"extra_rounds": -1}, SLO, "scenarios.capacity.extra_rounds", ">= 0"),
        ({"resolution": 2}, SLO, "scenarios.capacity.resolution", "fraction"),
        ({"confidence": 0.3}, SLO, "scenarios.capacity.confidence", "0.95"),
        ({"requests_per_round": 0}, SLO, "scenarios.capacity.requests_per_round", ""),
        ({"strat": 4}, SLO, "scenarios.capacity.strat", "spelling"),
    ],
)
def test_bad_capacity_input_names_the_field_and_the_fix(capacity, slo, field, fix):
    with pytest.raises(ConfigError) as info:
        parse_run_config({"scenarios": {"capacity": capacity}, "slo": slo})
    message = str(info.value)
    assert message.startswith(field + ":"), message
    assert "Fix:" in message and fix in message, message

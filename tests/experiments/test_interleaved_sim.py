"""An experiment measured interleaved on DayOne's simulator, with a planted effect and with none.

The variants are up together; each performance scenario alternates their rounds (ABBA), and the
effects come from the paired rounds. A planted 20% faster decode (the gap between tokens 5 ms ->
4.17 ms) must be called better with an interval covering the planted ratio; a factor the simulator
ignores (an environment variable) must leave an interval around 1.
"""

from __future__ import annotations

import pytest

ITL_S = 0.005
OUTPUT_TOKENS = 48
CONCURRENCY = 2


def _request_s(itl_s: float) -> float:
    """The simulator's time for one request of the scenario: TTFT base, prefill, the token gaps."""
    return 0.001 + 64 / 50_000 + (OUTPUT_TOKENS - 1) * itl_s


def _experiment_run(run_id: str, factor: dict) -> tuple[dict, dict[tuple[str, int], float]]:
    from tasks.report.summary import build_summary
    from tasks.steps.context import RunContext
    from tasks.steps.execution import execute, execute_group

    config = {
        "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
        "engines": [{"name": "sim", "dialect": "vllm", "launcher": "sim", "env": {"DAYONE_NOTE": "a"},
                     "sim_profile": {"ttft_base_s": 0.001, "itl_s": ITL_S}}],
        "experiment": {"base": "sim", "factors": [factor]},
        "scenarios": {
            "functional": {"enabled": False},
            "short": {"input_tokens": 64, "output_tokens": OUTPUT_TOKENS, "concurrency": [CONCURRENCY], "rounds": 6,
                      "requests_per_round": 8},
            "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
            "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
        },
        "request_timeout_s": 30,
    }
    ctx = RunContext.build(config, run_id)
    engines = [e.name for e in ctx.config.engines]
    execute(ctx, "plan")
    execute(ctx, "pin")
    try:
        for e in engines:
            execute(ctx, "deploy", e)
            execute(ctx, "wait_ready", e)
            execute(ctx, "warmup", e)
        result = execute_group(ctx, "short", engines)
    finally:
        for e in engines:
            execute(ctx, "teardown", e)
    assert result.data["design"]["order"] == "interleaved"
    summary = build_summary(ctx.run_dir, ctx.config).model_dump(mode="json")
    # each round's first send, from the request rows
    started: dict[tuple[str, int], float] = {}
    for r in ctx.run_dir.read_rows("requests"):
        if r.get("scenario") == "short":
            key = (r["engine"], r["round"])
            started[key] = min(started.get(key, r["send_ts"]), r["send_ts"])
    return summary, started


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path))  # the run's directory lies here
    return tmp_path


def _comparison(summary: dict, figure: str) -> dict:
    [c] = [c for c in summary["comparisons"] if c["scenario"] == "short" and c["figure"] == figure]
    return c


def test_rounds_alternate_abba_and_the_effects_are_paired(workdir):
    summary, started = _experiment_run("abba", {"setting": "sim_profile.itl_s", "levels": [ITL_S, 0.004167]})
    assert [(n, e) for e, n in sorted(started, key=started.get)] == [
        (n, e) for n in range(1, 7)
        for e in (("sim", "sim-itls0-004167") if n % 2 else ("sim-itls0-004167", "sim"))]
    assert summary["measurement_design"] == "interleaved"
    assert summary["experiment"]["variants"] == [{"engine": "sim-itls0-004167", "changes": {"sim_profile.itl_s": 0.004167}}]
    c = _comparison(summary, "output_tps")
    assert c["paired"] and c["base"] == "sim" and c["engine"] == "sim-itls0-004167"
    planted = _request_s(ITL_S) / _request_s(0.004167)  # about 1.19
    assert c["verdict"] == "better", c
    # the client's own time per request is in both sides: allow it 3% of the planted ratio
    assert c["low"] * 0.97 <= planted <= c["high"] * 1.03, (planted, c)


def test_a_factor_the_engine_ignores_leaves_an_interval_around_1(workdir):
    summary, _ = _experiment_run("null", {"setting": "env.DAYONE_NOTE", "levels": ["a", "b"]})
    c = _comparison(summary, "output_tps")
    assert c["paired"] and c["ratio"] is not None
    # one launch (measurement.launches: 1): the rounds are the replicates, and the interval says so
    assert c["launches"] == 1 and c["covers"] == "round-to-round noise within one deployment of each engine", c
    # within 5% of no change, or on a machine busy enough (a stall in a ~1 s round) that the run could not
    # detect 5%, within the change it could detect (tests/independent/test_experiment_plain.py says why)
    assert abs(c["ratio"] - 1) <= max(0.05, c["detectable"]) or c["low"] <= 1 <= c["high"], c
    assert c["low"] <= 1.03 and c["high"] >= 0.97, c  # within 3% of no change, whatever the verdict

"""DayOne's steps against the real engine, deployed through the local target as the DAG does:
functional checks, a short round, the prefix-cache trial (SmolLM2) and one needle (Gemma 3 270M,
completion prompt). Structure and sanity are asserted, never timings: the machine is noisy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.checks import CHECK_NAMES, run_functional
from tasks.evidence.cache import run_prefix_cache
from tasks.evidence.needles import run_long_context
from tasks.scenarios.perf import run_perf

from llamacpp_helpers import RunningEngine, llamacpp_config, running_engine

# Covered against the simulator in tests/checks; each costs 20-60 s of generation on 2 busy cores.
SLOW_CHECKS = ("reasoning_split", "tool_call_streaming", "output_streams", "openai_sdk")
EVIDENCE_KEYS = {"status", "field", "excerpt", "reason"}


@pytest.fixture(scope="module")
def checks(smollm2: RunningEngine) -> dict[str, dict]:
    config = smollm2.config.model_copy(update={
        "scenarios": smollm2.config.scenarios.model_copy(update={
            "functional": smollm2.config.scenarios.functional.model_copy(update={"skip": list(SLOW_CHECKS)})
        })
    })
    ctx = RunningEngine(config, smollm2.target, smollm2.deployment, smollm2.run_dir).ctx()
    return {row["check"]: row for row in run_functional(ctx)}


def test_every_check_gives_an_outcome_with_evidence(checks: dict[str, dict]):
    assert set(checks) == set(CHECK_NAMES)
    for name, row in checks.items():
        assert row["outcome"] in ("pass", "fail", "not_applicable"), name
        assert EVIDENCE_KEYS <= set(row["evidence"]), (name, row["evidence"])
        assert row["engine"] == "llamacpp" and row["scenario"] == "functional"
    for name in SLOW_CHECKS:
        assert checks[name]["outcome"] == "not_applicable"


def test_a_real_chat_model_passes_the_api_basics(checks: dict[str, dict]):
    for name in ("model_list", "chat", "chat_streaming", "streaming_usage"):
        assert checks[name]["outcome"] == "pass", (name, checks[name]["evidence"])
        assert checks[name]["evidence"]["status"] == 200
    assert checks["chat"]["evidence"]["excerpt"].strip(), "a real answer, not an empty 200"


def test_echo_false_holds_because_llamacpp_never_echoes(checks: dict[str, dict]):
    # llama.cpp ignores `echo` altogether (test_llamacpp_engine::test_echo_is_ignored): with
    # echo=false the prompt does not come back, so this check passes, with the text as evidence.
    row = checks["completions_echo_false"]
    assert row["outcome"] == "pass", row["evidence"]
    assert row["evidence"]["status"] == 200 and row["evidence"]["field"] == "choices[0].text"
    assert "DayOne echo probe" not in row["evidence"]["excerpt"]


def test_echo_check_fails_because_llamacpp_ignores_echo(checks: dict[str, dict]):
    # The other side of the same quirk: echo=true must return the prompt, and llama.cpp does not.
    row = checks["completions_echo_true"]
    assert row["outcome"] == "fail", row["evidence"]
    assert row["evidence"]["status"] == 200 and "echo=true ignored" in row["evidence"]["reason"]


def test_image_input_without_a_projector_is_not_a_pass(checks: dict[str, dict]):
    row = checks["image_input"]
    assert row["outcome"] in ("fail", "not_applicable"), row["evidence"]
    assert "image" in str(row["evidence"]).lower()


def test_a_short_round_completes_every_request_at_the_exact_lengths(smollm2: RunningEngine):
    ctx = smollm2.ctx()
    spec = ctx.config.scenarios.short
    summary = run_perf(ctx, "short")
    assert [level["concurrency"] for level in summary["levels"]] == spec.concurrency
    for level in summary["levels"]:
        for round_ in level["rounds"]:
            assert round_["requests_failed"] == 0 and round_["requests_ok"] == spec.requests_per_round, round_
        assert level["figures"]["output_tps"]["median"] > 0
    rows = ctx.run_dir.read_rows("requests", "llamacpp")
    assert len(rows) == len(spec.concurrency) * spec.requests_per_round
    for row in rows:
        assert row["status"] == "ok", row["error"]
        assert (row["prompt_tokens"], row["completion_tokens"]) == (spec.input_tokens, spec.output_tokens)
        assert 0 < row["ttft_s"] <= row["e2e_s"]


def test_the_cache_trial_reads_real_counters(smollm2: RunningEngine):
    ctx = smollm2.ctx()
    spec = ctx.config.scenarios.prefix_cache
    verdict = run_prefix_cache(ctx)
    trials = ctx.run_dir.read_rows("cache_trials", "llamacpp")
    assert [t["trial"] for t in trials] == list(range(spec.repeats + 1))
    assert all(t["status"] == "ok" for t in trials), trials
    assert verdict["cache_cleared"] is True, verdict["cache_clear_detail"]
    prompt_tokens = trials[0]["prompt_tokens"]
    assert abs(prompt_tokens - spec.prompt_tokens) <= 2
    assert trials[0]["cached_tokens"] == 0
    # Queried = processed + cached, straight from llamacpp:prompt_tokens(_cached)_total deltas.
    assert verdict["server_queries_delta"] == sum(t["prompt_tokens"] for t in trials)
    assert verdict["server_hits_delta"] == sum(t["cached_tokens"] for t in trials[1:])
    expected_rate = spec.repeats * (prompt_tokens - 1) / ((spec.repeats + 1) * prompt_tokens)
    assert verdict["hit_rate"] == pytest.approx(expected_rate, abs=0.02)
    assert verdict["verdict"] == "effective", verdict["reason"]
    scraped = {r["metric"] for r in ctx.run_dir.read_rows("server_metrics", "llamacpp")}
    assert {"llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"} <= scraped


def test_a_needle_passes_with_gemmas_completion_prompt(tmp_path: Path):
    length = 768
    config = llamacpp_config(
        {"model": "gemma3-270m", "ctx_size": 2048},
        scenarios={"long_context": {"enabled": True, "lengths": [length], "depths": [0.5], "output_tokens": 16,
                                    "include_model_limit": False, "prompt_style": "completion"}},
        name="gemma",
    )
    with running_engine(tmp_path, config) as engine:
        rows = run_long_context(engine.ctx())
    assert [(r["attempt"], r["first_encounter"]) for r in rows] == [(1, True), (2, False)]
    for row in rows:
        assert row["status"] == "ok" and row["cache_cleared"] is True, row
        assert abs(row["prompt_tokens"] - length) <= 2, row["prompt_tokens"]
        assert row["passed"] is True, f"expected {row['expected']}, answer {row['answer']!r}"
        assert row["expected"] in row["answer"]

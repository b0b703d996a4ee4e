"""The simulator answers the quality step's items from their prompts, and plants wrong answers by family
(Profile.quality): the step's accuracy per family must find exactly the planted families."""

from __future__ import annotations

import pytest

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.items import FAMILIES
from tasks.quality.run import run_quality
from tasks.quality.score import accuracy_by_family
from tasks.config.sim_profile import ProfileError, load_profile
from tasks.state.storage import RunDir

FAST = {"itl_s": 0.0005, "ttft_base_s": 0.001, "natural_output_tokens": 4}
ITEMS_PER_FAMILY = 16


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_planted_families_and_no_other_are_found(sims, tmp_path, dialect):
    plant = {"arithmetic": 0.5, "tool_call": 1.0}
    sim = sims(dialect, {**FAST, "quality": {"wrong_share": plant}})
    config = parse_run_config({
        "run_id": "sim-quality", "model": {"name": "dayone-sim-model", "context_limit_tokens": 65_536},
        "engines": [{"name": "sim", "dialect": dialect}],
        "scenarios": {"quality": {"enabled": True, "items_per_family": ITEMS_PER_FAMILY,
                                  "kv_context_tokens": [128, 2048]},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })
    rows = run_quality(EngineContext(config, endpoint_for(config, "sim", sim.url, "sha256:" + "0" * 64),
                                   RunDir("sim-quality", root=tmp_path)))
    accuracy = accuracy_by_family(rows)["sim"]
    assert set(accuracy) == set(FAMILIES) and all(r["status"] == "ok" for r in rows)
    assert accuracy["tool_call"]["accuracy"] == 0.0
    assert 0.0 < accuracy["arithmetic"]["accuracy"] < 1.0 and accuracy["arithmetic"]["high"] < 1.0, accuracy
    assert all(a["accuracy"] == 1.0 for f, a in accuracy.items() if f not in plant), accuracy


def test_a_planted_share_outside_zero_to_one_is_refused():
    with pytest.raises(ProfileError, match="wrong_share"):
        load_profile(json_text='{"quality": {"wrong_share": {"arithmetic": 1.5}}}')


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_a_planted_nll_offset_and_its_growth_with_depth_are_measured_exactly(sims, tmp_path, dialect):
    from tasks.quality.loglik import fixed_text, run_loglik
    from tasks.sim.loglik import prompt_logprobs
    from tasks.config.sim_profile import QualityPlant

    lengths = [128, 2048]
    offset, growth = 0.2, 0.5
    config = parse_run_config({
        "run_id": "sim-nll", "model": {"name": "dayone-sim-model", "context_limit_tokens": 65_536},
        "engines": [{"name": "sim", "dialect": dialect}],
        "scenarios": {"quality": {"enabled": True, "nll_lengths_tokens": lengths},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })
    sim = sims(dialect, {**FAST, "quality": {"nll_offset_nats": offset, "nll_offset_nats_per_1k_tokens": growth}})
    rows = run_loglik(EngineContext(config, endpoint_for(config, "sim", sim.url, "sha256:" + "0" * 64),
                                    RunDir("sim-nll", root=tmp_path)))
    for row, length in zip(rows, lengths, strict=True):
        sound = [lp for lp in prompt_logprobs(fixed_text(0, length), QualityPlant())[1:]]
        n = len(sound)
        # the planted part: offset on every token, growth * position / 1000 on token i (i = 1 .. n)
        planted = offset + growth * (n + 1) / 2 / 1000
        assert row["status"] == "ok" and row["prompt_tokens"] == n + 1
        assert row["mean_nll_nats"] == pytest.approx(-sum(sound) / n + planted, abs=1e-9)

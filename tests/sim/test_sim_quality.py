"""The simulator answers the quality step's items from their prompts, and plants wrong answers by family
(Profile.quality): the step's accuracy per family must find exactly the planted families."""

from __future__ import annotations

import pytest

from tasks.config import parse_run_config
from tasks.engine_context import EngineContext, endpoint_for
from tasks.quality.items import FAMILIES
from tasks.quality.run import run_quality
from tasks.quality.score import accuracy_by_family
from tasks.sim.profile import ProfileError, load_profile
from tasks.run_storage import RunDir

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

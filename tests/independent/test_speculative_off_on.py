"""Speculative decoding off against on (docs/PROTOCOL.md, "Speculative decoding off against on"): the
presets pair each engine with its MTP variant, any greedy answer the switch makes wrong is named, and the
acceptance per level carries its interval over rounds."""

from __future__ import annotations

import pytest

from tasks.config import parse_run_config
from tasks.config.presets import preset_config
from tasks.quality.speculative import acceptance_by_level, answers_off_on, off_on_pairs, speculative_setting


def _preset_run(name: str, image: str):  # noqa: ANN202
    doc = preset_config(name)
    doc["engines"] = [{**e, "image": image} for e in doc["engines"]]
    return parse_run_config({**doc, "run_id": name})


@pytest.mark.parametrize(("preset", "image", "off", "on", "switch"), [
    ("spec-decoding-sglang", "lmsysorg/sglang:v0.5.4", "sglang", "sglang-mtp", "EAGLE"),
    ("spec-decoding-vllm", "vllm/vllm-openai:v0.11.0", "vllm", "vllm-mtp",
     '{"method": "mtp", "num_speculative_tokens": 1}'),
])
def test_each_preset_pairs_the_engine_with_its_mtp_variant_and_checks_answers(preset, image, off, on, switch):
    cfg = _preset_run(preset, image)
    assert off_on_pairs(cfg) == [(off, on)]
    assert speculative_setting(cfg, off) == "off" and speculative_setting(cfg, on) == switch
    assert cfg.scenarios.quality.enabled and cfg.experiment.base == off


def test_engines_that_differ_in_more_than_the_switch_are_no_pair():
    cfg = parse_run_config({
        "run_id": "mixed", "target": "kubernetes",
        "engines": [{"name": "sglang", "dialect": "sglang", "image": "lmsysorg/sglang:v0.5.4"},
                    {"name": "vllm-mtp", "dialect": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                     "args": ["--speculative-config", '{"method": "mtp"}']}]})
    assert off_on_pairs(cfg) == []


def test_a_greedy_answer_made_wrong_is_named_and_a_changed_one_with_where_it_parts():
    rows = [{"engine": e, "item_id": i, "prompt_sha256": "p" + i, "status": "ok", "answer": a, "correct": ok}
            for e, i, a, ok in (("off", "a-1", "482913", True), ("on", "a-1", "482913", True),
                                ("off", "a-2", "[1, 2, 3]", True), ("on", "a-2", "[1, 3, 2]", False),
                                ("off", "a-3", "x", True), ("off", "a-4", "", False), ("on", "a-4", "", False))]
    assert answers_off_on(rows, "off", "on") == {"off": "off", "on": "on", "items": 2, "wrong": ["a-2"],
                                                 "not_checked": ["a-4"], "changed": {"a-2": 4}}


def test_acceptance_per_level_is_the_mean_over_rounds_with_a_t_interval():
    rows = [{"scenario": "short", "concurrency": 4, "spec_acceptance_rate": r, "spec_mean_accepted_length": 1 + 3 * r}
            for r in (0.5, 0.6, 0.7)] + [{"scenario": "short", "concurrency": 4, "warmup": True,
                                           "spec_acceptance_rate": 0.0, "spec_mean_accepted_length": 1.0},
                                          {"scenario": "decode", "concurrency": 1, "spec_acceptance_rate": None}]
    [level] = acceptance_by_level(rows, 0.95)
    assert (level["scenario"], level["level"], level["rounds"]) == ("short", "c=4", 3)
    assert level["acceptance_rate"] == pytest.approx(0.6)
    # t(0.975, 2) = 4.303, sd 0.1, 3 rounds: half width 0.248
    assert level["acceptance_rate_low"] == pytest.approx(0.6 - 4.3027 * 0.1 / 3 ** 0.5, abs=1e-3)
    assert level["accepted_length"] == pytest.approx(2.8)
    assert level["accepted_length_high"] - level["accepted_length"] == pytest.approx(3 * 0.2484, abs=1e-3)

"""The run config: one validated model, one kind of error naming the field and the fix."""

from __future__ import annotations

import pytest

from tasks.config import ConfigError, parse_run_config


def test_defaults_follow_the_protocol():
    cfg = parse_run_config({})
    assert cfg.scenarios.short.input_tokens == 128 and cfg.scenarios.short.output_tokens == 64
    assert cfg.scenarios.short.concurrency == [1, 4, 8, 16, 32]
    assert cfg.scenarios.prefill.input_tokens == 4096 and cfg.scenarios.prefill.concurrency == [4]
    assert cfg.scenarios.decode.output_tokens == 1024 and cfg.scenarios.decode.concurrency == [1, 8]
    assert cfg.scenarios.prefix_cache.prompt_tokens == 4400 and cfg.scenarios.prefix_cache.repeats == 5
    assert cfg.scenarios.long_context.depths == [0.1, 0.5, 0.9]
    assert cfg.scenarios.boundary.lengths == [261_000, 263_000, 289_000]
    assert cfg.scenarios.short.requests_for(1) == 32 and cfg.scenarios.short.requests_for(8) == 64


def test_partial_scenario_keeps_its_own_defaults():
    cfg = parse_run_config({"scenarios": {"decode": {"concurrency": [2]}}})
    assert cfg.scenarios.decode.output_tokens == 1024 and cfg.scenarios.decode.concurrency == [2]


@pytest.mark.parametrize(
    ("bad", "field", "fix"),
    [
        ({"target": "moon"}, "target", "local"),
        ({"scenarios": {"short": {"concurrency": [0]}}}, "scenarios.short.concurrency[0]", ">= 1"),
        ({"engines": [{"name": "a", "dialect": "tgi"}]}, "engines[0].dialect", "sglang"),
        ({"engines": [{"name": "a", "dialect": "vllm", "image": "Bad Image"}]}, "engines[0].image", "REGISTRY"),
        ({"scenarios": {"long_context": {"lengths": [2_000_000]}}}, "scenarios.long_context.lengths[0]", "limit"),
        ({"target": "kubernetes"}, "engines[0].image", ""),
        ({"engines": [{"name": "a", "dialect": "vllm"}, {"name": "a", "dialect": "sglang"}]}, "engines", "distinct"),
        ({"scenarios": {"shrot": {}}}, "scenarios.shrot", "spelling"),
    ],
)
def test_bad_input_names_the_field_and_the_fix(bad, field, fix):
    with pytest.raises(ConfigError) as info:
        parse_run_config(bad)
    message = str(info.value)
    assert message.startswith(field + ":"), message
    assert "Fix:" in message and fix in message

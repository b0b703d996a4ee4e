"""The run config: one validated model, one kind of error naming the field and the fix."""

from __future__ import annotations

import pytest

from tasks.checks import CHECK_NAMES
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


def test_each_field_says_its_own_fix_where_fields_share_a_name():
    with pytest.raises(ConfigError) as info:
        parse_run_config({"engines": [{"name": "Bad Name", "dialect": "vllm", "api_key_secret": {"name": ""}}]})
    fixes = {path: fix for path, _, fix in info.value.problems}
    assert set(fixes) == {"engines[0].name", "engines[0].api_key_secret.name"}
    assert fixes["engines[0].name"].startswith("use lowercase letters, digits and '-'")
    assert fixes["engines[0].api_key_secret.name"].startswith("give the Secret's name and key")


def test_functional_skip_names_are_checked_when_the_config_is_parsed():
    with pytest.raises(ConfigError) as info:
        parse_run_config({"scenarios": {"functional": {"skip": ["image_input", "imagee_input"]}}})
    [(path, message, fix)] = info.value.problems
    assert (path, message) == ("scenarios.functional.skip", "unknown check(s) ['imagee_input']")
    assert fix == f"use names from {', '.join(CHECK_NAMES)}"  # the checks' own registry (tasks/checks)
    known = parse_run_config({"scenarios": {"functional": {"skip": ["image_input", "openai_sdk"]}}})
    assert known.scenarios.functional.skip == ["image_input", "openai_sdk"]


# ---- launcher settings: typed, and checked against the launcher that reads them ----------------

@pytest.mark.parametrize(
    ("engine", "field", "fix"),
    [
        ({"sim_profile": {"startup_delay": 1}}, "engines[0].sim_profile.startup_delay", "startup_delay_s"),
        ({"sim_profile": {"slots": 0}}, "engines[0].sim_profile.slots", "Profile"),
        ({"sim_profile": {"faults": {"error_burst": {"count": 3}}}}, "engines[0].sim_profile.faults.error_burst",
         "Profile"),
        ({"llamacpp": {"parallel": 2}}, "engines[0].llamacpp", "set launcher: llamacpp"),
        ({"launcher": "llamacpp", "sim_profile": {"slots": 2}}, "engines[0].sim_profile", "set launcher: sim"),
        ({"launcher": "external"}, "engines[0].endpoint", "base URL"),
    ],
)
def test_launcher_settings_are_checked_when_the_config_is_parsed(engine, field, fix):
    with pytest.raises(ConfigError) as info:
        parse_run_config({"engines": [{"name": "e", "dialect": "vllm", **engine}]})
    message = str(info.value)
    assert message.startswith(field + ": "), message
    assert "Fix:" in message and fix in message.split("Fix:", 1)[1], message


def test_a_sim_profile_typo_is_an_unknown_field_naming_the_known_ones():
    with pytest.raises(ConfigError) as info:
        parse_run_config({"engines": [{"name": "e", "dialect": "vllm", "sim_profile": {"startup_delay": 1}}]})
    [(path, message, fix)] = info.value.problems
    assert (path, message) == ("engines[0].sim_profile.startup_delay", "unknown field") and "startup_delay_s" in fix


def test_sim_profile_stays_the_mapping_of_the_overrides_given():
    overrides = {"startup_delay_s": 2, "faults": {"never_ready": True}}
    engine = parse_run_config({"engines": [{"name": "e", "dialect": "vllm", "sim_profile": overrides}]}).engines[0]
    assert engine.sim_profile == overrides and engine.sim_profile.get("startup_delay_s", 0) == 2


def test_on_a_cluster_llamacpp_settings_belong_to_the_llamacpp_dialect():
    base = {"target": "kubernetes", "model": {"path": "/models/m.gguf"}}
    llamacpp = {"name": "l", "dialect": "llamacpp", "image": "ghcr.io/ggml-org/llama.cpp:server"}
    cfg = parse_run_config({**base, "engines": [{**llamacpp, "args": ["--threads", "8"], "llamacpp": {"parallel": 4}}]})
    assert cfg.engines[0].llamacpp_settings.parallel == 4 and cfg.engines[0].args == ["--threads", "8"]
    with pytest.raises(ConfigError, match=r"^engines\[0\]\.llamacpp: .*Fix: remove llamacpp, or set dialect: llamacpp"):
        parse_run_config({**base, "engines": [{"name": "v", "dialect": "vllm", "image": "vllm/vllm-openai:v0.10.0",
                                               "llamacpp": {"parallel": 4}}]})


def test_a_parsed_config_parses_again_from_its_dump():
    """The plan records the config as JSON and later steps parse it again: defaults must not read as 'given'."""
    cfg = parse_run_config({"engines": [
        {"name": "s", "dialect": "sglang"},
        {"name": "l", "dialect": "llamacpp", "launcher": "llamacpp", "llamacpp": {"parallel": 2, "temperature": 0}},
        {"name": "x", "dialect": "openai", "launcher": "external", "endpoint": "http://127.0.0.1:9"}]})
    assert parse_run_config(cfg.model_dump(mode="json")) == cfg
    assert parse_run_config({"engines": [{"name": "s", "dialect": "sglang", "llamacpp": {}, "sim_profile": {}}]})


def test_an_engine_given_as_text_names_the_shape_not_another_rule():
    """The form's text box once turned an engine into "[object Object] " and the fix named distinct names."""
    with pytest.raises(ConfigError) as info:
        parse_run_config({"engines": ["[object Object] "]})
    assert str(info.value).startswith("engines[0]: ")
    assert 'give each engine as a JSON object, e.g. {"name": "sim-a", "dialect": "sglang"}' in str(info.value)
    assert "distinct" not in str(info.value)
    with pytest.raises(ConfigError, match=r"model: .*Fix: give a JSON object with this section's fields"):
        parse_run_config({"model": "x"})

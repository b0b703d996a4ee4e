"""The experiment in the run config: factors expand into variants that differ in declared settings only
(tasks/config/variants.py, tasks/config/experiment.py), the plan records each variant's diff, and the placement follows
the design (tasks/steps/lanes.py)."""

from __future__ import annotations

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.steps.lanes import design, positions

BASE = {"name": "llamacpp", "dialect": "llamacpp", "launcher": "llamacpp",
        "llamacpp": {"model": "smollm2", "ctx_size": 4096, "parallel": 1, "temperature": 0}}


def _config(experiment, engines=None, **extra):
    return parse_run_config({"model": {"name": "smollm2", "context_limit_tokens": 4096},
                             "engines": engines or [BASE], "experiment": experiment,
                             "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}},
                             **extra})


def _error(experiment, engines=None, **extra) -> str:
    with pytest.raises(ConfigError) as info:
        _config(experiment, engines, **extra)
    return str(info.value)


def test_one_factor_adds_a_variant_named_after_its_change():
    cfg = _config({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel", "levels": [1, 4]}]})
    assert [(e.name, e.llamacpp.parallel) for e in cfg.engines] == [("llamacpp", 1), ("llamacpp-parallel4", 4)]
    assert cfg.engines[1].llamacpp.model_dump() == {**cfg.engines[0].llamacpp.model_dump(), "parallel": 4}


def test_the_base_value_is_added_when_the_levels_leave_it_out():
    cfg = _config({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel", "levels": [2, 4]}]})
    assert [e.llamacpp.parallel for e in cfg.engines] == [1, 2, 4]


def test_factorial_and_one_at_a_time_designs():
    factors = [{"setting": "llamacpp.parallel", "levels": [1, 2, 4]},
               {"setting": "llamacpp.kv_unified", "levels": [True, False]}]
    full = _config({"base": "llamacpp", "factors": factors})
    assert len(full.engines) == 6  # 3 x 2 treatments, the base among them
    one = _config({"base": "llamacpp", "factors": factors, "design": "one_at_a_time"})
    assert [e.name for e in one.engines] == ["llamacpp", "llamacpp-parallel2", "llamacpp-parallel4",
                                            "llamacpp-kvunifiedfalse"]
    for e in one.engines[1:]:  # each variant changes exactly one setting of the base
        changed = [k for k, v in e.llamacpp.model_dump().items() if v != one.engines[0].llamacpp.model_dump()[k]]
        assert len(changed) == 1, (e.name, changed)


def test_a_parsed_config_validates_to_itself():
    cfg = _config({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel", "levels": [1, 4]}]})
    again = parse_run_config(cfg.model_dump(mode="json"))
    assert again == cfg


def test_a_variant_that_differs_in_an_undeclared_setting_is_refused_naming_it():
    p4 = {**BASE, "name": "p4", "llamacpp": {**BASE["llamacpp"], "parallel": 4, "threads": 3}}
    message = _error({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel"}]}, [BASE, p4])
    assert message.startswith("engines[1].llamacpp.threads: ") and "not a factor" in message and "Fix:" in message
    # declared, or allowed, it passes; and the plain one-setting variant passes as written
    for experiment in ({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel"}, {"setting": "llamacpp.threads"}]},
                       {"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel"}],
                        "allow_differences": ["llamacpp.threads"]}):
        assert [e.name for e in _config(experiment, [BASE, p4]).engines] == ["llamacpp", "p4"]


def test_an_undeclared_image_or_environment_difference_is_refused():
    a = {"name": "a", "dialect": "vllm", "image": "vllm/vllm-openai:v0.11.0"}
    b = {**a, "name": "b", "image": "vllm/vllm-openai:v0.11.1", "env": {"VLLM_USE_V1": "1"}}
    message = _error({"base": "a", "factors": [{"setting": "env.VLLM_USE_V1"}]}, [a, b], target="kubernetes")
    assert message.startswith("engines[1].image: ") and "v0.11.0" in message and "v0.11.1" in message
    message = _error({"base": "a", "factors": [{"setting": "image"}]}, [a, b], target="kubernetes")
    assert message.startswith("engines[1].env.VLLM_USE_V1: ")


@pytest.mark.parametrize("experiment,field", [
    ({"base": "nope", "factors": [{"setting": "llamacpp.parallel", "levels": [4]}]}, "experiment.base"),
    ({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel", "levels": [1, 0]}]},
     "experiment.factors[0].levels[1]"),
    ({"base": "llamacpp", "factors": [{"setting": "nothing.here", "levels": [1]}]}, "experiment.factors[0].setting"),
    ({"base": "llamacpp", "factors": [{"setting": "llamacpp", "levels": [{}]},
                                      {"setting": "llamacpp.parallel", "levels": [2]}]},
     "experiment.factors[1].setting"),
    ({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel", "levels": [2]},
                                      {"setting": "llamacpp.threads"}]}, "experiment.factors"),
    ({"base": "llamacpp", "factors": []}, "experiment.factors"),
])
def test_a_bad_experiment_names_its_field_and_the_fix(experiment, field):
    message = _error(experiment)
    assert message.startswith(field + ": ") and "Fix:" in message, message


def test_local_variants_are_up_together_and_interleaved():
    cfg = _config({"base": "llamacpp", "factors": [{"setting": "llamacpp.parallel", "levels": [1, 2, 4]}]})
    assert design(cfg) == "interleaved"
    assert positions(cfg)[0] == ["llamacpp", "llamacpp-parallel2", "llamacpp-parallel4"]
    assert not any(positions(cfg)[1:])


def test_variants_sharing_a_cluster_node_run_one_after_another_in_an_order_drawn_per_run():
    engines = [{"name": "a", "dialect": "vllm", "image": "vllm/vllm-openai:v0.11.0", "node": "gpu-1"}]
    experiment = {"base": "a", "factors": [{"setting": "args", "levels": [[], ["--enable-chunked-prefill"],
                                                                         ["--max-num-seqs", "64"]]}]}
    orders = set()
    for i in range(12):
        cfg = _config(experiment, engines, target="kubernetes", run_id=f"run-{i}")
        assert design(cfg) == "randomized"
        placed = positions(cfg)
        assert all(len(p) <= 1 for p in placed)  # one node: never two variants up together
        orders.add(tuple(p[0] for p in placed if p))
        assert positions(cfg) == placed  # the same run id draws the same order (a retried plan agrees)
    assert len(orders) > 1  # the order is drawn, not the config's


def test_variants_on_distinct_nodes_interleave_and_an_explicit_order_wins():
    a = {"name": "a", "dialect": "vllm", "image": "vllm/vllm-openai:v0.11.0", "node": "gpu-1"}
    b = {**a, "name": "b", "node": "gpu-2", "args": ["--enable-chunked-prefill"]}
    experiment = {"base": "a", "factors": [{"setting": "args"}], "allow_differences": ["node"]}
    assert design(_config(experiment, [a, b], target="kubernetes")) == "interleaved"
    assert design(_config({**experiment, "order": "randomized"}, [a, b], target="kubernetes")) == "randomized"

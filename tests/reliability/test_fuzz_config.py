"""Bad input, generated: run configs, trigger-form values and CLI arguments (hypothesis).

Every generated config is wrong in one known place. It must be rejected before anything is
deployed, with an error that names the field: ConfigError from tasks.config.parse_run_config
(the one validator every entry point uses), ParamValidationError from the trigger form, exit
code 2 with a message from the CLI. Nothing may escape as another exception (a traceback).
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.config import ConfigError, parse_run_config

VALID: dict[str, Any] = {
    "model": {"name": "dayone-sim-model", "revision": "main", "context_limit_tokens": 32768,
              "template_overhead_tokens": 64},
    "engines": [{"name": "sim-a", "dialect": "sglang", "image": "lmsysorg/sglang:v0.5.0", "gpus": 1,
                 "args": ["--x"], "env": {"A": "b"}, "launcher": "sim", "sim_profile": {}, "node_selector": {}}],
    "scenarios": {
        "functional": {"enabled": True, "skip": []},
        "warmup": True,
        "short": {"concurrency": [1, 4], "rounds": 2, "input_tokens": 128, "output_tokens": 64},
        "prefill": {"concurrency": [4], "rounds": 1},
        "decode": {"concurrency": [1], "rounds": 1},
        "rate": {"enabled": True, "rates": [1.0], "rounds": 1, "requests_per_round": 8},
        "long_context": {"lengths": [1024, 4096], "depths": [0.5], "output_tokens": 16},
        "boundary": {"lengths": [2048], "output_tokens": 16},
        "prefix_cache": {"prompt_tokens": 1000, "repeats": 2, "output_tokens": 8},
    },
    "slo": {"ttft_s": 1.0},
    "target": "local",
    "dry_run": False,
    "request_timeout_s": 60,
    "round_error_rate_max": 0.05,
    "kubernetes": {"namespace": "dayone", "startup_timeout_s": 600, "cleanup_age_s": 3600},
    "archive": {"bucket": "dayone", "prefix": "runs"},
    "thresholds": {"output_tps_drop": 0.1, "ttft_p95_rise": 0.2},
}

# ---- bad values by kind (bad under pydantic's lax parsing too: "5" is an int there) ----------
_NO_DIGITS = st.text(alphabet="bcdeghjklmopqrstuvwxyz _-!?@#", max_size=12)  # never a number, inf or nan
_CONTAINERS = st.one_of(st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                             max_size=2))
NON_POSITIVE_INT = st.integers(max_value=0)
FRACTIONAL = st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f))
BAD_POSINT = st.one_of(NON_POSITIVE_INT, FRACTIONAL, _NO_DIGITS, _CONTAINERS)
BAD_POSFLOAT = st.one_of(st.floats(max_value=0, allow_nan=False), st.just(float("nan")), _NO_DIGITS, _CONTAINERS)
BAD_TIMEOUT = st.one_of(BAD_POSFLOAT, st.sampled_from(["inf", "Infinity", float("inf"), 1e400]))
BAD_FRACTION = st.one_of(st.floats(min_value=1.0001, allow_nan=False, allow_infinity=False),
                         st.floats(max_value=-0.0001, allow_nan=False, allow_infinity=False), _NO_DIGITS, _CONTAINERS)
_BOOL_WORDS = {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}
BAD_BOOL = st.one_of(st.integers().filter(lambda i: i not in (0, 1)),
                     _NO_DIGITS.filter(lambda s: s.strip().lower() not in _BOOL_WORDS), _CONTAINERS)
BAD_STR = st.one_of(st.integers(), st.floats(allow_nan=False), _CONTAINERS, st.booleans())
_SLUG = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
BAD_SLUG = st.one_of(st.text(max_size=50).filter(lambda s: not _SLUG.match(s)), BAD_STR)


def _literal(allowed: tuple[str, ...]) -> st.SearchStrategy[Any]:
    return st.one_of(st.text(max_size=12).filter(lambda s: s not in allowed), BAD_STR)


def _bad_list(item: st.SearchStrategy[Any], empty_is_bad: bool = True) -> st.SearchStrategy[Any]:
    options = [st.lists(item, min_size=1, max_size=3), st.integers(), _NO_DIGITS.filter(bool)]
    if empty_is_bad:
        options.append(st.just([]))
    return st.one_of(*options)


# (path, bad values): the path's last name is the field the message must name.
LEAVES: list[tuple[tuple[Any, ...], st.SearchStrategy[Any]]] = [
    (("model", "name"), st.one_of(st.just(""), BAD_STR)),
    (("model", "revision"), st.one_of(st.just(""), BAD_STR)),
    (("model", "context_limit_tokens"), BAD_POSINT),
    (("model", "template_overhead_tokens"), st.one_of(st.integers(max_value=-1), FRACTIONAL, _NO_DIGITS)),
    (("engines", 0, "name"), BAD_SLUG),
    (("engines", 0, "dialect"), _literal(("sglang", "vllm", "llamacpp", "openai"))),
    (("engines", 0, "image"), st.one_of(st.text(min_size=1, max_size=40).filter(
        lambda s: not re.match(r"^[a-z0-9./:-]+$", s)), BAD_STR.filter(lambda v: v is not None))),
    (("engines", 0, "digest"), st.one_of(st.text(max_size=80).filter(lambda s: not re.fullmatch(r"sha256:[a-f0-9]{64}", s)),
                                         BAD_STR)),
    (("engines", 0, "gpus"), st.one_of(st.integers(max_value=-1), st.integers(min_value=65), FRACTIONAL, _NO_DIGITS)),
    (("engines", 0, "tensor_parallel"), BAD_POSINT),
    (("engines", 0, "launcher"), _literal(("sim", "llamacpp", "external"))),
    (("engines", 0, "args"), st.one_of(st.integers(), st.lists(st.one_of(st.integers(), _CONTAINERS), min_size=1,
                                                                max_size=2))),
    (("engines", 0, "env"), st.one_of(st.lists(st.integers(), max_size=2), st.integers(), _NO_DIGITS,
                                       st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), _CONTAINERS),
                                                       min_size=1, max_size=2))),
    (("engines", 0, "ready_timeout_s"), BAD_TIMEOUT),
    (("scenarios", "functional", "enabled"), BAD_BOOL),
    (("scenarios", "warmup"), BAD_BOOL),
    (("scenarios", "short", "concurrency"), _bad_list(BAD_POSINT)),
    (("scenarios", "short", "rounds"), BAD_POSINT),
    (("scenarios", "short", "input_tokens"), BAD_POSINT),
    (("scenarios", "short", "output_tokens"), BAD_POSINT),
    (("scenarios", "short", "requests_per_round"), BAD_POSINT),
    (("scenarios", "prefill", "concurrency"), _bad_list(BAD_POSINT)),
    (("scenarios", "decode", "rounds"), BAD_POSINT),
    (("scenarios", "rate", "rates"), _bad_list(BAD_POSFLOAT)),
    (("scenarios", "rate", "requests_per_round"), BAD_POSINT),
    (("scenarios", "long_context", "depths"), _bad_list(BAD_FRACTION, empty_is_bad=False)),
    (("scenarios", "long_context", "lengths"), _bad_list(BAD_POSINT, empty_is_bad=False)),
    (("scenarios", "long_context", "prompt_style"), _literal(("chat", "completion"))),
    (("scenarios", "boundary", "lengths"), _bad_list(BAD_POSINT, empty_is_bad=False)),
    (("scenarios", "prefix_cache", "repeats"), BAD_POSINT),
    (("slo", "ttft_s"), BAD_POSFLOAT),
    (("slo", "e2e_s"), BAD_POSFLOAT),
    (("target",), _literal(("local", "kubernetes"))),
    (("dry_run",), BAD_BOOL),
    (("request_timeout_s",), BAD_TIMEOUT),
    (("round_error_rate_max",), BAD_FRACTION),
    (("kubernetes", "startup_timeout_s"), BAD_POSINT),
    (("kubernetes", "cleanup_age_s"), BAD_POSINT),
    (("kubernetes", "run_as_user"), st.one_of(st.integers(max_value=-1), FRACTIONAL, _NO_DIGITS)),
    (("archive", "bucket"), st.one_of(st.text(max_size=2), BAD_STR)),
    (("thresholds", "output_tps_drop"), BAD_FRACTION),
]
# Dicts where an unknown key is an error, and known keys there (so the unknown one is new).
SECTIONS: list[tuple[Any, ...]] = [(), ("model",), ("engines", 0), ("scenarios",), ("scenarios", "short"),
                                   ("scenarios", "rate"), ("scenarios", "long_context"), ("slo",), ("kubernetes",),
                                   ("archive",), ("thresholds",)]


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(doc, path[:-1])[path[-1]] = value


@st.composite
def bad_configs(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """(config, field the message must name, how it is wrong)."""
    doc = copy.deepcopy(VALID)
    kind = draw(st.sampled_from(["leaf"] * 8 + ["unknown", "cross", "section"]))
    if kind == "leaf":
        path, values = draw(st.sampled_from(LEAVES))
        _set(doc, path, draw(values))
        return doc, str(path[-1]), "leaf"
    if kind == "unknown":
        section = draw(st.sampled_from(SECTIONS))
        target = _get(doc, section)
        key = draw(st.from_regex(r"\A[a-z][a-z_]{0,14}\Z").filter(lambda k: k not in _known_fields(section)))
        target[key] = draw(st.one_of(st.integers(), st.text(max_size=5)))
        return doc, key, "unknown"
    if kind == "section":  # a whole section of the wrong type
        path = draw(st.sampled_from([s for s in SECTIONS if s and s[-1] != 0]))
        _set(doc, path, draw(st.one_of(st.integers(), _NO_DIGITS, st.lists(st.integers(), min_size=1, max_size=2))))
        return doc, str(path[-1]), "section"
    rule = draw(st.sampled_from(["too_long", "boundary_too_long", "duplicate", "k8s_image"]))
    if rule == "too_long":
        doc["scenarios"]["long_context"]["lengths"].append(draw(st.integers(min_value=32768 - 16 - 64 + 1,
                                                                            max_value=10**9)))
        return doc, "lengths", rule
    if rule == "boundary_too_long":
        doc["scenarios"]["boundary"]["lengths"] = [draw(st.integers(min_value=32768 - 16 - 64 + 1, max_value=10**9))]
        return doc, "lengths", rule
    if rule == "duplicate":
        doc["engines"].append(copy.deepcopy(doc["engines"][0]))
        return doc, "engines", rule
    doc["target"] = "kubernetes"
    doc["engines"][0].pop("image")
    return doc, "image", rule


def _known_fields(section: tuple[Any, ...]) -> set[str]:
    from tasks.config import RunConfig
    from tasks.config.archive import ArchiveSettings
    from tasks.config.engines import EngineSpec
    from tasks.config.kubernetes import KubernetesSettings
    from tasks.config.model import ModelSpec
    from tasks.config.scenarios import LongContextScenario, RateScenario, Scenarios, ShortScenario
    from tasks.config.thresholds import SLO, RegressionThresholds

    model = {(): RunConfig, ("model",): ModelSpec, ("engines", 0): EngineSpec, ("scenarios",): Scenarios,
             ("scenarios", "short"): ShortScenario, ("scenarios", "rate"): RateScenario,
             ("scenarios", "long_context"): LongContextScenario, ("slo",): SLO,
             ("kubernetes",): KubernetesSettings, ("archive",): ArchiveSettings,
             ("thresholds",): RegressionThresholds}[section]
    return set(model.model_fields)


def test_the_base_config_is_valid_for_the_config_and_the_form():
    from airflow.sdk.definitions.param import ParamsDict

    from dayone_airflow.params import eval_params

    parse_run_config(copy.deepcopy(VALID))
    form = ParamsDict(eval_params())
    for key, value in copy.deepcopy(VALID).items():
        form[key] = value


def test_every_bad_config_is_rejected_naming_the_field():
    seen: Counter[str] = Counter()

    @settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(bad_configs())
    def check(case):
        doc, field, how = case
        with pytest.raises(ConfigError) as info:  # anything else escapes and fails the test with its traceback
            parse_run_config(doc)
        message = str(info.value)
        assert field in message, message
        assert info.value.problems and all(p[2] for p in info.value.problems)  # every problem says how to fix it
        seen[how] += 1

    check()
    assert sum(seen.values()) >= 1000 and set(seen) == {"leaf", "unknown", "section", "too_long",
                                                        "boundary_too_long", "duplicate", "k8s_image"}, seen


_FORM_STATS = {"form": 0, "plan": 0}
_FORM: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _form_params():
    from dayone_airflow.params import eval_params

    _FORM.update(eval_params())


def test_the_trigger_form_or_the_plan_rejects_every_bad_config():
    """The trigger form checks the JSON schema; what a schema cannot say (cross-field rules), the
    plan step rejects through parse_run_config, still before any deploy."""
    check_form()
    assert _FORM_STATS["form"] + _FORM_STATS["plan"] >= 1000 and _FORM_STATS["form"] > _FORM_STATS["plan"], _FORM_STATS


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bad_configs())
def check_form(case):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    doc, field, _how = case
    form = ParamsDict(_FORM)
    try:
        for key, value in doc.items():
            if key not in VALID or value != VALID[key]:  # the valid sections pass (checked above)
                form[key] = value
        if set(doc) - set(form):
            raise ParamValidationError(f"unknown params: {sorted(set(doc) - set(form))}")
    except ParamValidationError as exc:
        _FORM_STATS["form"] += 1
        assert field in str(exc), str(exc)
        return
    _FORM_STATS["plan"] += 1
    with pytest.raises(ConfigError) as info:
        parse_run_config(doc)
    assert field in str(info.value)


# ---- the CLI ----------------------------------------------------------------------------------


def _dayone(argv: list[str]) -> tuple[int, str]:
    """Run `dayone ARGV` in this process: (exit code, stderr)."""
    from tasks.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 2
    return int(code), err.getvalue()


@st.composite
def bad_cli(draw: st.DrawFn, workdir: Path) -> tuple[list[str], str]:
    """(argv, what the message must name)."""
    what = draw(st.sampled_from(["step_config", "step_missing_file", "step_not_yaml", "step_not_mapping",
                                 "step_run_id", "render_config", "argparse", "bench_list", "sim_profile"]))
    cfg = workdir / f"c{draw(st.integers(0, 10**9))}.yaml"
    if what in ("step_config", "render_config"):
        # render sets target=kubernetes itself, so a bad target is no error there
        doc, field, _ = draw(bad_configs().filter(lambda c: what == "step_config" or c[1] != "target"))
        cfg.write_text(yaml.safe_dump(doc))
        if what == "render_config":
            return ["render", "--config", str(cfg), "--out", str(workdir / "out"), "--offline"], field
        return ["step", "plan", "--config", str(cfg), "--run-id", "fuzz-run"], field
    if what == "step_missing_file":
        return ["step", "plan", "--config", str(workdir / "missing" / cfg.name), "--run-id", "r"], "--config"
    if what == "step_not_yaml":
        cfg.write_text(draw(st.sampled_from(["a: [1, 2", "{x", "a: b: c", "\t- x\n -y: [", "key: 'open"])))
        return ["step", "plan", "--config", str(cfg), "--run-id", "r"], "--config"
    if what == "step_not_mapping":
        cfg.write_text(yaml.safe_dump(draw(st.one_of(st.lists(st.integers(), min_size=1, max_size=3),
                                                     st.integers(), _NO_DIGITS.filter(bool)))))
        return ["step", "plan", "--config", str(cfg), "--run-id", "r"], "config"
    if what == "step_run_id":
        cfg.write_text(yaml.safe_dump(VALID))
        bad_id = draw(st.one_of(st.sampled_from(["../escape", "/abs", "a/b", "..", ".hidden", "x" * 200, ""]),
                                st.text(min_size=1, max_size=20).filter(
                                    lambda s: not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", s))))
        step = draw(st.sampled_from(["plan", "validate", "pin"]))
        return ["step", step, "--config", str(cfg), "--run-id", bad_id], "run_id"
    if what == "bench_list":
        extra = draw(st.sampled_from([["--concurrency", "1,x"], ["--concurrency", "four"],
                                      ["--scenario", "rate", "--rates", "fast"], ["--slo", "ttft"],
                                      ["--slo", "speed=5"], ["--scenario", "long"]]))
        return ["bench", "--endpoint", "http://127.0.0.1:9", "--dialect", "sglang", "--model", "m",
                "--out", str(workdir / "bench"), *extra], extra[-2]
    if what == "sim_profile":
        option, value, field = draw(st.sampled_from([
            ("--profile-json", "{not json", "--profile-json"), ("--profile-json", "[1]", "--profile-json"),
            ("--set", "slots=0", "slots"), ("--set", "faults.stall.seconds=-1", "seconds"),
            ("--set", "no_such_field=1", "no_such_field"), ("--set", "noequals", "--set"),
            ("--profile", str(workdir / "missing.yaml"), str(workdir / "missing.yaml"))]))
        return ["sim", option, value, "--port", "9"], field
    command = draw(st.sampled_from(["step", "render", "bench", "sim", "longctx", "cache", "check", "pin", "nosuch"]))
    junk = draw(st.sampled_from([["--no-such-option"], ["--port", "many"], ["--rounds", "x"], ["--dialect", "gpt"]]))
    return [command, *junk], "error"


def test_every_bad_cli_invocation_exits_2_with_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    seen = {"n": 0}

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.function_scoped_fixture])
    @given(bad_cli(tmp_path))
    def check(case):
        argv, must_name = case
        code, err = _dayone(argv)
        assert code == 2, (argv, code, err[-2000:])
        assert "Traceback" not in err, err
        # argparse names an option as written (--run-id), DayOne's own errors as the field (run_id)
        assert must_name in err or must_name.replace("_", "-") in err, (argv, err[-1000:])
        seen["n"] += 1

    check()
    assert seen["n"] >= 300
    # a bad run id never creates anything outside the work directory
    assert not (tmp_path / "escape").exists() and not Path("/abs").exists()

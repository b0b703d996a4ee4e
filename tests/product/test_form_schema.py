"""The trigger form's JSON schemas as Airflow's API applies them (SerializedParamsDict.validate).

The REST test (tests/ui/test_trigger_form_api.py) sees the DayOne check answer first; this one shows that the
schemas alone, as the API server deserializes them, reject the per-field mistakes too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

BAD = [
    ({"engines": [{"name": "sim-a", "dialect": "sglang", "image": "Not An Image!"}]}, "engines", "Not An Image!"),
    ({"scenarios": {"short": {"concurrency": [0]}}}, "scenarios", "minimum"),
    ({"engines": [{"name": "sim-a", "dialect": "tgi"}]}, "engines", "tgi"),
    ({"scenarios": {"long_context": {"depths": [1.5]}}}, "scenarios", "maximum"),
    ({"target": "moon"}, "target", "moon"),
]


@pytest.fixture(scope="module")
def served_params(airflow_db):
    """The params as the API server has them: the DAG serialized and deserialized."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(REPO / "dags" / "dayone_eval.py"))
    assert not bag.import_errors, bag.import_errors
    dag = DagSerialization.from_dict(DagSerialization.to_dict(bag.get_dag("dayone_eval")))
    return dag.params


@pytest.mark.parametrize(("conf", "param", "text"), BAD)
def test_schema_rejects_per_field_mistakes(served_params, conf, param, text):
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError) as info:
        served_params.deep_merge(conf).validate()
    assert f"param {param}" in str(info.value) and text in str(info.value)


def test_schema_accepts_the_defaults_and_a_good_conf(served_params):
    good = {"engines": [{"name": "sglang", "dialect": "sglang", "image": "lmsysorg/sglang:v0.5.0", "gpus": 1,
                         "node": "gpu-1", "args": ["--enable-metrics"]}],
            "scenarios": {"short": {"concurrency": [1, 8], "rounds": 3}}}
    values = served_params.deep_merge(good).validate()
    assert values["engines"][0]["image"] == "lmsysorg/sglang:v0.5.0"
    assert served_params.validate()["target"] == "local"


def _sub_schemas(schema: dict, path: str):
    """(path, schema) of every object below a param's schema: its sections and an array's items."""
    for field, prop in schema.get("properties", {}).items():
        yield f"{path}.{field}", prop
        yield from _sub_schemas(prop, f"{path}.{field}")
    if isinstance(schema.get("items"), dict):
        yield from _sub_schemas(schema["items"], f"{path}[]")


def test_every_field_has_a_title_and_description(served_params):
    sections = set()
    for name in served_params:
        param = served_params.get_param(name)
        assert param.schema.get("title") and (param.description or param.schema.get("description_md")), name
        sections.add(param.schema.get("section"))
        for path, prop in _sub_schemas(param.schema, name):
            assert prop.get("title") and prop.get("description"), path
    assert {"Preset", "Model", "Engines", "Scenarios", "Where"} <= sections


def test_the_engine_form_shows_llamacpps_settings_and_checks_them(served_params):
    from airflow.exceptions import ParamValidationError

    from tasks.config.llamacpp import LlamaCppSettings

    engine = served_params.get_param("engines").schema["items"]["properties"]
    settings = engine["llamacpp"]
    assert set(settings["properties"]) == set(LlamaCppSettings.model_fields)
    assert settings["properties"]["flash_attn"]["enum"] == ["auto", "on", "off"]
    assert settings["properties"]["parallel"]["minimum"] == 1 and settings["properties"]["ctx_size"]["default"] == 4096
    assert engine["sim_profile"]["type"] == "object" and "Profile" in engine["sim_profile"]["description"]
    llamacpp = {"name": "l", "dialect": "llamacpp", "launcher": "llamacpp"}
    values = served_params.deep_merge({"engines": [{**llamacpp, "llamacpp": {"parallel": 4}}]}).validate()
    assert values["engines"][0]["llamacpp"] == {"parallel": 4}
    with pytest.raises(ParamValidationError) as info:
        served_params.deep_merge({"engines": [{**llamacpp, "llamacpp": {"parallel": 0}}]}).validate()
    assert "instance[0]['llamacpp']['parallel']" in str(info.value)


# ---- what the UI shows: Airflow 3.3's trigger form picks a widget per param from its schema ---------

def ui_field(schema: dict, value) -> str:
    """The widget Airflow 3.3.2's trigger form picks for a param (FlexibleForm's FieldSelector, in the
    order it tries them; the bundle check below pins the predicates this mirrors)."""
    if schema.get("const"):
        return "hidden"
    kind = schema.get("type")
    if isinstance(kind, list):
        others = [t for t in kind if t != "null"]
        if len(others) > 1 and "enum" not in schema and "examples" not in schema:
            return "typed text"
        kind = others[0] if others else "string"
    elif kind is None:  # no type: the UI guesses from the default value
        kind = "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "string"
    if kind == "boolean":
        return "switch"
    if kind == "string" and schema.get("format") in ("date-time", "date", "time"):
        return schema["format"]
    if kind in ("null", "string", "number", "integer") and isinstance(schema.get("enum"), list):
        return "dropdown"
    if kind == "array" and (isinstance(schema.get("examples"), list) or isinstance(schema.get("enum"), list)):
        return "multi-select"
    if kind == "array":
        items = (schema.get("items") or {}).get("type")
        return "lines of text" if items in (None, "string") else "JSON array editor"
    if kind == "object":
        return "JSON editor"
    if kind in ("number", "integer"):
        return "number"
    return "text"


EXPECTED_FIELDS = {
    "preset": "dropdown", "fields_preset": "hidden", "model": "JSON editor", "engines": "JSON array editor",
    "scenarios": "JSON editor",
    "slo": "JSON editor", "request_timeout_s": "number", "round_error_rate_max": "number", "target": "dropdown",
    "dry_run": "switch", "kubernetes": "JSON editor", "archive": "JSON editor", "thresholds": "JSON editor",
    "experiment": "JSON editor", "telemetry": "JSON editor", "load": "JSON editor", "step_failed_share_max": "number",
    "measurement": "JSON editor", "choice": "JSON editor",
}


def test_the_ui_picks_widgets_as_ui_field_says():
    """The predicates ui_field mirrors, in the installed UI's bundle: a new Airflow UI fails here first."""
    import airflow

    bundle = "".join(p.read_text(encoding="utf-8") for p in
                     (Path(airflow.__file__).parent / "ui" / "dist" / "assets").glob("index-*.js"))
    for predicate in (
        r"\w+===`array`&&\(\w+\.items\?\.type===void 0\|\|\w+\.items\.type===`string`\)",  # lines of text
        r"\w+===`array`&&\w+\.items\?\.type!==`string`",  # JSON array editor
        r"\[`null`,`string`,`number`,`integer`\],\w+=\(\w+,\w+\)=>\w+\.includes\(\w+\)&&Array\.isArray\(\w+\.enum\)",
        r"\w+=\w+=>!!\w+\.const,",  # a param with a const is a hidden input
        r"\w+\.schema\.type\?Array\.isArray\(\w+\.schema\.type\)\?\w+\.schema\.type\.find\(\w+=>\w+!==`null`\)\?\?`string`",
    ):
        assert re.search(predicate, bundle), predicate


def test_every_param_is_a_field_the_ui_can_show_and_edit(served_params):
    """No param is a list of strings holding objects ([object Object]), nor typed by a guess from its value."""
    fields = {}
    for name in served_params:
        param = served_params.get_param(name)
        assert "$ref" not in json.dumps(param.schema), name  # the UI follows no $ref
        assert param.schema.get("type"), name
        fields[name] = ui_field(param.schema, param.value)
    assert fields == EXPECTED_FIELDS
    engines = served_params.get_param("engines").schema["items"]
    assert engines["type"] == "object" and {"name", "dialect", "image", "llamacpp"} <= set(engines["properties"])


def test_the_engines_param_takes_json_objects_and_refuses_text(served_params):
    from airflow.exceptions import ParamValidationError

    engine = {"name": "sim-a", "dialect": "vllm", "launcher": "sim", "sim_profile": {"slots": 8}}
    assert served_params.deep_merge({"engines": [engine]}).validate()["engines"] == [engine]
    with pytest.raises(ParamValidationError) as info:  # what the old text field made of an engine
        served_params.deep_merge({"engines": ["[object Object] "]}).validate()
    assert "param engines" in str(info.value) and "object" in str(info.value)


# ---- presets ---------------------------------------------------------------------------------------

def _form_values(served_params) -> dict:
    """What the trigger form posts: every param at the value shown."""
    return {name: served_params.get_param(name).value for name in served_params}


def _parsed(conf: dict):
    """The plan step's config from the DAG's values with `conf` over them (top-level keys replace)."""
    from dayone_airflow.glue import config_from_params
    from tasks.config import parse_run_config

    return parse_run_config(config_from_params(conf))


def _demo(name: str):
    import yaml

    from tasks.config import parse_run_config

    return parse_run_config(yaml.safe_load((REPO / "tasks" / "config" / "presets" / name).read_text(encoding="utf-8")))


def test_the_preset_field_lists_every_preset_with_a_label(served_params):
    from tasks.config.presets import PRESETS

    preset = served_params.get_param("preset")
    assert preset.value == "custom" and preset.schema["enum"][:3] == ["protocol", "local-sim", "local-llamacpp-ab"]
    assert set(preset.schema["values_display"]) == set(preset.schema["enum"]) == set(PRESETS)
    assert "1M-token" in preset.schema["values_display"]["protocol"]


def test_a_preset_lies_under_the_fields_left_as_shown(served_params):
    form = _form_values(served_params)
    assert _parsed(form) == _parsed({})  # custom, the default preset: the defaults as they are
    assert _parsed({**form, "preset": "local-sim"}) == _demo("sim.yaml")
    assert _parsed({**form, "preset": "local-llamacpp-ab"}) == _demo("llamacpp-ab.yaml")
    # a field changed in the form keeps its value; the preset fills the rest of its section
    changed = json.loads(json.dumps(form))
    changed["scenarios"]["short"]["rounds"] = 1
    changed["request_timeout_s"] = 30
    cfg = _parsed({**changed, "preset": "local-sim"})
    sim = _demo("sim.yaml")
    assert cfg.scenarios.short.rounds == 1 and cfg.request_timeout_s == 30
    assert cfg.scenarios.short.concurrency == sim.scenarios.short.concurrency == [1, 4]
    assert cfg.model == sim.model and cfg.engines == sim.engines
    engines = [{"name": "mine", "dialect": "openai", "launcher": "external", "endpoint": "http://127.0.0.1:9"}]
    assert [e.name for e in _parsed({**form, "preset": "local-sim", "engines": engines}).engines] == ["mine"]


def test_a_field_a_client_or_a_file_gives_is_kept_over_the_preset_even_at_a_default_value(served_params):
    """Not the form: the REST API (Airflow fills the params a conf leaves out with their defaults, and the
    run's own conf says what was given) and a config file. quality and trace are off by default and on in
    local-sim: switched off over the preset, they stay off."""
    from dayone_airflow.glue import config_from_params
    from tasks.config import RunConfig, parse_run_config

    off = {"quality": {"enabled": False}, "trace": {"enabled": False}}
    assert RunConfig().scenarios.quality.enabled is False and RunConfig().scenarios.trace.enabled is False
    conf = {"preset": "local-sim", "scenarios": off}
    params = {**_form_values(served_params), **conf}  # top-level keys replace, as Airflow merges
    sim = _demo("sim.yaml")
    for cfg in (parse_run_config(config_from_params(params, conf)), parse_run_config(conf)):
        assert not cfg.scenarios.quality.enabled and not cfg.scenarios.trace.enabled
        assert cfg.scenarios.short == sim.scenarios.short and cfg.engines == sim.engines  # the rest: the preset's
    # without the run's conf, a value at the default cannot be told from one left out: the preset's
    assert parse_run_config(config_from_params(params)).scenarios.quality.enabled is True
    # the form's conf says which preset its fields showed: a field left as shown still takes the preset's
    form = {**_form_values(served_params), "preset": "local-sim"}
    assert parse_run_config(config_from_params(form, form)) == sim


def test_an_unknown_preset_is_refused_naming_the_field_and_the_choices(served_params):
    from airflow.exceptions import ParamValidationError

    from tasks.config import ConfigError

    with pytest.raises(ParamValidationError) as info:
        served_params.deep_merge({"preset": "laptop"}).validate()
    assert "param preset" in str(info.value) and "local-sim" in str(info.value)
    with pytest.raises(ConfigError) as error:
        _parsed({**_form_values(served_params), "preset": "laptop"})
    assert error.value.problems == [("preset", "unknown preset 'laptop'",
                                     "use one of protocol, local-sim, local-llamacpp-ab, local-vllm-sglang, "
                                     "spec-decoding-sglang, spec-decoding-vllm, custom")]


def test_the_protocol_preset_names_its_engines_and_refuses_a_run_until_each_has_an_image(served_params):
    from tasks.config import ConfigError

    form = {**_form_values(served_params), "preset": "protocol"}
    with pytest.raises(ConfigError) as error:
        _parsed(form)
    [(field, problem, fix)] = error.value.problems
    assert field == "engines[0].image" and "kubernetes" in problem and "lmsysorg/sglang" in fix
    images = [{"name": "sglang", "dialect": "sglang", "image": "lmsysorg/sglang:v0.5.0"},
              {"name": "vllm", "dialect": "vllm", "image": "vllm/vllm-openai:v0.10.0"}]
    cfg = _parsed({**form, "engines": images})
    assert cfg.target == "kubernetes" and [e.dialect for e in cfg.engines] == ["sglang", "vllm"]
    assert cfg.model.context_limit_tokens == 1_048_576  # the method's sizes: RunConfig's own
    assert {e.launcher for e in cfg.engines} == {"sim"} and cfg.target != "local"  # no simulator runs on a cluster


@pytest.fixture()
def local_sim_form(airflow_db, monkeypatch):
    """dayone_eval's params as `make ui` parses them: the Variable dayone_eval_preset = local-sim."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    monkeypatch.setenv("AIRFLOW_VAR_DAYONE_EVAL_PRESET", "local-sim")
    bag = DagBag(dag_folder=str(REPO / "dags" / "dayone_eval.py"))
    assert not bag.import_errors, bag.import_errors
    return DagSerialization.from_dict(DagSerialization.to_dict(bag.get_dag("dayone_eval"))).params


def test_the_form_shows_the_values_of_the_preset_its_variable_names(local_sim_form):
    form = _form_values(local_sim_form)
    sim = _demo("sim.yaml")
    assert form["preset"] == form["fields_preset"] == "local-sim"
    assert form["model"]["context_limit_tokens"] == sim.model.context_limit_tokens == 32768
    assert form["scenarios"]["short"]["concurrency"] == [1, 4]
    assert [e["name"] for e in form["engines"]] == ["sim-sglang", "sim-vllm"]
    assert form["request_timeout_s"] == 60
    assert _parsed(form) == sim  # what the form shows is what runs
    description = local_sim_form.get_param("preset").schema["description_md"]
    assert "show `local-sim`'s values" in description
    assert "| `protocol` | sglang (sglang, image to give), vllm (vllm, image to give) | kubernetes | 1,048,576 |" in description


def test_another_preset_replaces_every_field_left_as_shown_and_keeps_a_changed_one(local_sim_form):
    from tasks.config import RunConfig

    form = _form_values(local_sim_form)
    assert _parsed({**form, "preset": "custom"}) == RunConfig()
    assert _parsed({**form, "preset": "local-llamacpp-ab"}) == _demo("llamacpp-ab.yaml")
    changed = json.loads(json.dumps(form))
    changed["scenarios"]["short"]["rounds"] = 1
    cfg = _parsed({**changed, "preset": "custom"})
    assert cfg.scenarios.short.rounds == 1  # yours
    assert cfg.scenarios.short.concurrency == [1, 4, 8, 16, 32] and cfg.model.context_limit_tokens == 1_048_576
    # the REST API with the nested conf alone: the DAG's values under it, as Airflow merges them
    assert _parsed({**form, "preset": "local-llamacpp-ab", "request_timeout_s": 30}).request_timeout_s == 30


def test_an_unknown_preset_in_the_variable_fails_the_import_naming_it(airflow_db, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW_VAR_DAYONE_EVAL_PRESET", "laptop")
    bag = DagBag(dag_folder=str(REPO / "dags" / "dayone_eval.py"))
    [error] = bag.import_errors.values()
    assert "dayone_eval_preset: unknown preset 'laptop'" in error and "local-sim" in error


def test_titles_read_as_words_with_units_and_experiment_is_empty_not_null(served_params):
    for name in served_params:
        title = served_params.get_param(name).schema["title"]
        assert title != name and "_" not in title, (name, title)  # never the raw name
        assert "_" not in name or title != name.replace("_", " ").title(), (name, title)  # nor "Request Timeout S"
    assert served_params.get_param("request_timeout_s").schema["title"] == "Request timeout (seconds)"
    experiment = served_params.get_param("experiment")
    assert experiment.value == {} and "Empty ({}): no experiment" in experiment.description
    assert _parsed(_form_values(served_params)).experiment is None
    values = served_params.deep_merge({}).validate()  # Airflow's own check takes {} too
    assert values["experiment"] == {}


def test_make_ui_shows_local_sim_unless_the_user_chose_a_preset(airflow_db, monkeypatch):
    from airflow.models.variable import Variable

    from dayone_airflow.ui import eval_preset_env

    monkeypatch.delenv("AIRFLOW_VAR_DAYONE_EVAL_PRESET", raising=False)
    assert eval_preset_env() == {"AIRFLOW_VAR_DAYONE_EVAL_PRESET": "local-sim"}
    monkeypatch.setenv("AIRFLOW_VAR_DAYONE_EVAL_PRESET", "local-llamacpp-ab")
    assert eval_preset_env() == {}  # the user's, in the environment
    monkeypatch.delenv("AIRFLOW_VAR_DAYONE_EVAL_PRESET")
    Variable.set("dayone_eval_preset", "custom")
    try:
        assert eval_preset_env() == {}  # the user's, in the metadata DB
    finally:
        Variable.delete("dayone_eval_preset")


def test_every_number_field_carries_its_bounds_to_the_form(served_params):
    """Airflow's number field keeps a value within the schema's minimum and maximum (it reads no
    exclusiveMinimum): a timeout that must be above 0 gets minimum 0, and Airflow's check still refuses 0."""
    from airflow.exceptions import ParamValidationError

    for name in served_params:
        schema = served_params.get_param(name).schema
        if schema.get("type") in ("number", "integer"):
            assert "minimum" in schema, name
    assert served_params.get_param("request_timeout_s").schema["minimum"] == 0
    assert served_params.get_param("round_error_rate_max").schema["maximum"] == 1
    with pytest.raises(ParamValidationError):
        served_params.deep_merge({"request_timeout_s": 0}).validate()

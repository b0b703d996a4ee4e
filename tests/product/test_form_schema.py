"""The trigger form's JSON schemas as Airflow's API applies them (SerializedParamsDict.validate).

The REST test (test_trigger_form_api.py) sees the DayOne check answer first; this one shows that the
schemas alone, as the API server deserializes them, reject the per-field mistakes too.
"""

from __future__ import annotations

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


def test_every_field_has_a_title_and_description(served_params):
    sections = set()
    for name in served_params:
        param = served_params.get_param(name)
        assert param.schema.get("title") and param.description, name
        sections.add(param.schema.get("section"))
        defs = param.schema.get("$defs", {})
        for defn in defs.values():
            for field, prop in defn.get("properties", {}).items():
                ref = prop.get("$ref", "").removeprefix("#/$defs/")
                title = prop.get("title") or (defs[ref].get("title") if ref else None)  # a sub-section's own title
                assert title and prop.get("description"), (name, field)
    assert {"Model", "Engines", "Scenarios", "Where"} <= sections


def test_the_engine_form_shows_llamacpps_settings_and_checks_them(served_params):
    from airflow.exceptions import ParamValidationError

    from tasks.config import LlamaCppSettings

    engine = served_params.get_param("engines").schema["$defs"]["EngineSpec"]["properties"]
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

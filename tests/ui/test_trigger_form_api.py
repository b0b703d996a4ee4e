"""The trigger form through the REST API of a running `airflow standalone`: `make ui`'s stack, the one the
newcomer's test uses after (tests/ui/conftest.py), started once for both.

Bad confs get HTTP 400 naming the field before any run exists; a good conf creates a run. The
DAG stays paused, so the good run is only queued and nothing deploys.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from ui_limits import API_TIMEOUT_S

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]

BAD_CONFS = [
    ({"engines": [{"name": "sim-a", "dialect": "sglang", "image": "Not An Image!"}]}, "engines[0].image"),
    ({"scenarios": {"short": {"concurrency": [0, 4]}}}, "scenarios.short.concurrency[0]"),
    ({"model": {"name": "m", "context_limit_tokens": 32768},
      "scenarios": {"long_context": {"lengths": [65536]}, "boundary": {"enabled": False}}},
     "scenarios.long_context.lengths[0]"),
    ({"engines": [{"name": "sim-a", "dialect": "tgi"}]}, "engines[0].dialect"),
    ({"preset": "protocol"}, "engines[0].image"),  # the protocol's engines wait for their images
]
GOOD_CONF = {
    "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
    "engines": [{"name": "sim-a", "dialect": "sglang", "image": "lmsysorg/sglang:v0.5.0"}],
    "scenarios": {"short": {"concurrency": [1, 4], "rounds": 1, "requests_per_round": 8},
                  "long_context": {"lengths": [16384]}, "boundary": {"enabled": False}},
}


@pytest.fixture(scope="module")
def api_client(ui_stack):
    """An API client of `make ui`'s stack (tests/ui/conftest.py), signed in as its admin. dayone_eval stays
    paused (as a fresh stack has it) until the newcomer triggers it, so the runs made here only queue; they
    are deleted after, so the newcomer's run is the stack's only one."""
    client = httpx.Client(base_url=ui_stack.base_url, headers={"Authorization": f"Bearer {ui_stack.token}"},
                          timeout=API_TIMEOUT_S)
    dag = client.get("/api/v2/dags/dayone_eval")
    assert dag.status_code == 200 and dag.json()["is_paused"], dag.text
    before = {d["dag_run_id"] for d in _runs(client)}
    yield client
    made = [d["dag_run_id"] for d in _runs(client) if d["dag_run_id"] not in before]
    for run_id in made:
        r = client.delete(f"/api/v2/dags/dayone_eval/dagRuns/{run_id}")
        assert r.status_code == 204, (run_id, r.status_code, r.text)
    client.close()


def _runs(client: httpx.Client) -> list[dict]:
    r = client.get("/api/v2/dags/dayone_eval/dagRuns")
    assert r.status_code == 200, r.text
    return r.json()["dag_runs"]


def test_bad_confs_get_400_naming_the_field_and_a_good_one_is_accepted(api_client):
    client = api_client
    before = len(_runs(client))
    for conf, field in BAD_CONFS:
        r = client.post("/api/v2/dags/dayone_eval/dagRuns", json={"logical_date": None, "conf": conf})
        assert r.status_code == 400, (field, r.status_code, r.text)
        detail = r.json()["detail"]
        assert field in detail, (field, detail)
        assert "Fix:" in detail, detail
    assert len(_runs(client)) == before, "a rejected conf must not create a run"

    r = client.post("/api/v2/dags/dayone_eval/dagRuns", json={"logical_date": None, "conf": GOOD_CONF})
    assert r.status_code == 200, r.text
    run = r.json()
    assert run["conf"]["engines"][0]["image"] == "lmsysorg/sglang:v0.5.0"
    assert run["dag_run_id"] in {d["dag_run_id"] for d in _runs(client)}

    # The nightly DAG, and a backfill request of it, go through the same check.
    r = client.post("/api/v2/dags/dayone_nightly/dagRuns",
                    json={"logical_date": None, "conf": BAD_CONFS[1][0]})
    assert r.status_code == 400 and BAD_CONFS[1][1] in r.json()["detail"], r.text
    r = client.post("/api/v2/backfills", json={
        "dag_id": "dayone_nightly", "from_date": "2026-11-20T00:00:00Z", "to_date": "2026-11-22T00:00:00Z",
        "dag_run_conf": BAD_CONFS[0][0]})
    assert r.status_code == 400 and BAD_CONFS[0][1] in r.json()["detail"], r.text


def test_the_form_schema_is_served_with_sections_titles_and_descriptions(api_client):
    r = api_client.get("/api/v2/dags/dayone_eval/details")
    assert r.status_code == 200, r.text
    params = r.json()["params"]
    for name in ("model", "engines", "scenarios", "slo", "target", "dry_run"):
        assert name in params, name
        schema = params[name]["schema"]
        assert schema.get("title") and schema.get("section") and params[name]["description"], (name, schema)
    engine = params["engines"]["schema"]["items"]["properties"]
    assert params["engines"]["schema"]["items"]["type"] == "object"  # a JSON editor, not lines of text
    assert engine["dialect"]["enum"] == ["sglang", "vllm", "llamacpp", "openai"]
    assert "pattern" in engine["image"]
    assert params["preset"]["schema"]["enum"][:3] == ["protocol", "local-sim", "local-llamacpp-ab"]


def _parsed(params: dict, conf: dict):
    """What the plan step parses: the served param values with the run's conf over them."""
    from dayone_airflow.glue import config_from_params
    from tasks.config import parse_run_config

    return parse_run_config(config_from_params({**{k: p["value"] for k, p in params.items()}, **conf}, conf))


def test_a_preset_alone_triggers_the_simulator_demo_and_an_unknown_one_is_refused(api_client):
    import yaml

    from tasks.config import parse_run_config

    client = api_client
    params = client.get("/api/v2/dags/dayone_eval/details").json()["params"]
    sim = parse_run_config(yaml.safe_load((REPO / "tasks" / "config" / "presets" / "sim.yaml").read_text(encoding="utf-8")))
    form = {k: p["value"] for k, p in params.items()}
    # the REST API with the preset alone, and the form, which posts every field as shown
    for conf in ({"preset": "local-sim"}, {**form, "preset": "local-sim"}):
        r = client.post("/api/v2/dags/dayone_eval/dagRuns", json={"logical_date": None, "conf": conf})
        assert r.status_code == 200, r.text
        assert _parsed(params, r.json()["conf"]) == sim
    # a client's field at a default's value is its own: local-sim's quality and trace switched off stay off
    off = {"preset": "local-sim", "scenarios": {"quality": {"enabled": False}, "trace": {"enabled": False}}}
    r = client.post("/api/v2/dags/dayone_eval/dagRuns", json={"logical_date": None, "conf": off})
    assert r.status_code == 200, r.text
    cut = _parsed(params, r.json()["conf"])
    assert not cut.scenarios.quality.enabled and not cut.scenarios.trace.enabled, cut.scenarios
    assert cut.scenarios.short == sim.scenarios.short and cut.engines == sim.engines

    before = len(_runs(client))
    r = client.post("/api/v2/dags/dayone_eval/dagRuns", json={"logical_date": None, "conf": {"preset": "laptop"}})
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert ("preset: unknown preset 'laptop'. Fix: use one of protocol, local-sim, local-llamacpp-ab, "
            "local-vllm-sglang, spec-decoding-sglang, spec-decoding-vllm, custom") in detail, detail
    assert len(_runs(client)) == before

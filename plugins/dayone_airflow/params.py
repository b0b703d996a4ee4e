"""The trigger form: one Param per top-level field of the run config, with its JSON schema.

The schema comes from tasks/config.py (RunConfig), so the form and the validation that every
other entry point uses cannot drift apart; the plan step re-validates everything with the
cross-field rules a JSON schema cannot express.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from airflow.sdk import Param

from tasks.config import RunConfig

SECTIONS = {
    "target": "Where", "dry_run": "Where", "kubernetes": "Where",
    "model": "What", "engines": "What",
    "scenarios": "Scenarios", "slo": "Scenarios", "request_timeout_s": "Scenarios", "round_error_rate_max": "Scenarios",
    "archive": "Results", "thresholds": "Results",
}


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return RunConfig.model_json_schema()


def eval_params(defaults: dict[str, Any] | None = None) -> dict[str, Param]:
    schema = _schema()
    defs = schema.get("$defs", {})
    values = RunConfig().model_dump(mode="json")
    values.update(defaults or {})
    params: dict[str, Param] = {}
    for name, prop in schema["properties"].items():
        if name == "run_id":
            continue  # set by the pipeline from the Airflow run
        prop = dict(prop)
        title = prop.pop("title", name)
        description = prop.pop("description", None) or title
        prop.pop("default", None)
        if "$ref" in prop or "anyOf" in prop or "items" in prop:
            prop["$defs"] = defs
        params[name] = Param(values[name], title=title, description=description, section=SECTIONS.get(name), **prop)
    return params

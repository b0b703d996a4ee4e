"""The trigger form: one Param per top-level field of the run config, with its JSON schema.

The schema comes from tasks/config.py (RunConfig), so the form and the validation that every
other entry point uses cannot drift apart; the plan step re-validates everything with the
cross-field rules a JSON schema cannot express. Each param's schema is self-contained (no `$ref`), so
the UI picks its widget from `type` alone: a JSON editor for a section or the engines list.

The first param, `preset`, names a starting point (tasks/presets/) that parse_run_config lays
under the other fields: the form cannot change its fields' values when a preset is picked.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from airflow.sdk import Param

from tasks.config import RunConfig
from tasks.presets import PRESET_FIELD, PRESETS, PROTOCOL

# Form sections, in the order a person fills them in.
SECTIONS = {
    PRESET_FIELD: "Preset",
    "model": "Model",
    "engines": "Engines", "experiment": "Engines",
    "scenarios": "Scenarios", "load": "Scenarios", "measurement": "Scenarios",
    "slo": "SLOs and limits", "request_timeout_s": "SLOs and limits", "round_error_rate_max": "SLOs and limits",
    "target": "Where", "dry_run": "Where", "kubernetes": "Where", "telemetry": "Where",
    "archive": "Results", "thresholds": "Results",
}
ORDER = tuple(SECTIONS)


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    schema = RunConfig.model_json_schema()
    return _nullable_inline(schema, schema.get("$defs", {}))


def _nullable_inline(node: Any, defs: dict[str, Any]) -> Any:
    """`anyOf: [X, {type: null}]` -> X with `type: [X.type, "null"]`, everywhere in the schema; an
    X that is a `$ref` (an optional sub-section, e.g. engines[i].llamacpp) is inlined from `defs`.

    An error inside an anyOf branch loses its path in the form's message ("0 is less than the
    minimum of 1", but which field?); inlined, the message says `On instance['short']['rounds']`.
    """
    if isinstance(node, list):
        return [_nullable_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _nullable_inline(v, defs) for k, v in node.items()}
    branches = node.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        other = next(b for b in branches if b != {"type": "null"})
        ref = other.get("$ref", "")
        if len(other) == 1 and ref.startswith("#/$defs/"):
            other = _nullable_inline(defs[ref.removeprefix("#/$defs/")], defs)
        if isinstance(other.get("type"), str) and "$ref" not in other:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged = {**other, **merged} if ref else {**merged, **other}  # the field's title wins over its model's
            merged["type"] = [other["type"], "null"]
            if "enum" in other:
                merged["enum"] = [*other["enum"], None]
            return merged
    return node


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    """Every `$ref` replaced by its definition (the field's own keys win over its model's). The UI picks
    a param's widget by its `type` and an array's `items.type` and follows no `$ref`: engines, an array
    of `$ref` items, showed as a list of strings, `[object Object]`; with object items it is a JSON editor."""
    if isinstance(node, list):
        return [_inlined(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        node = {**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}}
    return {k: _inlined(v, defs) for k, v in node.items()}


def _without_object_defaults(node: Any) -> Any:
    """Drop nested object defaults (a whole sub-config repeated in the schema); the param's value has them."""
    if isinstance(node, dict):
        return {k: _without_object_defaults(v) for k, v in node.items() if not (k == "default" and isinstance(v, dict))}
    if isinstance(node, list):
        return [_without_object_defaults(v) for v in node]
    return node


def _preset_param(default: str = PROTOCOL) -> Param:
    return Param(
        default, title="Preset", section=SECTIONS[PRESET_FIELD], type="string", enum=list(PRESETS),
        values_display={name: f"{name}: {p.title}" for name, p in PRESETS.items()},
        description="A named starting point for the run (tasks/presets/): protocol is the full method, for GPU "
                    "servers; local-sim and local-llamacpp-ab run on a laptop (tasks/presets/*.yaml). Every field below "
                    "left at the value shown takes the preset's value; a field you change keeps yours.")


def eval_params(defaults: dict[str, Any] | None = None) -> dict[str, Param]:
    schema = _schema()
    defs = schema.get("$defs", {})
    values = RunConfig().model_dump(mode="json")
    values.update(defaults or {})
    params: dict[str, Param] = {PRESET_FIELD: _preset_param(values.get(PRESET_FIELD, PROTOCOL))}
    ordered = sorted(schema["properties"].items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))
    for name, prop in ordered:
        if name == "run_id":
            continue  # set by the pipeline from the Airflow run
        title = prop.get("title", name)  # the field's; an inlined model's own is its class name
        prop = _without_object_defaults(_inlined(prop, defs))
        description = prop.pop("description", None) or title
        for key in ("title", "default"):
            prop.pop(key, None)
        params[name] = Param(values[name], title=title, description=description, section=SECTIONS.get(name), **prop)
    return params

"""The trigger form: one Param per top-level field of the run config, with its JSON schema.

The schema comes from tasks/config/ (RunConfig), so the form cannot drift from the validation every
other entry point uses; the plan step adds the cross-field rules a JSON schema cannot express. Each
param's schema is self-contained (no `$ref`), so the UI picks its widget from `type` alone. The first
param, `preset`, names a starting point laid under the other fields; the hidden `fields_preset` says
which preset the fields show (the DAG's default: for dayone_eval the Variable `dayone_eval_preset`).
How a preset merges, and why: tasks/config/presets/.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from airflow.sdk import Param

from tasks.config import RunConfig
from tasks.config.presets import DEFAULT_PRESET, PRESET_FIELD, PRESETS, SHOWN_FIELD, overlay, preset_values

log = logging.getLogger("dayone.airflow.params")

EVAL_PRESET_VARIABLE = "dayone_eval_preset"
NO_EXPERIMENT: dict[str, Any] = {}  # the form's JSON editor shows a null object as {}: {} says "none" outright

# Form sections, in the order a person fills them in.
SECTIONS = {
    PRESET_FIELD: "Preset", SHOWN_FIELD: "Preset",
    "model": "Model",
    "engines": "Engines", "experiment": "Engines",
    "scenarios": "Scenarios", "load": "Scenarios", "measurement": "Scenarios",
    "slo": "SLOs and limits", "request_timeout_s": "SLOs and limits", "round_error_rate_max": "SLOs and limits",
    "step_failed_share_max": "SLOs and limits",
    "target": "Where", "dry_run": "Where", "kubernetes": "Where", "telemetry": "Where",
    "archive": "Results", "thresholds": "Results", "choice": "Results",
}
ORDER = tuple(SECTIONS)


@lru_cache(maxsize=1)
def form_schema() -> dict[str, Any]:
    """RunConfig's JSON schema as the form shows it (nullable fields inlined), computed once a process."""
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


def eval_defaults() -> dict[str, Any] | None:
    """dayone_eval's default preset: the Airflow Variable `dayone_eval_preset`, read at parse as the nightly
    reads its config; None while it is unset (the `custom` preset: RunConfig's defaults). `make ui` sets it
    to local-sim through the environment. An unknown name fails the DAG's import, listing the presets."""
    from airflow.sdk import Variable

    try:
        name = Variable.get(EVAL_PRESET_VARIABLE, default=None)
    except Exception as exc:  # noqa: BLE001  (no metadata DB or API at parse time: the params' defaults)
        log.warning("Variable %s unreadable (%s); dayone_eval's form shows the %s preset", EVAL_PRESET_VARIABLE,
                    exc, DEFAULT_PRESET)
        return None
    name = (name or "").strip()
    if not name:
        return None
    if name not in PRESETS:
        raise ValueError(f"Variable {EVAL_PRESET_VARIABLE}: unknown preset {name!r}. Fix: use one of {', '.join(PRESETS)}")
    return {PRESET_FIELD: name}


def _preset_summary(name: str, defaults: dict[str, Any]) -> str:
    """One table row: what a preset runs, in the fields a person checks first."""
    v = preset_values(name, defaults)
    engines = ", ".join(f"{e['name']} ({e['dialect']}" + (f", image {e['image']}" if e.get("image") else
                                                          ", image to give" if v["target"] == "kubernetes" else "")
                        + ")" for e in v["engines"])
    concurrency = ", ".join(str(c) for c in v["scenarios"]["short"]["concurrency"])
    return (f"| `{name}` | {engines} | {v['target']} | {v['model']['context_limit_tokens']:,} | {concurrency} "
            f"| {v['request_timeout_s']:g} |")


def _preset_params(shown: str, defaults: dict[str, Any]) -> dict[str, Param]:
    table = "\n".join(_preset_summary(name, defaults) for name in PRESETS)
    return {
        PRESET_FIELD: Param(
            shown, title="Preset", section=SECTIONS[PRESET_FIELD], type="string", enum=list(PRESETS),
            values_display={name: f"{name}: {p.title}" for name, p in PRESETS.items()}, description=None,
            description_md=(
                f"A named starting point (tasks/config/presets/*.yaml). **The fields below show `{shown}`'s values.** "
                f"Pick another preset and every field left as shown takes that preset's value (below); a field "
                f"you change keeps yours.\n\n| preset | engines | where | context (tokens) | short concurrency "
                f"| request timeout (s) |\n|---|---|---|---|---|---|\n{table}")),
        # Hidden (a `const` param): which preset's values the fields show, so "left as shown" is known.
        SHOWN_FIELD: Param(
            shown, const=shown, type="string", title="Fields shown from preset", section=SECTIONS[SHOWN_FIELD],
            description="The preset whose values the form's fields show (set by the DAG, not by a person)."),
    }


def eval_params(defaults: dict[str, Any] | None = None) -> dict[str, Param]:
    """The form's params: `defaults` (a run config, may name a preset; for the nightly its Variable's) over
    its preset's values, which the fields show."""
    schema = form_schema()
    defs = schema.get("$defs", {})
    doc = dict(defaults or {})
    shown = doc.pop(PRESET_FIELD, None) or DEFAULT_PRESET
    doc.pop(SHOWN_FIELD, None)
    protocol_defaults = RunConfig().model_dump(mode="json")
    values = overlay(preset_values(shown, protocol_defaults), doc)
    if values.get("experiment") is None:
        values["experiment"] = NO_EXPERIMENT
    params = _preset_params(shown, protocol_defaults)
    ordered = sorted(schema["properties"].items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))
    for name, prop in ordered:
        if name == "run_id":
            continue  # set by the pipeline from the Airflow run
        title = prop.get("title", name)  # the field's; an inlined model's own is its class name
        prop = _without_object_defaults(_inlined(prop, defs))
        description = prop.pop("description", None) or title
        for key in ("title", "default"):
            prop.pop(key, None)
        if "exclusiveMinimum" in prop and "minimum" not in prop:
            prop["minimum"] = prop["exclusiveMinimum"]  # the form's number field bounds only by minimum/maximum
        if name == "experiment":
            prop.pop("required", None)  # {} is "no experiment" (glue.config_from_params); parse checks the rest
        params[name] = Param(values[name], title=title, description=description, section=SECTIONS.get(name), **prop)
    return params


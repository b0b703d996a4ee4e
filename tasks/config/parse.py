"""Parse a run config: validate it and turn every error into (field path, what is wrong, the fix).

One kind of message for every entry point: ``<field path>: <what is wrong>. Fix: <what to do>``; the
fix is the one the field carries (its `Fix`), else the one a check's own message gives.
"""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tasks.config.base import ConfigError, Fix, field_path
from tasks.config.llamacpp import LlamaCppSettings
from tasks.config.run import RunConfig
from tasks.config.presets import PRESET_FIELD, PRESETS, is_preset, with_preset
from tasks.config.sim_profile import Profile

_NO_FIX = "see this field's description in the trigger form (or its Field in tasks/config/)"


def _section(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (through lists and optionals), and whether a dict key comes before it."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = get_origin(annotation)
    if origin in (list, Union, types.UnionType):
        for arg in get_args(annotation):
            model, keyed = _section(arg)
            if model is not None:
                return model, keyed
    elif origin is dict:
        return _section(get_args(annotation)[1])[0], True
    return None, False


def fix_for(path: str) -> str:
    """The fix of the field a path names, else of the nearest field above it whose fix covers its inside."""
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    model: type[BaseModel] | None = RunConfig
    covering: Fix | None = None
    i = 0
    while model is not None and i < len(parts):
        info = model.model_fields.get(parts[i])
        if info is None:
            break
        fix = next((m for m in info.metadata if isinstance(m, Fix)), None)
        if fix is not None and i == len(parts) - 1:
            return fix.text
        if fix is not None and fix.inside:
            covering = fix
        model, keyed = _section(info.annotation)
        i += 2 if keyed else 1
    return covering.text if covering else _NO_FIX


# Sections whose field names an unknown-field fix lists (what a typo there was likely meant to be).
_LISTED_FIELDS = {"llamacpp": LlamaCppSettings.model_fields, "sim_profile": Profile.model_fields}


def _unknown_fix(path: str) -> str:
    parent = re.sub(r"\[\d+\]", "", path).split(".")[-2:-1]
    known = _LISTED_FIELDS.get(parent[0]) if parent else None
    return "remove it or check its spelling" + (f" (known: {', '.join(known)})" if known else "")


def parse_run_config(data: dict[str, Any] | None) -> RunConfig:
    """Validate a run config dict; raise ConfigError naming every bad field and its fix."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([("config", f"expected an object, got {type(data).__name__}", "pass a JSON object")])
    if PRESET_FIELD in data:  # a named starting point under the fields given (tasks/presets.py)
        if not is_preset(data[PRESET_FIELD]):
            raise ConfigError([(PRESET_FIELD, f"unknown preset {data[PRESET_FIELD]!r}",
                                f"use one of {', '.join(PRESETS)}")])
        data = with_preset(data, RunConfig().model_dump(mode="json"))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            path = field_path(tuple(err["loc"]))
            if err["type"] == "extra_forbidden":
                problems.append((path, "unknown field", _unknown_fix(path)))
                continue
            msg = err["msg"].removeprefix("Value error, ")
            fix = None
            if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
                # e.g. the form's text box turned an engine into a string: the fix is the shape, not the field
                fix = ('give each engine as a JSON object, e.g. {"name": "sim-a", "dialect": "sglang"}'
                       if path.startswith("engines[") else "give a JSON object with this section's fields")
            elif err["type"] == "value_error":
                # A model's own check names its field (relative to the model) and may say the fix.
                m = re.match(r"^([A-Za-z_][\w.\[\]]*): (.*)$", msg, re.S)
                if m:
                    field, msg = m.groups()
                    if path == "config":
                        path = field
                    elif not path.endswith(field):
                        path = f"{path}.{field}"
                msg, _, fix = msg.partition(". Fix: ")
            problems.append((path, msg, fix or fix_for(path)))
        raise ConfigError(problems) from None


def read_config_file(path: str) -> dict[str, Any]:
    """A run config from a YAML or JSON file; an unreadable or malformed file is a ConfigError."""
    import yaml  # only the CLI entry points read files

    try:
        with open(path, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([("--config", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}",
                            "give the path of a YAML or JSON run config file")]) from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError([("--config", f"{path} is not valid YAML or JSON ({first})", "fix the file's syntax")]) from None
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError([("config", f"{path} holds a {type(config).__name__}, not a mapping of run config fields",
                            "give an object, e.g. {engines: [{name: sim-a, dialect: sglang}]}")])
    return config

"""Named starting points for a run config: the trigger form's `preset` field, or `preset:` in a config file.

`protocol` is the full method: RunConfig's own defaults (a 1M-token context, needles up to 524K
tokens, GPU servers). The others are the YAML files beside this module (`make demo` runs them), sized
for a laptop.

A preset lies UNDER the config given with it: a field left at its protocol default takes the
preset's value, a field given any other value keeps it (sections merge field by field, lists are
replaced whole). That is what the trigger form needs: it sends every field, changed or not.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PRESET_FIELD = "preset"
PROTOCOL = "protocol"
PRESET_DIR = Path(__file__).resolve().parent  # shipped as package data: the runner image has them too


@dataclass(frozen=True)
class Preset:
    title: str
    file: str | None = None  # beside this module; None: the protocol's defaults alone


PRESETS = {
    PROTOCOL: Preset("the full method (PROTOCOL.md): 1M-token context, needles up to 524K tokens; GPU servers"),
    "local-sim": Preset("DayOne's engine simulator, SGLang and vLLM dialects, every stage; minutes on a laptop",
                        "sim.yaml"),
    "local-llamacpp-ab": Preset("llama.cpp serving SmolLM2-135M, 1 vs 4 parallel slots; minutes on a laptop CPU",
                                "llamacpp-ab.yaml"),
}


@lru_cache(maxsize=None)
def _preset_config(name: str) -> dict[str, Any]:
    file = PRESETS[name].file
    if file is None:
        return {}
    import yaml

    return yaml.safe_load((PRESET_DIR / file).read_text(encoding="utf-8")) or {}


def preset_config(name: str) -> dict[str, Any]:
    """The fields a preset sets (a copy; empty for the protocol)."""
    return copy.deepcopy(_preset_config(name))


def is_preset(name: Any) -> bool:
    return isinstance(name, str) and name in PRESETS


def with_preset(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`data` without its `preset` field, over that preset's config; a value equal to its protocol
    default in `defaults` counts as not given. The preset must be known (`is_preset`)."""
    given = {k: v for k, v in data.items() if k != PRESET_FIELD}
    return _under(preset_config(data.get(PRESET_FIELD, PROTOCOL)), given, defaults)


_ABSENT = object()


def _under(preset: Any, given: Any, default: Any) -> Any:
    if given is _ABSENT or given == default:  # left at the protocol's value: the preset's, if it sets one
        return given if preset is _ABSENT else preset
    if isinstance(preset, dict) and isinstance(given, dict):
        default = default if isinstance(default, dict) else {}
        return {k: _under(preset.get(k, _ABSENT), given.get(k, _ABSENT), default.get(k, _ABSENT))
                for k in {**preset, **given}}
    return given

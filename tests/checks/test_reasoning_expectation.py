"""reasoning_split against the simulator: what the run config knows of the model, and which field
carried the reasoning.

- No reasoning at all is not_applicable while the model is not known to reason (model.reasoning
  null or false), and a fail when the run config says it reasons (model.reasoning: true).
- The evidence names the field that carried the reasoning, unstreamed and streamed: the dialect's
  own field, the other one (an older vLLM's `reasoning_content`), or inline `<think>` in the content.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tasks.checks import reasoning_split, run_check
from tasks.checks.base import Probe
from tasks.config import parse_run_config
from tasks.engines.context import endpoint_for
from tasks.sim.process import start_sim


@contextmanager
def probe_of(dialect: str, profile: dict[str, Any], model_reasons: bool | None) -> Iterator[Probe]:
    with start_sim(dialect, profile) as sim, httpx.Client(timeout=30) as client:
        config = parse_run_config({"run_id": "reasoning-run", "model": {"reasoning": model_reasons},
                                   "engines": [{"name": "sim", "dialect": dialect}], "request_timeout_s": 30})
        yield Probe(endpoint_for(config, "sim", sim.url, "sha256:" + "0" * 64), client, config.model.reasoning)


def test_model_reasoning_is_unknown_by_default_and_described_for_the_form():
    field = parse_run_config({}).model.reasoning
    assert field is None
    schema = parse_run_config({}).model_json_schema()["$defs"]["ModelSpec"]["properties"]["reasoning"]
    assert "reasoning_split" in schema["description"]


@pytest.mark.parametrize("model_reasons", [None, False])
def test_no_reasoning_is_not_applicable_while_the_model_is_not_known_to_reason(model_reasons):
    with probe_of("sglang", {"reasoning": False}, model_reasons) as probe:
        result = run_check(reasoning_split, probe)
    assert result.outcome == "not_applicable", result.evidence
    assert result.evidence["reasoning_field"] is None and result.evidence["streamed_reasoning_field"] is None


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_no_reasoning_fails_when_the_run_config_says_the_model_reasons(dialect):
    with probe_of(dialect, {"reasoning": False}, True) as probe:
        result = run_check(reasoning_split, probe)
    assert result.outcome == "fail", result.evidence
    assert "model.reasoning: true" in result.evidence["reason"]
    assert result.evidence["status"] == 200


@pytest.mark.parametrize("dialect,profile,carrier", [
    ("sglang", {}, "reasoning_content"),
    ("vllm", {}, "reasoning"),
    ("vllm", {"quirks": {"reasoning_field": "reasoning_content"}}, "reasoning_content"),  # an older vLLM
    ("sglang", {"quirks": {"reasoning_field": "reasoning"}}, "reasoning"),
])
def test_the_evidence_names_the_field_that_carried_the_reasoning(dialect, profile, carrier):
    with probe_of(dialect, {"reasoning": True, **profile}, True) as probe:
        result = run_check(reasoning_split, probe)
    assert result.outcome == "pass", result.evidence
    assert result.evidence["reasoning_field"] == carrier
    assert result.evidence["streamed_reasoning_field"] == carrier
    assert result.evidence["field"] == f"choices[0].message.{carrier}"


def test_inline_reasoning_is_named_as_inline_and_fails():
    with probe_of("vllm", {"reasoning": True, "quirks": {"reasoning_inline": True}}, None) as probe:
        result = run_check(reasoning_split, probe)
    assert result.outcome == "fail"
    assert result.evidence["reasoning_field"] == result.evidence["streamed_reasoning_field"] == "content (inline <think>)"

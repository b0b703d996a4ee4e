"""The openwebui step's reasoning verdict over the chat OpenWebUI stored (tasks/openwebui/checks.py): a thought
shown in one turn says the engine reasons, so a turn without one lost it, whatever the run knew before."""

from __future__ import annotations

import pytest

from tasks.checks.base import FAIL, NOT_APPLICABLE, PASS
from tasks.openwebui.checks import reasoning_verdict


def answer(content: str, thought: str | None = None) -> dict:
    """An assistant message as OpenWebUI stores it: the thought as a `reasoning` output item."""
    output = [{"type": "reasoning", "content": [{"type": "output_text", "text": thought}]}] if thought else []
    return {"role": "assistant", "content": content, "output": [*output, {"type": "message", "content": []}]}


@pytest.mark.parametrize("engine_reasons", [None, False])
def test_a_thought_lost_in_turn_two_fails_though_the_run_did_not_know_the_engine_reasons(engine_reasons):
    verdict = reasoning_verdict([answer("42", "17 + 25 = 42"), answer("52")], engine_reasons)
    assert verdict.outcome == FAIL, verdict.evidence
    assert "turn 2" in verdict.evidence["reason"] and "turn 1" in verdict.evidence["reason"], verdict.evidence


def test_a_thought_shown_only_in_turn_two_says_turn_one_lost_it():
    verdict = reasoning_verdict([answer("42"), answer("52", "42 + 10 = 52")], None)
    assert verdict.outcome == FAIL and "turn 1" in verdict.evidence["reason"], verdict.evidence


def test_inline_reasoning_in_a_later_turn_fails_when_no_turn_shows_a_thought():
    verdict = reasoning_verdict([answer("42"), answer("<think>add 10</think>52")], None)
    assert verdict.outcome == FAIL and "inline" in verdict.evidence["reason"], verdict.evidence


def test_no_thought_anywhere_is_not_applicable_unless_the_engine_is_known_to_reason():
    assert reasoning_verdict([answer("42"), answer("52")], None).outcome == NOT_APPLICABLE
    assert reasoning_verdict([answer("42"), answer("52")], True).outcome == FAIL


def test_every_turn_with_its_thought_apart_passes():
    verdict = reasoning_verdict([answer("42", "17 + 25"), answer("52", "42 + 10")], None)
    assert verdict.outcome == PASS, verdict.evidence

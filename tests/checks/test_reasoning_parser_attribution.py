"""A reasoning parser on a model that does not reason takes its whole reply (SGLang 0.5.18 with
--reasoning-parser qwen3 and SmolLM2: content "", every token in reasoning_content, streamed and not:
tests/fixtures/wire/sglang-0.5.18/chat.reasoning-qwen3.json). The chat checks still fail, the engine as started
serves no content, but each says where the output went and what in the run config does it, against a plain
server written here that answers that way."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "independent"))
from plain_server import PlainServer  # noqa: E402

from tasks.checks import chat, chat_streaming, openai_sdk  # noqa: E402
from tasks.checks.base import FAIL, Probe  # noqa: E402
from tasks.engines import adapter_for  # noqa: E402
from tasks.engines.context import EngineEndpoint  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/wire/sglang-0.5.18/chat.reasoning-qwen3.json"


class ParserTakesEverything(PlainServer):
    """Every token in reasoning_content, content empty, as SGLang's qwen3 parser does to a model that never
    closes a thought; `thinks` False: content empty and no reasoning either (an engine that returns nothing)."""

    thinks = True

    def completion_events(self, kind: str, prompt_tokens: int, max_tokens: int) -> list[tuple[float, dict]]:
        if kind != "chat":
            return super().completion_events(kind, prompt_tokens, max_tokens)
        events = [(0.0, self.chat_chunk({"reasoning_content": None, "role": "assistant", "content": ""}))]
        for i in range(min(max_tokens, 12)):
            delta: dict[str, Any] = {"reasoning_content": f"w{i} " if self.thinks else None}
            events.append((self.token_delay_s, self.chat_chunk(delta)))
        return events


class ReturnsNothing(ParserTakesEverything):
    thinks = False


def run(server: PlainServer, check: Any, model_reasons: bool | None) -> Any:
    endpoint = EngineEndpoint("t", "e", "sha256:x", server.url, server.model, adapter_for("sglang"))
    with httpx.Client(timeout=10) as client:
        return check.run(Probe(endpoint, client, model_reasons))


def test_the_recorded_reply_is_what_the_server_plays():
    import json

    message = json.loads(FIXTURE.read_text())["body"]["choices"][0]["message"]
    assert message["content"] == "" and message["reasoning_content"]


@pytest.mark.parametrize("check", [chat, chat_streaming, openai_sdk], ids=["chat", "chat_streaming", "openai_sdk"])
def test_an_empty_reply_whose_output_came_as_reasoning_says_so_and_still_fails(check):
    with ParserTakesEverything() as server:
        unknown = run(server, check, None)
        not_reasoning = run(server, check, False)
    for result in (unknown, not_reasoning):
        assert result.outcome == FAIL, result.evidence
        assert "came as reasoning (reasoning_content)" in result.evidence["reason"], result.evidence
        assert "drop the parser from the engine's args" in unknown.evidence["reason"]
    assert "model.reasoning: false" in not_reasoning.evidence["reason"], not_reasoning.evidence


@pytest.mark.parametrize("check", [chat, chat_streaming, openai_sdk], ids=["chat", "chat_streaming", "openai_sdk"])
def test_an_empty_reply_with_no_reasoning_either_blames_nothing_in_the_config(check):
    with ReturnsNothing() as server:
        result = run(server, check, False)
    assert result.outcome == FAIL and "reasoning" not in result.evidence["reason"], result.evidence

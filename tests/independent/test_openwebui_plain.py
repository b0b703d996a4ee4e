"""The openwebui step's verdicts against servers written for the test (not the simulator), each held
against what the real OpenWebUI stored for the chat in its own database (DATA_DIR/webui.db).

- reasoning in `reasoning_content`: OpenWebUI shows it as a thought, the answer without it;
- reasoning left inline in the content (<think>...</think>): the functional check fails it, but
  OpenWebUI parses the tags itself, so a person still sees a thought apart from the answer;
- a stream whose first chunk carries nothing visible (content and reasoning null): answered all the same;
- reasoning in a field OpenWebUI does not read: a 200 whose thought is lost, a fail.

One OpenWebUI serves the module (its start is some 17 s of CPU, mostly imports): each server is a connection
of its own (OPENAI_API_BASE_URLS takes several) under a model name of its own, and each test reads the
answers of its own chat.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from contextlib import ExitStack
from pathlib import Path

import pytest
from plain_server import PlainServer

from tasks.checks.base import FAIL, NOT_APPLICABLE, PASS
from tasks.openwebui.checks import CHAT, MODEL_LIST, PROMPTS, REASONING, USAGE, person_checks
from tasks.openwebui.server import running_openwebui, venv_path
from tasks.openwebui.session import Person

ANSWER_WORDS = 6


class ReasoningContent(PlainServer):
    """Reasons in `reasoning_content` (SGLang's and older vLLM's field), then answers."""

    model = "plain-reasoning-content"
    reasoning = ["First ", "add ", "the ", "tens. "]

    def completion_events(self, kind, prompt_tokens, max_tokens):
        events = super().completion_events(kind, prompt_tokens, ANSWER_WORDS)
        thinking = [(0.002, self.chat_chunk({self.reasoning_field: text})) for text in self.reasoning]
        return events[:1] + thinking + events[1:]

    reasoning_field = "reasoning_content"


class InlineThink(PlainServer):
    """Leaves its reasoning inline in the content, as an engine without a reasoning parser does."""

    model = "plain-inline-think"

    def completion_events(self, kind, prompt_tokens, max_tokens):
        events = super().completion_events(kind, prompt_tokens, ANSWER_WORDS)
        thinking = [(0.002, self.chat_chunk({"content": text})) for text in ("<think>", "First ", "add.", "</think>")]
        return events[:1] + thinking + events[1:]


class SilentFirstChunk(PlainServer):
    """The first streamed chunk has no visible content: no role, content and reasoning null."""

    model = "plain-silent-first-chunk"

    def completion_events(self, kind, prompt_tokens, max_tokens):
        events = super().completion_events(kind, prompt_tokens, ANSWER_WORDS)
        silent = self.chat_chunk({"content": None, "reasoning_content": None})
        return [(0.0, silent)] + events[1:]


class UnreadField(ReasoningContent):
    """Reasons in a field OpenWebUI does not read (`reasoning_text`): the thought never reaches the person."""

    model = "plain-unread-field"
    reasoning_field = "reasoning_text"


def _stored_answers(data_dir: Path, chat_id: str) -> list[dict]:
    """The assistant messages OpenWebUI wrote to its own database for the chat, oldest first."""
    with sqlite3.connect(f"file:{data_dir / 'webui.db'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT content, output, usage FROM chat_message WHERE role = 'assistant' AND chat_id = ? "
                          "ORDER BY created_at, rowid", (chat_id,)).fetchall()
    return [{"content": json.loads(c) if c else "", "output": json.loads(o) if o else [],
             "usage": json.loads(u) if u else None} for c, o, u in rows]


def _thought(answer: dict) -> str:
    return "".join(p.get("text") or "" for item in answer["output"] if item.get("type") == "reasoning"
                   for p in item.get("content") or [])


SERVERS = (ReasoningContent, InlineThink, SilentFirstChunk, UnreadField)


@pytest.fixture(scope="module")
def openwebui(tmp_path_factory):
    """The four servers, and one OpenWebUI with a connection to each; DayOne's admin signed up first."""
    data_dir = tmp_path_factory.mktemp("openwebui")
    with ExitStack() as stack:
        servers = {cls: stack.enter_context(cls()) for cls in SERVERS}
        urls = ";".join(server.url + "/v1" for server in servers.values())
        keys = ";".join("none" for _ in servers)  # one key a connection
        ui = stack.enter_context(running_openwebui(venv_path(), data_dir, urls, keys))
        password = secrets.token_urlsafe(16)
        Person(ui.base_url).sign_up(password)
        yield ui, servers, password


def _judge(openwebui, server_cls, engine_reasons=None):
    ui, servers, password = openwebui
    server = servers[server_cls]
    results, stored = person_checks(ui.base_url, server.model, engine_reasons, admin_password=password)
    chats = [r for r in server.requests if r["kind"] == "chat"]
    return {r.check: r for r in results}, _stored_answers(ui.data_dir, stored["chat"]["id"]), chats, stored


@pytest.fixture(scope="module")
def reasoning_content(openwebui):
    return _judge(openwebui, ReasoningContent)


def test_reasoning_content_is_shown_as_a_thought_apart_from_the_answer(reasoning_content):
    verdicts, answers, chats, _ = reasoning_content
    assert verdicts[MODEL_LIST].outcome == PASS, verdicts[MODEL_LIST]
    assert verdicts[CHAT].outcome == PASS, verdicts[CHAT]
    assert verdicts[REASONING].outcome == PASS, verdicts[REASONING]
    assert len(answers) == len(PROMPTS)  # what OpenWebUI itself stored: one answer per turn
    for answer in answers:
        assert _thought(answer) == "First add the tens. "
        assert answer["content"] == " ".join(f"w{i}" for i in range(ANSWER_WORDS))
    assert verdicts[REASONING].evidence["reasoning_source"] == ["reasoning_content"]


def test_the_chat_is_multi_turn_and_streamed_through_the_socket(reasoning_content):
    verdicts, _, chats, stored = reasoning_content
    assert [c["stream"] for c in chats] == [True, True]  # OpenWebUI streamed from the engine, as the web app asks
    assert chats[1]["prompt_tokens"] > chats[0]["prompt_tokens"]  # the second turn carried the first
    assert all(n >= ANSWER_WORDS for n in verdicts[CHAT].evidence["streamed_events"])
    assert stored["chat"]["history"]["currentId"]


def test_usage_is_not_applicable_when_openwebui_stored_none(reasoning_content):
    verdicts, answers, _, _ = reasoning_content
    assert all(a["usage"] is None for a in answers)  # OpenWebUI did not ask this model for usage
    assert verdicts[USAGE].outcome == NOT_APPLICABLE, verdicts[USAGE]


def test_inline_think_is_split_by_openwebui_itself(openwebui):
    verdicts, answers, _, _ = _judge(openwebui, InlineThink)
    assert verdicts[CHAT].outcome == PASS, verdicts[CHAT]
    assert verdicts[REASONING].outcome == PASS, verdicts[REASONING]
    for answer in answers:
        assert "<think>" not in answer["content"] and "First add." not in answer["content"]
        assert _thought(answer).strip() == "First add."


def test_a_silent_first_chunk_still_gives_the_answer(openwebui):
    verdicts, answers, _, _ = _judge(openwebui, SilentFirstChunk)
    assert verdicts[CHAT].outcome == PASS, verdicts[CHAT]
    assert [a["content"] for a in answers] == [" ".join(f"w{i}" for i in range(ANSWER_WORDS))] * len(PROMPTS)
    assert verdicts[REASONING].outcome == NOT_APPLICABLE, verdicts[REASONING]  # nothing reasoned, nothing expected


def test_reasoning_openwebui_cannot_read_is_lost_and_fails(openwebui):
    verdicts, answers, _, _ = _judge(openwebui, UnreadField, engine_reasons=True)
    assert verdicts[CHAT].outcome == PASS, verdicts[CHAT]  # a 200 and an answer ...
    assert all(_thought(a) == "" for a in answers)  # ... but OpenWebUI stored no thought
    assert verdicts[REASONING].outcome == FAIL, verdicts[REASONING]
    assert "lost" in verdicts[REASONING].evidence["reason"]

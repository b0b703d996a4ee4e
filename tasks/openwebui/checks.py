"""The openwebui step: OpenWebUI in front of the engine, judged as a person sees it (PROTOCOL.md
section 4, "OpenWebUI"). Its verdicts land in the `checks` table beside the functional checks."""

from __future__ import annotations

import asyncio
import re
import secrets
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from tasks.checks.base import FAIL, NOT_APPLICABLE, PASS, CheckResult, evidence
from tasks.engines.context import EngineContext, EngineEndpoint
from tasks.openwebui.server import running_openwebui, venv_path
from tasks.openwebui.session import Person, Turn
from tasks.state.documents import openwebui_chat_doc

SCENARIO = "openwebui"
MODEL_LIST, CHAT, REASONING, USAGE = "openwebui_model_list", "openwebui_chat", "openwebui_reasoning", "openwebui_usage"
CHECK_NAMES = (MODEL_LIST, CHAT, REASONING, USAGE)
PROMPTS = ["What is 17 + 25? Think it through step by step, then give the answer.",
           "Now add 10 to that result. What do you get?"]
INLINE_REASONING = re.compile(r"</?(?:think|thinking|reasoning)>", re.IGNORECASE)


def assistant_messages(stored: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat's assistant messages as OpenWebUI stored them, in the order of the current thread."""
    history = (stored.get("chat") or {}).get("history") or {}
    messages, thread = history.get("messages") or {}, []
    current = history.get("currentId")
    while current and current in messages:
        thread.append(messages[current])
        current = messages[current].get("parentId")
    return [m for m in reversed(thread) if m.get("role") == "assistant"]


def shown_reasoning(message: dict[str, Any]) -> str:
    """The thought OpenWebUI shows apart from the answer: its stored `reasoning` output items."""
    return "".join(part.get("text") or "" for item in message.get("output") or [] if item.get("type") == "reasoning"
                   for part in item.get("content") or [])


def model_list_verdict(status: int | None, models: list[dict[str, Any]], model: str) -> CheckResult:
    names = [(m.get("id"), m.get("name")) for m in models]
    seen = next((m for m in models if m.get("id") == model), None)
    if status != 200:
        return CheckResult(MODEL_LIST, FAIL, evidence(status, "/api/models data[].id", names,
                                                      "OpenWebUI's model list did not answer 200"))
    if seen is None:
        return CheckResult(MODEL_LIST, FAIL, evidence(status, "/api/models data[].id", names,
                                                      f"the engine's model {model!r} is not in OpenWebUI's list"))
    if seen.get("name") != model:
        return CheckResult(MODEL_LIST, FAIL, evidence(status, "/api/models data[].name", names,
                                                      f"listed as {seen.get('name')!r}, not under its name {model!r}"))
    return CheckResult(MODEL_LIST, PASS, evidence(status, "/api/models data[].id", names,
                                                  "the engine's model is listed under its name"))


def chat_verdict(turns: list[Turn], stored: list[dict[str, Any]]) -> CheckResult:
    """Every turn answered over the socket, streamed in more than one event, and stored as streamed."""
    extra = {"turns": len(turns), "streamed_events": [len(t.text_deltas) + len(t.reasoning_deltas) for t in turns],
             "first_delta_s": [t.first_delta_s for t in turns]}
    field_seen = "socket events (response.output_text.delta) and /api/v1/chats/{id} history"
    for i, turn in enumerate(turns, 1):
        if turn.error or turn.done is None:
            return CheckResult(CHAT, FAIL, evidence(turn.status, field_seen, turn.error or "",
                                                    f"turn {i}: {turn.error or 'no finished answer'}", **extra))
    if len(turns) < len(PROMPTS) or len(stored) < len(PROMPTS):
        return CheckResult(CHAT, FAIL, evidence(turns[-1].status if turns else None, field_seen, "",
                                                f"{len(stored)} of {len(PROMPTS)} answers stored in the chat", **extra))
    for i, (turn, message) in enumerate(zip(turns, stored), 1):
        answer = (message.get("content") or "").strip()
        streamed = "".join(turn.text_deltas).strip()
        if not answer:
            return CheckResult(CHAT, FAIL, evidence(turn.status, "history.messages[].content", message,
                                                    f"turn {i}: OpenWebUI stored an empty answer", **extra))
        if len(turn.text_deltas) + len(turn.reasoning_deltas) < 2:
            return CheckResult(CHAT, FAIL, evidence(turn.status, field_seen, answer,
                                                    f"turn {i}: the answer arrived whole, not streamed", **extra))
        if streamed != answer:
            return CheckResult(CHAT, FAIL, evidence(turn.status, "history.messages[].content", answer,
                                                    f"turn {i}: the stored answer differs from the streamed one "
                                                    f"({streamed[:80]!r})", **extra))
    return CheckResult(CHAT, PASS, evidence(turns[-1].status, "history.messages[].content", stored[-1].get("content"),
                                            f"{len(turns)} turns in one chat, each streamed and stored", **extra))


def reasoning_verdict(stored: list[dict[str, Any]], engine_reasons: bool | None) -> CheckResult:
    """The thought apart from the answer in every stored answer; inline or lost reasoning fails. A thought
    shown in any turn says the engine reasons: a turn without one lost it, whatever the run knew before."""
    field_seen = "history.messages[].output[type=reasoning]"
    shown = [i for i, message in enumerate(stored, 1) if shown_reasoning(message)]
    why = ("the engine reasons (model.reasoning, or the functional check saw reasoning)" if engine_reasons
           else f"turn {shown[0]} showed a thought, so the engine reasons" if shown else "")
    extra: dict[str, Any] = {}
    for i, message in enumerate(stored, 1):
        answer, thought = message.get("content") or "", shown_reasoning(message)
        extra = {"reasoning_excerpt": thought[:120], "answer_excerpt": answer[:120],
                 "reasoning_source": [((item.get("attributes") or {}).get("type") or item.get("start_tag"))
                                      for item in message.get("output") or [] if item.get("type") == "reasoning"]}
        if INLINE_REASONING.search(answer):
            return CheckResult(REASONING, FAIL, evidence(200, "history.messages[].content", answer,
                                                         f"turn {i}: reasoning shown inline in the answer", **extra))
        if thought and thought.strip() in answer:
            return CheckResult(REASONING, FAIL, evidence(200, "history.messages[].content", answer,
                                                         f"turn {i}: the thought is repeated in the answer", **extra))
        if not thought and (engine_reasons or shown):
            return CheckResult(REASONING, FAIL, evidence(
                200, field_seen, answer, f"turn {i}: no thought shown, but {why}: OpenWebUI lost it", **extra))
    if not (engine_reasons or shown):
        return CheckResult(REASONING, NOT_APPLICABLE, evidence(
            200, field_seen, stored[-1].get("content") if stored else "",
            "no thought shown in any turn and the model is not known to reason", **extra))
    return CheckResult(REASONING, PASS, evidence(200, field_seen, shown_reasoning(stored[-1]) if stored else "",
                                                 "each answer shown with its thought apart", **extra))


def usage_verdict(stored: list[dict[str, Any]]) -> CheckResult:
    usages = [m.get("usage") for m in stored]
    if stored and all(isinstance(u, dict) and (u.get("completion_tokens") or u.get("output_tokens")) for u in usages):
        return CheckResult(USAGE, PASS, evidence(200, "history.messages[].usage", usages[-1],
                                                 "OpenWebUI recorded token usage for every answer", usage=usages))
    return CheckResult(USAGE, NOT_APPLICABLE, evidence(
        200, "history.messages[].usage", usages, "OpenWebUI stored no token usage: it asks the engine for usage "
        "(stream_options.include_usage) only for a model whose 'usage' capability is on", usage=usages))


def person_checks(base_url: str, model: str, engine_reasons: bool | None, admin_password: str | None = None
                  ) -> tuple[list[CheckResult], dict[str, Any]]:
    """What a person sees in a running OpenWebUI: the verdicts, and the chat as OpenWebUI stored it. With
    `admin_password`, DayOne signs in as the admin OpenWebUI made at start; else it signs up as the first user."""
    person = Person(base_url)
    if admin_password:
        person.sign_in(admin_password)
    else:
        person.sign_up(secrets.token_urlsafe(16))
    status, models = person.models()
    listed = model_list_verdict(status, models, model)
    item = next((m for m in models if m.get("id") == model), None)
    if item is None:
        reason = "the model is not in OpenWebUI's list: nothing to chat with"
        unreached = [CheckResult(n, FAIL, evidence(status, "/api/models", "", reason)) for n in CHECK_NAMES[1:]]
        return [listed, *unreached], {}
    turns = asyncio.run(person.converse(item, PROMPTS))
    chat_id = next((t.chat_id for t in turns if t.chat_id), "")
    stored = person.stored_chat(chat_id) if chat_id else {}
    answers = assistant_messages(stored)
    verdicts = [listed, chat_verdict(turns, answers), reasoning_verdict(answers, engine_reasons), usage_verdict(answers)]
    return verdicts, stored


# Starts an OpenWebUI in front of the engine and stops it after: yields what has base_url, started_s and
# admin_password (server.py's local process, cluster.py's pod).
StartOpenWebUI = Callable[[], AbstractContextManager[Any]]


def check_started(start: StartOpenWebUI, model: str, engine_reasons: bool | None
                  ) -> tuple[list[CheckResult], dict[str, Any]]:
    """Judge the OpenWebUI `start` brings up (fresh: the engine's URL is stored at first start)."""
    with start() as ui:
        results, stored = person_checks(ui.base_url, model, engine_reasons, ui.admin_password)
    started = {"openwebui_started_s": ui.started_s}  # from start to healthy: what OpenWebUI adds to the step
    return [CheckResult(r.check, r.outcome, {**r.evidence, **started}) for r in results], stored


def check_endpoint(endpoint: EngineEndpoint, venv: Path, data_dir: Path, engine_reasons: bool | None
                   ) -> tuple[list[CheckResult], dict[str, Any]]:
    """Start OpenWebUI locally in `data_dir` and judge it."""
    access = endpoint.access
    return check_started(lambda: running_openwebui(venv, data_dir, endpoint.base_url.rstrip("/") + "/v1",
                                                   access.api_key, ca_bundle=access.ca_bundle, verify=access.verify),
                         endpoint.model, engine_reasons)


def engine_reasons(ctx: EngineContext) -> bool | None:
    """What the run knows: the config says the model reasons, or the functional check saw reasoning."""
    if ctx.config.model.reasoning:
        return True
    split = [r for r in ctx.run_dir.read_rows("checks", ctx.endpoint.engine) if r.get("check") == "reasoning_split"]
    return any((r.get("evidence") or {}).get("reasoning_field") for r in split) or None


def run_openwebui(ctx: EngineContext, start: StartOpenWebUI | None = None) -> list[dict[str, Any]]:
    """The openwebui step: its `checks` rows, and the chat OpenWebUI stored as a document of the run.
    `start`: where OpenWebUI runs (on Kubernetes, a pod beside the engine); None: a local process."""
    ep = ctx.endpoint
    if start is not None:
        results, stored = check_started(start, ep.model, engine_reasons(ctx))
    else:
        venv = venv_path(ctx.config.scenarios.openwebui.venv)
        with tempfile.TemporaryDirectory(prefix=f"dayone-openwebui-{ep.engine}-") as data_dir:
            results, stored = check_endpoint(ep, venv, Path(data_dir), engine_reasons(ctx))
    ctx.run_dir.write_json(openwebui_chat_doc(ep.engine), stored)
    rows = []
    with ctx.run_dir.rows("checks", ep.engine, SCENARIO) as out:
        for result in results:
            row = {**ep.row_keys(SCENARIO), "check": result.check, "outcome": result.outcome,
                   "evidence": result.evidence}
            out.write(row)
            rows.append(row)
    return rows

"""How the simulator writes an answer in the OpenAI API: the JSON of a whole answer, and each
streamed event's JSON and bytes, in the dialect's reasoning field and with the profile's quirks."""

from __future__ import annotations

import functools
import json
from typing import Any

from tasks.sim.engine import Engine, Record
from tasks.sim.faults import NEVER
from tasks.sim.requests import Answer



@functools.lru_cache(maxsize=4096)
def json_text(text: str) -> str:
    """JSON string literal of a streamed piece (output words repeat, so this is mostly a lookup)."""
    return json.dumps(text)


def usage_of(engine: Engine, record: Record, answer: Answer, chat: bool = False, streamed: bool = True) -> dict[str, Any]:
    """The answer's usage as the dialect writes it: vLLM's prompt_tokens_details in every usage (chat adds
    created_cache_tokens); SGLang's only where tokens were cached (null unstreamed), then reasoning_tokens."""
    usage: dict[str, Any] = {
        "prompt_tokens": record.prompt_tokens,
        "total_tokens": record.prompt_tokens + answer.completion_tokens,
        "completion_tokens": answer.completion_tokens,
    }
    shape = engine.dialect.usage_shape
    if shape == "vllm":
        usage["prompt_tokens_details"] = {"cached_tokens": record.cached_tokens} | (
            {"created_cache_tokens": 0} if chat else {})
    elif shape == "sglang":
        if record.cached_tokens or not streamed:
            usage["prompt_tokens_details"] = {"cached_tokens": record.cached_tokens} if record.cached_tokens else None
        usage["reasoning_tokens"] = len(answer.reasoning)
    return usage


def output_events(answer: Answer, k: int) -> list[tuple[str, str, int]]:
    """(field, text, tokens) per streamed output event: K tokens each, a field per event."""
    events: list[tuple[str, str, int]] = []
    if answer.tool is not None:
        events.append(("tool_header", "", 1))
        events += [("tool_args", frag, 1) for frag in answer.tool_fragments]
        return events
    for name, units in (("reasoning", answer.reasoning), ("content", answer.content)):
        for i in range(0, len(units), k):
            group = units[i : i + k]
            events.append((name, "".join(group), len(group)))
    return events


def _reasoning_field(engine: Engine) -> str | None:
    return engine.profile.quirks.reasoning_field or engine.dialect.reasoning_field


def _reasoning_target(engine: Engine) -> str:
    return "content" if engine.profile.quirks.reasoning_inline else (_reasoning_field(engine) or "content")


def _whole_texts(engine: Engine, answer: Answer) -> tuple[str, str]:
    """(reasoning, content) texts of a whole answer, with the inline quirk applied."""
    reasoning, content = "".join(answer.reasoning), "".join(answer.content)
    if reasoning and engine.profile.quirks.reasoning_inline:
        return "", f"<think>{reasoning}</think>{content}"
    return reasoning, content


def answer_body(engine: Engine, record: Record, answer: Answer, chat: bool, echo: str,
                created: int) -> dict[str, Any]:
    """The whole (not streamed) answer's JSON."""
    usage = usage_of(engine, record, answer, chat, streamed=False)
    if chat:
        reasoning, text = _whole_texts(engine, answer)
        message: dict[str, Any] = {"role": "assistant", "content": text if answer.tool is None else None}
        field = _reasoning_field(engine)
        if field and not engine.profile.quirks.reasoning_inline:
            message[field] = reasoning or None
        if answer.tool is not None:
            t = answer.tool
            message["tool_calls"] = [{"id": t["id"], "type": "function",
                                      "function": {"name": t["name"], "arguments": t["arguments"]}}]
        return {"id": f"chatcmpl-{record.request_id}", "object": "chat.completion", "created": created,
                "model": engine.profile.model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}],
                "usage": usage}
    return {"id": f"cmpl-{record.request_id}", "object": "text_completion", "created": created,
            "model": engine.profile.model,
            "choices": [{"index": 0, "text": echo + "".join(answer.content), "logprobs": None,
                         "finish_reason": answer.finish_reason}],
            "usage": usage}


def finish_alone(engine: Engine, answer: Answer, chat: bool) -> bool:
    """Whether the dialect sends the finish reason in an event of its own after the output (finish_payload)."""
    shape = engine.dialect.stream
    return answer.finish_reason in (shape.chat_finish_alone if chat else shape.text_finish_alone)


def output_payloads(engine: Engine, answer: Answer, events: list[tuple[str, str, int]], chat: bool, echo: str,
                    unstreamed: bool, last_in_stream: bool = False) -> list[str]:
    """Every output event's JSON after its head (output_head), in order; `last_in_stream`: nothing but [DONE]
    follows the last one (it then carries the dialect's last-event fields)."""
    shape = engine.dialect.stream
    reasoning_key = _reasoning_target(engine)
    inline = reasoning_key == "content"
    whole_reasoning, whole_content = _whole_texts(engine, answer)
    last = len(events) - 1
    finishes_here = not finish_alone(engine, answer, chat)
    finish_json = json.dumps(answer.finish_reason)
    tail = (shape.chat_tail if chat else shape.text_tail).format(finish="null")
    finish_tail = (shape.chat_finish_tail if chat else shape.text_finish_tail).format(finish=finish_json)
    if last_in_stream and finishes_here:
        finish_tail = finish_tail[:-1] + shape.last_event_tail + "}"
    head = shape.delta_head
    out = []
    for i, (name, text, _tokens) in enumerate(events):
        if chat:
            if name == "tool_header":
                t = answer.tool or {}
                function = {"name": t.get("name")} | ({"arguments": ""} if shape.tool_header_arguments else {})
                call = ({"id": t.get("id"), "type": "function", "index": 0, "function": function}
                        if not shape.tool_header_arguments else
                        {"index": 0, "id": t.get("id"), "type": "function", "function": function})
                delta = "{" + shape.tool_delta_head + json.dumps({"tool_calls": [call]})[1:]
            elif name == "tool_args":
                delta = "{" + shape.tool_delta_head + json.dumps(
                    {"tool_calls": [{"index": 0, "function": {"arguments": text}}]})[1:]
            elif unstreamed:
                whole: dict[str, str] = {"content": whole_content if i == last else ""}
                if i == last and whole_reasoning:
                    whole[reasoning_key] = whole_reasoning
                body = json.dumps(whole)
                delta = body if reasoning_key in whole and head else "{" + head + body[1:]
            elif name == "reasoning" and inline:
                first = i == 0 or events[i - 1][0] != "reasoning"
                closes = i == last or events[i + 1][0] != "reasoning"
                piece = ("<think>" if first else "") + text + ("</think>" if closes else "")
                delta = "{" + head + '"content":' + json_text(piece) + "}"
            elif name == "reasoning":
                delta = '{"' + reasoning_key + '":' + json_text(text) + "}"
            else:
                delta = "{" + head + '"content":' + json_text(text) + "}"
            out.append(delta + (finish_tail if i == last and finishes_here else tail))
        else:
            piece = ("".join(answer.content) if i == last else "") if unstreamed else text
            if i == 0 and echo:
                piece = echo + piece
            out.append(json_text(piece) + (finish_tail if i == last and finishes_here else tail))
    return out


def finish_payload(engine: Engine, answer: Answer, chat: bool, last_in_stream: bool) -> str:
    """The event that finishes the stream after its output, where the dialect sends one (finish_alone), after its
    head (output_head): an empty delta (chat) or text (completions) with the finish reason."""
    shape = engine.dialect.stream
    tail = (shape.chat_finish_tail if chat else shape.text_finish_tail).format(finish=json.dumps(answer.finish_reason))
    if last_in_stream:
        tail = tail[:-1] + shape.last_event_tail + "}"
    return (shape.finish_delta if chat else '""') + tail


def sse_frame(payload: str) -> bytes:
    """One SSE event in HTTP/1.1 chunked framing (the response is chunked; written raw for speed)."""
    data = b"data: " + payload.encode() + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


def output_frames(head: str, payloads: list[str], malformed_at: int) -> list[bytes]:
    """Every output event's bytes, the one at malformed_at cut in half (NEVER: none)."""
    frames = [sse_frame(head + payload) for payload in payloads]
    if malformed_at != NEVER:
        text = head + payloads[malformed_at]
        frames[malformed_at] = sse_frame(text[: len(text) // 2])
    return frames


def stream_envelope(record: Record, chat: bool, model: str, created: int) -> str:
    """What every streamed event's JSON starts with, up to its "choices"."""
    return (f'{{"id":"{"chatcmpl" if chat else "cmpl"}-{record.request_id}",'
            f'"object":"{"chat.completion.chunk" if chat else "text_completion"}","created":{created},'
            f'"model":{json.dumps(model)},')


def output_head(envelope: str, chat: bool) -> str:
    """An output event's JSON up to its delta (chat) or text (completions)."""
    return envelope + '"choices":[{"index":0,' + ('"delta":' if chat else '"text":')


def usage_payload(envelope: str, usage: dict[str, Any], last_event_tail: str = "") -> str:
    return envelope + f'"choices":[],"usage":{json.dumps(usage)}{last_event_tail}}}'

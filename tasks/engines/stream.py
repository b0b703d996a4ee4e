"""One request to an OpenAI-compatible endpoint, streamed or not, with what the evidence needs.

Used by the functional checks, the needles and the prefix-cache trial. Not the load generator:
these requests run one at a time, so httpx's overhead (about a millisecond) does not matter
against the TTFTs being judged here (hundreds of milliseconds and more).

Timing follows PROTOCOL.md section 3: the first event of any kind, the first event carrying
visible output (content, reasoning or a tool-call delta), and E2E to the last output event (the
trailing usage event excluded).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from tasks.engines import EngineAdapter

EXCERPT_CHARS = 200


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """A short excerpt for evidence: enough to see what came back, never a whole body."""
    if text is None:
        return ""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class OutputEvent:
    """One streamed event that carried visible output."""

    t_s: float  # since send
    content: str
    reasoning: str
    tool_fragments: int


@dataclass
class StreamResult:
    status: int | None
    first_event_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    events: int = 0  # data events, [DONE] excluded
    output_events: list[OutputEvent] = field(default_factory=list)
    content: str = ""
    reasoning: str = ""
    reasoning_fields: list[str] = field(default_factory=list)  # the delta fields that carried it, first seen first
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # reassembled from fragments
    tool_fragments: int = 0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False  # saw data: [DONE]
    error: str | None = None
    body_excerpt: str = ""
    request_id: str | None = None  # sent as X-Request-Id; the server's echo when it has one

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def completion_tokens(self) -> int | None:
        value = (self.usage or {}).get("completion_tokens")
        return int(value) if value is not None else None

    @property
    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return int(value) if value is not None else None


@dataclass
class JsonResult:
    status: int | None
    body: Any = None  # parsed JSON, or None
    e2e_s: float | None = None
    error: str | None = None
    body_excerpt: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and self.body is not None


def post_json(client: httpx.Client, url: str, payload: dict[str, Any], timeout_s: float | None = None) -> JsonResult:
    """A plain (non-streamed) POST; network errors become `error`, never exceptions."""
    sent = time.perf_counter()
    try:
        r = client.post(url, json=payload, timeout=timeout_s if timeout_s is not None else client.timeout)
    except httpx.HTTPError as exc:
        return JsonResult(None, error=f"{type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - sent
    try:
        body = r.json()
    except ValueError:
        return JsonResult(r.status_code, None, elapsed, "response is not JSON", excerpt(r.text))
    error = None if r.status_code == 200 else f"HTTP {r.status_code}"
    return JsonResult(r.status_code, body, elapsed, error, excerpt(r.text))


def _merge_tool_fragment(calls: dict[int, dict[str, Any]], fragment: dict[str, Any]) -> None:
    index = int(fragment.get("index", len(calls)))
    call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    if fragment.get("id"):
        call["id"] = fragment["id"]
    fn = fragment.get("function") or {}
    if fn.get("name"):
        call["function"]["name"] += fn["name"]
    if fn.get("arguments"):
        call["function"]["arguments"] += fn["arguments"]


def stream_post(
    client: httpx.Client,
    url: str,
    payload: dict[str, Any],
    adapter: EngineAdapter,
    timeout_s: float | None = None,
    request_id: str | None = None,
) -> StreamResult:
    """POST with stream=true and read the server-sent events as they arrive.

    Works for chat completions (choices[].delta) and completions (choices[].text). The request
    carries X-Request-Id (a fresh one by default), so evidence can name the request to the
    server's own logs or ground truth.
    """
    payload = {**payload, "stream": True}
    calls: dict[int, dict[str, Any]] = {}
    request_id = request_id or f"dayone-{uuid.uuid4().hex[:16]}"
    sent = time.perf_counter()
    result = StreamResult(status=None, request_id=request_id)
    try:
        with client.stream(
            "POST", url, json=payload, headers={"X-Request-Id": request_id},
            timeout=timeout_s if timeout_s is not None else client.timeout,
        ) as r:
            result.status = r.status_code
            result.request_id = r.headers.get("x-request-id", request_id)
            if r.status_code != 200:
                r.read()
                result.error = f"HTTP {r.status_code}"
                result.body_excerpt = excerpt(r.text)
                return result
            for line in r.iter_lines():
                now = time.perf_counter() - sent
                line = line.strip()
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event: lines
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    result.done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    result.error = f"malformed SSE data line: {excerpt(data, 80)}"
                    continue
                result.events += 1
                if result.first_event_s is None:
                    result.first_event_s = now
                if not isinstance(chunk, dict):
                    continue
                if chunk.get("usage"):
                    result.usage = chunk["usage"]
                if "error" in chunk and not chunk.get("choices"):
                    result.error = f"error event: {excerpt(json.dumps(chunk['error']), 160)}"
                for choice in chunk.get("choices") or []:
                    _take_choice(result, calls, choice, adapter, now)
    except httpx.HTTPError as exc:
        cut = "stream cut before data: [DONE]: " if result.status == 200 and not result.done else ""
        result.error = f"{cut}{type(exc).__name__}: {exc}"
    if result.status == 200 and not result.done and result.error is None:
        result.error = "stream ended before data: [DONE]"
    result.tool_calls = [calls[i] for i in sorted(calls)]
    return result


def _take_choice(
    result: StreamResult, calls: dict[int, dict[str, Any]], choice: dict[str, Any], adapter: EngineAdapter, now: float
) -> None:
    delta = choice.get("delta")
    if delta is None:  # completions stream: the text is on the choice itself
        delta = {"content": choice.get("text") or ""}
    content = delta.get("content") or ""
    reasoning = adapter.reasoning_text(delta)
    fragments = delta.get("tool_calls") or []
    for fragment in fragments:
        _merge_tool_fragment(calls, fragment)
    if choice.get("finish_reason"):
        result.finish_reason = choice["finish_reason"]
    if not (content or reasoning or fragments):
        return  # a role-only or empty event is not output
    if result.ttft_s is None:
        result.ttft_s = now
    result.e2e_s = now
    result.content += content
    result.reasoning += reasoning
    result.reasoning_fields += [f for f in adapter.reasoning_fields_in(delta) if f not in result.reasoning_fields]
    result.tool_fragments += len(fragments)
    result.output_events.append(OutputEvent(now, content, reasoning, len(fragments)))

"""The simulator's HTTP server (aiohttp on uvloop): the OpenAI API in one engine's dialect,
plus /sim/state and /sim/requests, the ground truth of what the server really did.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from tasks.evidence.telemetry import SIMULATOR_PATH as SIMULATOR_DCGM_PATH
from tasks.sim.dialects import DIALECTS, Dialect, startup_values
from tasks.sim.engine import Engine, Record
from tasks.sim.profile import Profile
from tasks.sim.requests import (
    Answer,
    Prompt,
    RequestError,
    check_context,
    max_tokens_of,
    plan_answer,
    read_completion_prompt,
    render_chat,
)
from tasks.sim import content as answers
from tasks.sim.tokenizer import decode, encode, piece_ids

ENGINE = web.AppKey("engine", Engine)
mono = time.monotonic


def log(line: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {line}", flush=True)


# ---- errors -----------------------------------------------------------------------------------
def error_response(dialect: Dialect, status: int, message: str, kind: str, request_id: str | None = None) -> web.Response:
    err = {"message": message, "type": kind, "param": None, "code": status}
    body = {"error": err} if dialect.error_wrapped else {"object": "error", **err}
    headers = {"X-Request-Id": request_id} if request_id else None
    return web.json_response(body, status=status, headers=headers)


def _kind(status: int) -> str:
    return {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")


# ---- plain endpoints ----------------------------------------------------------------------------
async def models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    if not engine.ready and engine.dialect.name != "vllm":
        return error_response(engine.dialect, 503, "The server is starting; the model is not loaded yet.", _kind(503))
    p = engine.profile
    card = {"id": p.model, "object": "model", "created": int(engine.started_ts), "owned_by": engine.dialect.name,
            "root": p.model, "parent": None, "max_model_len": p.context_limit}
    return web.json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    # /ping (SGLang's SageMaker route) answers from the HTTP server alone, ready or not.
    if engine.ready or request.path == "/ping" or (engine.dialect.name == "vllm" and request.path != "/health_generate"):
        return web.Response(status=200)
    return web.Response(status=503)


async def sim_state(request: web.Request) -> web.Response:
    return web.json_response(request.app[ENGINE].state())


async def sim_requests(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    wanted = request.query.get("request_id")
    prefix = request.query.get("prefix", "")
    rows = [r.as_dict() for r in engine.records
            if (wanted is None or r.request_id == wanted) and r.request_id.startswith(prefix)]
    return web.json_response(rows)


async def clear_sim_requests(request: web.Request) -> web.Response:
    """Forget the ground truth so far (counters and cache are untouched)."""
    engine = request.app[ENGINE]
    dropped = len(engine.records)
    engine.records.clear()
    return web.json_response({"dropped": dropped})


async def tokenize(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(engine.dialect, 400, "body: expected a JSON object", _kind(400))
    if "messages" in body:
        try:
            prompt = render_chat(body["messages"], body.get("tools"))
        except RequestError as exc:
            return error_response(engine.dialect, 400, str(exc), _kind(400))
        ids = piece_ids(prompt.tokens)
    else:
        text = body.get("prompt", body.get("text"))
        if not isinstance(text, str):
            return error_response(engine.dialect, 400, "prompt: expected a string (or give 'text' or 'messages')", _kind(400))
        ids = encode(text)
    return web.json_response({"tokens": ids, "count": len(ids), "max_model_len": engine.profile.context_limit})


async def detokenize(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await request.json()
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        return error_response(engine.dialect, 400, "tokens: expected a list of token ids", _kind(400))
    return web.json_response({"prompt": decode(ids)})


async def clear_cache(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    if engine.dialect.name == "vllm" and not engine.profile.dev_mode:
        return web.Response(status=404, text="Not Found")
    if engine.dialect.name == "sglang" and engine.running:
        return web.Response(status=400, text="Cache not flushed because there are pending requests.")
    if engine.dialect.name == "vllm":
        # Running requests hold blocks: vLLM clears nothing, and says so only in the body.
        cleared = not engine.running
        if cleared:
            engine.cache.clear()
            log(f"INFO prefix cache cleared via {request.path}")
        if engine.profile.vllm_reset_reply == "empty":
            return web.Response(status=200)
        return web.json_response({"success": cleared})
    engine.cache.clear()
    log(f"INFO prefix cache cleared via {request.path}")
    return web.Response(status=200, text="Cache flushed.")


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.Response(text=render_metrics(engine), content_type="text/plain", charset="utf-8")


def render_metrics(engine: Engine) -> str:
    d = engine.dialect
    names = dict(d.metric_names)
    mode = engine.profile.quirks.metrics
    cache_roles = ("queries", "hits") if d.name == "vllm" else ("prompt", "hits")
    if mode == "renamed":
        names.update(d.renamed)
    elif mode == "absent":
        for role in cache_roles:
            names.pop(role, None)
    labels = f'model_name="{engine.profile.model}"' + (',engine="0"' if d.name == "vllm" else "")
    out: list[str] = []
    spec = engine.profile.speculative is not None  # vLLM registers its spec metrics only when on
    counters = ("queries", "hits", "prompt", "generation", "requests", "preemptions")
    counters += ("spec_drafts", "spec_draft_tokens", "spec_accepted") if spec else ()
    for role in counters:
        if role in names:
            out += [f"# HELP {names[role]} {role} (DayOne simulator)", f"# TYPE {names[role]} counter",
                    f"{names[role]}{{{labels}}} {float(engine.counters[role] + engine.counter_base)}"]
    if d.name == "vllm":  # prometheus_client's process collector: in vLLM's default registry, not SGLang's
        out += ["# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
                "# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {engine.started_ts}"]
    gauges = [("running", engine.running), ("waiting", len(engine.waiting)), ("hit_rate", engine.last_hit_rate),
              ("kv_usage", engine.kv_usage())]
    if spec:
        gauges += [("spec_accept_length", engine.last_spec[0]), ("spec_accept_rate", engine.last_spec[1])]
    for role, value in gauges:
        if role in names:
            out += [f"# TYPE {names[role]} gauge", f"{names[role]}{{{labels}}} {float(value)}"]
    for role, hist in engine.hist.items():
        if role not in names:
            continue
        name = names[role]
        out.append(f"# TYPE {name} histogram")
        running = 0
        for bound, count in zip(hist.bounds, hist.counts):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(running)}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(hist.n)}')
        out.append(f"{name}_sum{{{labels}}} {hist.total}")
        out.append(f"{name}_count{{{labels}}} {float(hist.n)}")
    return "\n".join(out) + "\n"


async def dcgm_metrics(request: web.Request) -> web.Response:
    """A DCGM exporter's /metrics for the simulated GPUs (a real one is a separate endpoint, usually :9400)."""
    engine = request.app[ENGINE]
    return web.Response(text=engine.gpus.render(engine.kv_usage(), "dayone-sim"), content_type="text/plain",
                        charset="utf-8")


async def model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.json_response({"model_path": engine.profile.model, "is_generation": True})


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.0.0-dayone-sim"})


# ---- generation ---------------------------------------------------------------------------------
async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await generate(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await generate(request, chat=False)


def _burst(engine: Engine, number: int, arrival: float) -> bool:
    burst = engine.profile.faults.error_burst
    if burst is None:
        return False
    if burst.after_requests is not None and burst.count is not None:
        return burst.after_requests < number <= burst.after_requests + burst.count
    since_ready = arrival - (engine.ready_ts or arrival)
    return burst.start_s <= since_ready < burst.start_s + burst.duration_s  # type: ignore[operator]


async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
    engine = request.app[ENGINE]
    dialect, profile = engine.dialect, engine.profile
    arrival = mono()
    request_id = request.headers.get("X-Request-Id") or f"sim-{uuid.uuid4().hex}"
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        return error_response(dialect, 400, "body: expected a JSON object", _kind(400), request_id)
    stream = bool(body.get("stream"))
    if not engine.ready:
        return error_response(dialect, 503, "The engine is not ready yet (still starting).", _kind(503), request_id)

    engine.arrivals += 1
    record = Record(request_id, "chat" if chat else "completions", stream, engine.epoch(arrival),
                    clock_offset=engine.epoch_offset)
    engine.record(record)

    def fail(status: int, message: str, fault: str | None = None) -> web.Response:
        record.status, record.error = status, message
        if fault:
            record.faults.append(fault)
        return error_response(dialect, status, message, _kind(status), request_id)

    if _burst(engine, engine.arrivals, time.time()):
        return fail(profile.faults.error_burst.status, "Simulated server error (faults.error_burst).", "error_burst")  # type: ignore[union-attr]
    model = body.get("model")
    if model and model != profile.model and dialect.unknown_model_404:
        return fail(404, f"The model `{model}` does not exist.")
    try:
        if chat:
            prompt = render_chat(body.get("messages"), body.get("tools"))
            prompt.tool = answers.pick_tool(body.get("tools") or [], body.get("tool_choice"))
        else:
            prompt = read_completion_prompt(body.get("prompt"))
        record.prompt_tokens = prompt.count
        too_long = check_context(profile, prompt.count, max_tokens_of(body))
        if too_long:
            return fail(400, too_long)
        answer = plan_answer(profile, dialect, body, prompt, chat)
    except (RequestError, ValueError) as exc:
        return fail(400, str(exc))

    echo = ""
    if not chat:
        if body.get("echo"):
            echo = prompt.text
        elif profile.quirks.echo_ignored:
            echo = prompt.text
            record.quirks.append("echo_ignored")
    if stream:
        return await stream_answer(request, engine, record, body, prompt, answer, chat, echo, arrival)
    return await full_answer(engine, record, prompt, answer, chat, echo, arrival)


@functools.lru_cache(maxsize=4096)
def _json_text(text: str) -> str:
    """JSON string literal of a streamed piece (output words repeat, so this is mostly a lookup)."""
    return json.dumps(text)


def _usage(engine: Engine, record: Record, answer: Answer) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": record.prompt_tokens,
        "total_tokens": record.prompt_tokens + answer.completion_tokens,
        "completion_tokens": answer.completion_tokens,
    }
    if engine.dialect.name != "openai":
        usage["prompt_tokens_details"] = {"cached_tokens": record.cached_tokens}
    return usage


def _gaps(engine: Engine, record: Record, n: int) -> list[float]:
    """Gaps between output events: K tokens per event at itl_s each, plus seeded jitter."""
    p = engine.profile
    base = p.itl_s * p.tokens_per_event * engine.launch_slowdown
    if p.speculative is not None:  # one verification step per itl_s yields this many tokens
        base /= p.speculative.mean_accepted_length
    if p.itl_jitter_s <= 0:
        return [base] * n
    rng = random.Random(f"{p.seed}:{record.request_id}")
    return [base + rng.uniform(0, p.itl_jitter_s) * engine.launch_slowdown for _ in range(n)]


def _output_events(answer: Answer, k: int) -> list[tuple[str, str, int]]:
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


def _inline(engine: Engine, answer: Answer) -> tuple[str, str]:
    """(reasoning, content) texts of a whole answer, with the inline quirk applied."""
    reasoning, content = "".join(answer.reasoning), "".join(answer.content)
    if reasoning and engine.profile.quirks.reasoning_inline:
        return "", f"<think>{reasoning}</think>{content}"
    return reasoning, content


async def full_answer(
    engine: Engine, record: Record, prompt: Prompt, answer: Answer, chat: bool, echo: str, arrival: float
) -> web.Response:
    await engine.acquire_slot()
    try:
        admit = mono()
        record.admit_ts, record.queue_wait_s = engine.epoch(admit), admit - arrival
        first = engine.admit(record, prompt.tokens, admit)
        n_events = len(_output_events(answer, engine.profile.tokens_per_event))
        last = first + sum(_gaps(engine, record, max(0, n_events - 1))) * engine.decode_slowdown()
        await engine.timer.sleep_until(max(last, engine.blocked_until))
        record.completion_tokens = answer.completion_tokens
        record.finish_reason = answer.finish_reason
        created = int(time.time())
        usage = _usage(engine, record, answer)
        if chat:
            reasoning, text = _inline(engine, answer)
            message: dict[str, Any] = {"role": "assistant", "content": text if answer.tool is None else None}
            field = _reasoning_field(engine)
            if field and not engine.profile.quirks.reasoning_inline:
                message[field] = reasoning or None
            if answer.tool is not None:
                t = answer.tool
                message["tool_calls"] = [{"id": t["id"], "type": "function",
                                          "function": {"name": t["name"], "arguments": t["arguments"]}}]
            body = {"id": f"chatcmpl-{record.request_id}", "object": "chat.completion", "created": created,
                    "model": engine.profile.model,
                    "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}],
                    "usage": usage}
        else:
            body = {"id": f"cmpl-{record.request_id}", "object": "text_completion", "created": created,
                    "model": engine.profile.model,
                    "choices": [{"index": 0, "text": echo + "".join(answer.content), "logprobs": None,
                                 "finish_reason": answer.finish_reason}],
                    "usage": usage}
        done = mono()
        record.first_output_ts = engine.epoch(first)
        record.ttft_s = first - arrival
        record.last_event_ts = engine.epoch(done)
        record.e2e_s = done - arrival
        return web.json_response(body, headers={"X-Request-Id": record.request_id})
    finally:
        engine.release_slot()
        engine.finish(record)


def _payloads(engine: Engine, answer: Answer, events: list[tuple[str, str, int]], chat: bool, echo: str,
              unstreamed: bool) -> list[str]:
    """The JSON body after `head` of every output event, in order."""
    reasoning_key = _reasoning_target(engine)
    inline = reasoning_key == "content"
    whole_reasoning, whole_content = _inline(engine, answer)
    last = len(events) - 1
    finish_json = json.dumps(answer.finish_reason)
    out = []
    for i, (name, text, _tokens) in enumerate(events):
        finish = finish_json if i == last else "null"
        if chat:
            if name == "tool_header":
                t = answer.tool or {}
                delta = json.dumps({"tool_calls": [{"index": 0, "id": t.get("id"), "type": "function",
                                                    "function": {"name": t.get("name"), "arguments": ""}}]})
            elif name == "tool_args":
                delta = json.dumps({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
            elif unstreamed:
                whole: dict[str, str] = {"content": whole_content if i == last else ""}
                if i == last and whole_reasoning:
                    whole[reasoning_key] = whole_reasoning
                delta = json.dumps(whole)
            elif name == "reasoning" and inline:
                first = i == 0 or events[i - 1][0] != "reasoning"
                closes = i == last or events[i + 1][0] != "reasoning"
                delta = '{"content":' + _json_text(("<think>" if first else "") + text + ("</think>" if closes else "")) + "}"
            elif name == "reasoning":
                delta = '{"' + reasoning_key + '":' + _json_text(text) + "}"
            else:
                delta = '{"content":' + _json_text(text) + "}"
            out.append(f'{delta},"logprobs":null,"finish_reason":{finish}}}]}}')
        else:
            piece = ("".join(answer.content) if i == last else "") if unstreamed else text
            if i == 0 and echo:
                piece = echo + piece
            out.append(f'{_json_text(piece)},"logprobs":null,"finish_reason":{finish}}}]}}')
    return out


def _frame(payload: str) -> bytes:
    """One SSE event in HTTP/1.1 chunked framing (the response is chunked; written raw for speed)."""
    data = b"data: " + payload.encode() + b"\n\n"
    return b"%x\r\n" % len(data) + data + b"\r\n"


_WRITE_BUFFER_LIMIT = 1 << 20  # a client reading slower than this falls behind: stop writing and wait


async def stream_answer(
    request: web.Request, engine: Engine, record: Record, body: dict[str, Any], prompt: Prompt,
    answer: Answer, chat: bool, echo: str, arrival: float,
) -> web.StreamResponse:
    """Stream the answer. After admission, events are written by timer callbacks straight to the
    transport (no task wake-up per event), which keeps send times within a fraction of a ms."""
    p = engine.profile
    faults, quirks = p.faults, p.quirks
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       "X-Request-Id": record.request_id})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    created = int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"
    prefix = "chatcmpl" if chat else "cmpl"
    head = (f'{{"id":"{prefix}-{record.request_id}","object":"{kind}","created":{created},'
            f'"model":{json.dumps(p.model)},"choices":[{{"index":0,' + ('"delta":' if chat else '"text":'))
    events = _output_events(answer, p.tokens_per_event)
    transport = request.transport
    await engine.acquire_slot()
    try:
        admit = mono()
        record.admit_ts, record.queue_wait_s = engine.epoch(admit), admit - arrival
        engine.streams += 1
        number = engine.streams
        first_due = engine.admit(record, prompt.tokens, admit)
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client closed the connection")

        unstreamed = bool(quirks.unstreamed_every_nth and number % quirks.unstreamed_every_nth == 0)
        malformed_at = len(events) // 2 if faults.malformed_sse_every_nth and number % faults.malformed_sse_every_nth == 0 else -1
        cut_at = max(1, len(events) // 2) if faults.cut_stream_every_nth and number % faults.cut_stream_every_nth == 0 else -1
        stall = faults.stall if faults.stall and number % faults.stall.every_nth == 0 else None
        preemption = p.preemption if p.preemption and number % p.preemption.every_nth == 0 else None
        preempt_at = max(1, len(events) // 2) if preemption is not None else -1
        if unstreamed:
            record.quirks.append("unstreamed")
        if chat and answer.reasoning and quirks.reasoning_inline:
            record.quirks.append("reasoning_inline")
        # Every frame is built before the first one is due: the timed path only writes.
        payloads = _payloads(engine, answer, events, chat, echo, unstreamed)
        frames = [_frame(head + payload) for payload in payloads]
        if 0 <= malformed_at < len(frames):
            text = head + payloads[malformed_at]
            frames[malformed_at] = _frame(text[: len(text) // 2])  # JSON cut in half
            record.faults.append("malformed_sse")
        gaps = _gaps(engine, record, len(events))
        event_ts, event_planned = record.event_ts, record.event_scheduled_ts
        event_kinds, event_tokens = record.event_kinds, record.event_tokens

        def send(event_kind: str, tokens: int, planned: float | None, frame: bytes) -> float:
            at = mono()  # taken before the write: no client can see the event earlier
            transport.write(frame)
            event_ts.append(at)
            event_planned.append(planned)
            event_kinds.append(event_kind)
            event_tokens.append(tokens)
            if record.first_event_ts is None:
                record.first_event_ts = engine.epoch(at)
            return at

        if chat:
            send("role", 0, None, _frame(head + '{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'))

        finished: asyncio.Future[str] = engine.loop.create_future()
        timer = engine.timer
        n_events = len(events)
        first_output = len(event_ts)  # index of the first output event in the ground truth
        stall_at = stall.after_events if stall is not None else -1
        state = [0, first_due]  # next event index, its scheduled time

        def step() -> None:
            """Write every event that is due (timer callback), then schedule the next one."""
            try:
                i, due = state
                write = transport.write
                while True:
                    if finished.done():
                        return
                    if transport.is_closing():
                        finished.set_result("gone")
                        return
                    if transport.get_write_buffer_size() > _WRITE_BUFFER_LIMIT:
                        state[0], state[1] = i, due
                        timer.call_at(mono() + 0.001, step)  # the client is behind: wait for it
                        return
                    if i == cut_at:
                        transport.close()
                        finished.set_result("cut")
                        return
                    at = mono()
                    write(frames[i])
                    event_ts.append(at)
                    event_planned.append(due)
                    i += 1
                    if i == n_events:
                        finished.set_result("done")
                        return
                    due += gaps[i - 1] * engine.decode_slowdown()  # the batch as it is now, not at admission
                    if i == stall_at:
                        due += stall.seconds  # type: ignore[union-attr]
                    if i == preempt_at:  # evicted for KV room, then recomputed
                        due += preemption.recompute_s  # type: ignore[union-attr]
                        engine.counters["preemptions"] += 1
                        record.faults.append("preempted")
                    if due < engine.blocked_until:
                        due = engine.blocked_until
                    if due > mono() + 20e-6:
                        state[0], state[1] = i, due
                        timer.call_at(due, step)
                        return
            except Exception as exc:  # noqa: BLE001 - surfaces in the handler, not in the timer
                if not finished.done():
                    finished.set_exception(exc)

        if stall is not None:
            record.faults.append("stall")
            if stall.after_events == 0:
                state[1] += stall.seconds
        if not events:
            finished.set_result("done")
        else:
            state[1] = max(state[1], engine.blocked_until)
            timer.call_at(state[1], step)
        try:
            outcome = await finished
        except asyncio.CancelledError:
            if not finished.done():
                finished.set_result("cancelled")
            raise
        outputs = len(event_ts) - first_output
        event_kinds.extend(["output"] * outputs)
        event_tokens.extend(e[2] for e in events[:outputs])
        if outputs:
            at = event_ts[first_output]
            record.first_output_ts = engine.epoch(at)
            record.ttft_s = at - arrival
            if record.first_event_ts is None:
                record.first_event_ts = record.first_output_ts
        if stall is not None and outputs <= stall.after_events and stall.after_events > 0:
            record.faults.remove("stall")  # the stream ended before the stall point
        if outcome == "cut":
            record.faults.append("cut_stream")
            record.error = "stream cut before [DONE] (faults.cut_stream_every_nth)"
            return resp
        if outcome == "gone":
            raise ConnectionResetError("client closed the connection")
        record.completion_tokens = answer.completion_tokens
        record.finish_reason = answer.finish_reason
        if event_ts:
            record.last_event_ts = engine.epoch(event_ts[-1])
            record.e2e_s = event_ts[-1] - arrival
        if include_usage:
            if quirks.usage_missing:
                record.quirks.append("usage_missing")
            else:
                usage = json.dumps(_usage(engine, record, answer))
                send("usage", 0, None, _frame(
                    f'{{"id":"{prefix}-{record.request_id}","object":"{kind}","created":{created},'
                    f'"model":{json.dumps(p.model)},"choices":[],"usage":{usage}}}'))
        send("done", 0, None, _frame("[DONE]"))
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError) as exc:
        record.status, record.error = 499, f"client went away: {type(exc).__name__}"
    finally:
        engine.release_slot()
        engine.finish(record)
    return resp


# ---- app and process -----------------------------------------------------------------------------
def build_app(engine: Engine) -> web.Application:
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app[ENGINE] = engine
    d = engine.dialect
    r = app.router
    r.add_get("/v1/models", models)
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_post("/v1/completions", completions)
    for path in d.health_paths:
        r.add_get(path, health)
    r.add_get("/sim/state", sim_state)
    r.add_get("/sim/requests", sim_requests)
    r.add_delete("/sim/requests", clear_sim_requests)
    r.add_get(SIMULATOR_DCGM_PATH, dcgm_metrics)
    if d.metrics:
        r.add_get("/metrics", metrics)
    if d.tokenize:
        r.add_post("/tokenize", tokenize)
        r.add_post("/detokenize", detokenize)
    if d.cache_clear:
        method, path = d.cache_clear
        r.add_route(method, path, clear_cache)
        if d.name == "sglang":
            r.add_get(path, clear_cache)  # SGLang serves GET /flush_cache too
    if d.name == "sglang":
        r.add_get("/get_model_info", model_info)
    if d.name == "vllm":
        r.add_get("/version", version)
    return app


async def serve(dialect_name: str, profile: Profile, host: str, port: int, restarts: int = 0) -> int:
    dialect = DIALECTS[dialect_name]
    # The target numbers the starts of an engine within a run (measurement.launches): DAYONE_LAUNCH.
    engine = Engine(dialect, profile, restarts, int(os.environ.get("DAYONE_LAUNCH") or 0))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    app = build_app(engine)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    lines = [line.format(**startup_values(profile, host, port)) for line in dialect.startup_lines]
    log(f"INFO DayOne engine simulator: dialect={dialect.name} model={profile.model} pid={os.getpid()} restarts={restarts} "
        f"launch={engine.launch}")
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=2048)  # bursts of many streams, like uvicorn
    listening = False
    if dialect.starting == "503":
        await site.start()
        listening = True
    # Startup lines spread over the startup delay; the last one announces readiness.
    ready_line = lines.pop() if lines else "INFO ready"
    lines += profile.startup_log_lines
    step = profile.startup_delay_s / max(1, len(lines))
    for line in lines:
        log(line)
        try:
            await asyncio.wait_for(stop.wait(), timeout=step)
            break
        except asyncio.TimeoutError:
            pass
    if not stop.is_set():
        if not listening:
            await site.start()
        if profile.faults.never_ready:
            log("WARNING model is still warming up (faults.never_ready: it will never be ready)")
            engine.ready = False
        else:
            engine.ready = True
            engine.ready_ts = time.time()
            log(ready_line)
        await stop.wait()
    log("INFO shutting down")
    await runner.cleanup()
    engine.timer.close()
    return 0


def run_server(dialect_name: str, profile: Profile, host: str, port: int, restarts: int = 0) -> int:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        print("WARNING uvloop missing: using the default asyncio loop", file=sys.stderr)
    return asyncio.run(serve(dialect_name, profile, host, port, restarts))

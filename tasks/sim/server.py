"""The simulator's HTTP server (aiohttp on uvloop): the OpenAI API in one engine's dialect,
plus /sim/state and /sim/requests, the ground truth of what the server really did. Its handlers
follow a request's fault plan (faults.py), write answers with wire.py and metrics with exposition.py.
"""

from __future__ import annotations

import asyncio
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

from tasks.core.dcgm import SIMULATOR_PATH as SIMULATOR_DCGM_PATH
from tasks.sim.dialects import DIALECTS, Dialect, startup_values
from tasks.sim.engine import Engine, Record
from tasks.sim.exposition import dcgm_metrics_text, engine_metrics_text
from tasks.sim.faults import StreamPlan, error_burst_status, plan_stream
from tasks.config.sim_profile import Profile
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
from tasks.sim.loglik import sglang_generate, vllm_echo
from tasks.sim.tokenizer import decode, encode, piece_ids
from tasks.sim.wire import (
    answer_body,
    finish_alone,
    finish_payload,
    output_events,
    output_frames,
    output_head,
    output_payloads,
    sse_frame,
    stream_envelope,
    usage_of,
    usage_payload,
)

ENGINE = web.AppKey("engine", Engine)
mono = time.monotonic


def log(line: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {line}", flush=True)


def _log_jit(record: Record) -> None:
    """A new shape's compilation, as an engine logs it while serving (read back for the tails it causes)."""
    if record.jit_s:
        log(f"INFO JIT compiling kernels for new shape bucket {record.shape} ({record.jit_s:.2f} s)")


# ---- errors -----------------------------------------------------------------------------------
def error_response(dialect: Dialect, status: int, message: str, kind: str, request_id: str | None = None,
                   param: str | None = None) -> web.Response:
    err = {"message": message, "type": kind, "param": param, "code": status}
    body = {"error": err} if dialect.error_wrapped else {"object": "error", **err}
    headers = {"X-Request-Id": request_id} if request_id else None
    return web.json_response(body, status=status, headers=headers)


def _kind(status: int) -> str:
    return {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")


# ---- plain endpoints ----------------------------------------------------------------------------
async def models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    if not engine.ready and not engine.dialect.models_before_ready:
        return error_response(engine.dialect, 503, "The server is starting; the model is not loaded yet.", _kind(503))
    p = engine.profile
    card = {"id": p.model, "object": "model", "created": int(engine.started_ts), "owned_by": engine.dialect.name,
            "root": p.model_path or p.model, "parent": None, "max_model_len": p.context_limit}
    return web.json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    if engine.ready or request.path in engine.dialect.health_while_starting:
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
    return web.json_response({engine.dialect.detokenize_field: decode(ids)})


async def clear_cache(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    if engine.dialect.clear_needs_dev_mode and not engine.profile.dev_mode:
        return web.Response(status=404, text="Not Found")
    if engine.dialect.flush_refused_body and engine.running:  # SGLang refuses while requests are pending
        return web.Response(status=400, text=engine.dialect.flush_refused_body)
    if engine.dialect.clear_answers_success:
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
    return web.Response(status=200, text=engine.dialect.flushed_body)


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.Response(text=engine_metrics_text(engine), content_type="text/plain", charset="utf-8")


async def dcgm_metrics(request: web.Request) -> web.Response:
    """A DCGM exporter's /metrics for the simulated GPUs (a real one is a separate endpoint, usually :9400)."""
    engine = request.app[ENGINE]
    return web.Response(text=dcgm_metrics_text(engine.gpus, engine.kv_usage(), "dayone-sim"),
                        content_type="text/plain", charset="utf-8")


async def model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.json_response({"model_path": engine.profile.model_path or engine.profile.model, "is_generation": True})


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.0.0-dayone-sim"})


# ---- generation ---------------------------------------------------------------------------------
async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await generate(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE]
    if engine.dialect.echo_prompt_logprobs and engine.ready:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if isinstance(body, dict) and body.get("echo") and body.get("logprobs") is not None and not body.get("stream"):
            return web.json_response(vllm_echo(body, engine.profile.model, engine.profile.quality))
    return await generate(request, chat=False)


async def native_generate(request: web.Request) -> web.Response:
    """SGLang's /generate, as far as log-likelihood parity asks it: prompt log-probabilities."""
    engine = request.app[ENGINE]
    if not engine.ready:
        return error_response(engine.dialect, 503, "The engine is not ready yet (still starting).", _kind(503))
    body = await request.json()
    return web.json_response(sglang_generate(body, engine.profile.quality))


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

    def fail(status: int, message: str, fault: str | None = None, param: str | None = None) -> web.Response:
        record.status, record.error = status, message
        if fault:
            record.faults.append(fault)
        return error_response(dialect, status, message, _kind(status), request_id, param)

    burst_status = error_burst_status(profile, engine.arrivals, time.time(), engine.ready_ts)
    if burst_status is not None:
        return fail(burst_status, "Simulated server error (faults.error_burst).", "error_burst")
    model = body.get("model")
    if model and model != profile.model and dialect.unknown_model_404:
        return fail(404, f"The model `{model}` does not exist. Valid aliases: {profile.model}.", param="model")
    try:
        if chat:
            prompt = render_chat(body.get("messages"), body.get("tools"))
            messages = body.get("messages") or []
            # a model handed its tool's result answers in words (OpenWebUI's built-in tools come back this way)
            answered = bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"
            prompt.tool = None if answered else answers.pick_tool(body.get("tools") or [], body.get("tool_choice"))
        else:
            prompt = read_completion_prompt(body.get("prompt"))
        record.prompt_tokens = prompt.count
        too_long = check_context(profile, dialect, prompt.count, max_tokens_of(body))
        if too_long:
            return fail(400, too_long[0], param=too_long[1])
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


async def full_answer(
    engine: Engine, record: Record, prompt: Prompt, answer: Answer, chat: bool, echo: str, arrival: float
) -> web.Response:
    await engine.acquire_slot()
    try:
        admit = mono()
        record.admit_ts, record.queue_wait_s = engine.epoch(admit), admit - arrival
        first = engine.admit(record, prompt.tokens, admit)
        _log_jit(record)
        n_events = len(output_events(answer, engine.profile.tokens_per_event))
        last = first + sum(_gaps(engine, record, max(0, n_events - 1))) * engine.decode_slowdown()
        await engine.timer.sleep_until(max(last, engine.blocked_until))
        record.completion_tokens = answer.completion_tokens
        record.finish_reason = answer.finish_reason
        body = answer_body(engine, record, answer, chat, echo, int(time.time()))
        done = mono()
        record.first_output_ts = engine.epoch(first)
        record.ttft_s = first - arrival
        record.last_event_ts = engine.epoch(done)
        record.e2e_s = done - arrival
        return web.json_response(body, headers={"X-Request-Id": record.request_id})
    finally:
        engine.release_slot()
        engine.finish(record)


_WRITE_BUFFER_LIMIT = 1 << 20  # a client reading slower than this falls behind: stop writing and wait


def _send(engine: Engine, record: Record, transport: asyncio.Transport, event_kind: str, frame: bytes) -> None:
    """Write one event that is not an output (role, usage, [DONE]) and note it in the ground truth."""
    at = mono()  # taken before the write: no client can see the event earlier
    transport.write(frame)
    record.event_ts.append(at)
    record.event_scheduled_ts.append(None)
    record.event_kinds.append(event_kind)
    record.event_tokens.append(0)
    if record.first_event_ts is None:
        record.first_event_ts = engine.epoch(at)


def _write_on_schedule(engine: Engine, record: Record, transport: asyncio.Transport, frames: list[bytes],
                       gaps: list[float], plan: StreamPlan, first_due: float) -> asyncio.Future[str]:
    """Write each output frame when it is due, by timer callbacks straight to the transport (no task
    wake-up per event, which keeps send times within a fraction of a ms). The future ends "done",
    "cut" (the plan's cut) or "gone" (the client closed)."""
    finished: asyncio.Future[str] = engine.loop.create_future()
    timer = engine.timer
    n_events = len(frames)
    event_ts, event_planned = record.event_ts, record.event_scheduled_ts
    cut_at, stall_at, stall_s = plan.cut_at, plan.stall_at, plan.stall_s
    preempt_at, recompute_s = plan.preempt_at, plan.recompute_s
    state = [0, first_due + (stall_s if stall_at == 0 else 0.0)]  # next event index, its scheduled time

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
                    due += stall_s
                if i == preempt_at:  # evicted for KV room, then recomputed
                    due += recompute_s
                    engine.counters["preemptions"] += 1
                    record.faults.append("preempted")
                    if engine.dialect.preempted_line:
                        log(engine.dialect.preempted_line.format(request_id=record.request_id))
                if due < engine.blocked_until:
                    due = engine.blocked_until
                if due > mono() + 20e-6:
                    state[0], state[1] = i, due
                    timer.call_at(due, step)
                    return
        except Exception as exc:  # noqa: BLE001 - surfaces in the handler, not in the timer
            if not finished.done():
                finished.set_exception(exc)

    if not frames:
        finished.set_result("done")
    else:
        state[1] = max(state[1], engine.blocked_until)
        timer.call_at(state[1], step)
    return finished


def _note_outputs(engine: Engine, record: Record, events: list[tuple[str, str, int]], first_output: int,
                  arrival: float) -> int:
    """Complete the ground truth of the output events sent (from index first_output); returns their number."""
    outputs = len(record.event_ts) - first_output
    record.event_kinds.extend(["output"] * outputs)
    record.event_tokens.extend(e[2] for e in events[:outputs])
    if outputs:
        at = record.event_ts[first_output]
        record.first_output_ts = engine.epoch(at)
        record.ttft_s = at - arrival
        if record.first_event_ts is None:
            record.first_event_ts = record.first_output_ts
    return outputs


async def stream_answer(
    request: web.Request, engine: Engine, record: Record, body: dict[str, Any], prompt: Prompt,
    answer: Answer, chat: bool, echo: str, arrival: float,
) -> web.StreamResponse:
    """Stream the answer: admitted, planned (its faults included), every frame built before the
    first is due, then written on schedule; the ground truth follows what was written."""
    p = engine.profile
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       "X-Request-Id": record.request_id})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    envelope = stream_envelope(record, chat, p.model, int(time.time()))
    head = output_head(envelope, chat)
    events = output_events(answer, p.tokens_per_event)
    transport = request.transport
    await engine.acquire_slot()
    try:
        admit = mono()
        record.admit_ts, record.queue_wait_s = engine.epoch(admit), admit - arrival
        engine.streams += 1
        first_due = engine.admit(record, prompt.tokens, admit)
        _log_jit(record)
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client closed the connection")
        plan = plan_stream(p, engine.streams, len(events))
        record.quirks += plan.quirks
        if chat and answer.reasoning and p.quirks.reasoning_inline:
            record.quirks.append("reasoning_inline")
        usage_sent = include_usage and not p.quirks.usage_missing
        alone = finish_alone(engine, answer, chat)
        payloads = output_payloads(engine, answer, events, chat, echo, plan.unstreamed,
                                   last_in_stream=not usage_sent and not alone)
        frames = output_frames(head, payloads, plan.malformed_at)
        gaps = _gaps(engine, record, len(events))
        record.faults += plan.faults_from_start
        if chat:
            _send(engine, record, transport, "role", sse_frame(head + engine.dialect.stream.role_event))
        first_output = len(record.event_ts)  # index of the first output event in the ground truth
        finished = _write_on_schedule(engine, record, transport, frames, gaps, plan, first_due)
        try:
            outcome = await finished
        except asyncio.CancelledError:
            if not finished.done():
                finished.set_result("cancelled")
            raise
        outputs = _note_outputs(engine, record, events, first_output, arrival)
        if plan.stalls and not plan.stall_reached(outputs):
            record.faults.remove("stall")  # the stream ended before the stall point
        if outcome == "cut":
            record.faults.append("cut_stream")
            record.error = "stream cut before [DONE] (faults.cut_stream_every_nth)"
            return resp
        if outcome == "gone":
            raise ConnectionResetError("client closed the connection")
        record.completion_tokens = answer.completion_tokens
        record.finish_reason = answer.finish_reason
        if record.event_ts:
            record.last_event_ts = engine.epoch(record.event_ts[-1])
            record.e2e_s = record.event_ts[-1] - arrival
        if alone:
            _send(engine, record, transport, "finish",
                  sse_frame(head + finish_payload(engine, answer, chat, last_in_stream=not usage_sent)))
        if include_usage and p.quirks.usage_missing:
            record.quirks.append("usage_missing")
        elif include_usage:
            usage = usage_payload(envelope, usage_of(engine, record, answer, chat), engine.dialect.stream.last_event_tail)
            _send(engine, record, transport, "usage", sse_frame(usage))
        _send(engine, record, transport, "done", sse_frame("[DONE]"))
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
        r.add_post("/generate", native_generate)
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
    values = startup_values(profile, host, port)
    lines = [line.format(**values) for line in dialect.startup_lines]
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
    binds_at = len(lines) * (1 - dialect.warming_share) if dialect.warming_share else None
    for i, line in enumerate(lines):
        if binds_at is not None and not listening and i >= binds_at:
            await site.start()  # the HTTP server is up, its own warm-up still running: health 503
            listening = True
            log(dialect.bound_line.format(**values))
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

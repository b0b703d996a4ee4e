"""Hostile engine responses against the load client and the functional checks.

A tiny aiohttp server in this test answers with huge bodies, invalid JSON, invalid UTF-8 and
absurd token counts. Each request must end as a bounded, recorded result (a row), never an
exception, and the rows must still make valid tables (Parquet), so no later task crashes.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

MiB = 1 << 20
HUGE = 64 * MiB
CHUNK = 256 * 1024
MAX_SENT = 24 * MiB  # socket buffers hold a few MiB; a client that read it all would take 64
MODES = ("huge_event", "huge_error", "huge_body", "bad_json", "bad_utf8", "not_object", "absurd_usage",
         "absurd_continuous_usage")


class HostileEngine:
    """Serves OpenAI-style endpoints, misbehaving as `mode` says (or as the X-Request-Id names)."""

    def __init__(self) -> None:
        self.mode = "bad_json"
        self.sent: dict[str, int] = {}
        self.loop = asyncio.new_event_loop()
        self.url = ""
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(30)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=64 * MiB)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.models)
        app.router.add_route("*", "/{tail:.*}", self.generate)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # noqa: SLF001
        ready.set()
        self.loop.run_forever()
        self.loop.close()  # here, not at some later test's garbage collection

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "hostile", "object": "model"}]})

    async def _stream_bytes(self, request: web.Request, status: int, ctype: str, blocks: Iterator[bytes]) -> web.StreamResponse:
        key = request.headers.get("X-Request-Id") or self.mode
        resp = web.StreamResponse(status=status, headers={"Content-Type": ctype})
        await resp.prepare(request)
        self.sent[key] = 0
        try:
            for block in blocks:
                await resp.write(block)
                self.sent[key] += len(block)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what we measure
        return resp

    async def generate(self, request: web.Request) -> web.StreamResponse:
        mode = request.headers.get("X-Request-Id", "").split(":")[0] or self.mode
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError:
            body = {}
        stream = bool(body.get("stream")) if isinstance(body, dict) else False
        if mode == "huge_error":
            return await self._stream_bytes(request, 500, "text/plain", (b"E" * CHUNK for _ in range(HUGE // CHUNK)))
        if mode in ("huge_event", "huge_body"):
            head = b"data: " if stream else b'{"choices": [{"text": "'
            return await self._stream_bytes(request, 200, "text/event-stream" if stream else "application/json",
                                            iter([head, *(b"x" * CHUNK for _ in range(HUGE // CHUNK))]))
        if not stream:
            payload = {
                "bad_json": b'{"choices": [{"message": {"content": "hi"', "bad_utf8": b'{"choices": [{"text": "\xff\xfe\xfd"}]}',
                "not_object": b"[1, 2, 3]",
            }.get(mode)
            if payload is None:  # absurd usage
                payload = json.dumps({"id": "x", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "text": "hi", "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10**30, "completion_tokens": -7, "total_tokens": "lots"}}).encode()
            return web.Response(body=payload, content_type="application/json")
        events = [b'data: {"choices": [{"index": 0, "text": "a", "delta": {"content": "a"}}]}\n\n']
        if mode == "bad_json":
            events.append(b"data: {not json\n\n")
        elif mode == "bad_utf8":
            events.append(b'data: {"choices": [{"index": 0, "text": "\xff\xfe", "delta": {"content": "\xff"}}]}\n\n')
        elif mode == "not_object":
            events.append(b"data: [1, 2, 3]\n\n")
        elif mode == "absurd_usage":
            events.append(b'data: {"choices": [], "usage": {"prompt_tokens": 1e30, "completion_tokens": -7}}\n\n')
        elif mode == "absurd_continuous_usage":
            events = [b'data: {"choices": [{"index": 0, "text": "a", "delta": {"content": "a"}}], '
                      b'"usage": {"prompt_tokens": 5, "completion_tokens": %d}}\n\n' % (10**20 * (i + 1)) for i in range(3)]
        events.append(b"data: [DONE]\n\n")
        return await self._stream_bytes(request, 200, "text/event-stream", iter(events))


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileEngine]:
    server = HostileEngine()
    yield server
    server.close()


def _table_bytes(table: str, rows: list[dict[str, Any]]) -> bytes:
    from tasks.state.tables import to_frame, to_parquet_bytes

    return to_parquet_bytes(to_frame(table, rows))


def test_load_client_bounds_and_records_every_hostile_stream(hostile):
    from tasks.engines import adapter_for
    from tasks.load.client import RequestSpec, new_session, run_async, send_request

    adapter = adapter_for("sglang")
    payload = json.dumps({"model": "hostile", "prompt": "x", "max_tokens": 4, "stream": True}).encode()

    async def main() -> list[Any]:
        async with new_session() as session:
            return [await send_request(session, hostile.url, RequestSpec(f"{mode}:1", "/v1/completions", payload,
                                                                         expected_completion_tokens=4), adapter, 20.0)
                    for mode in MODES if mode != "huge_body"]

    results = {r.request_id.split(":")[0]: r for r in run_async(main())}
    for mode, r in results.items():
        assert r.error is None or len(r.error) <= 1000, (mode, len(r.error))
    for mode in ("huge_event", "huge_error", "bad_json", "bad_utf8", "not_object"):
        assert results[mode].status == "error", (mode, results[mode])
    assert "HTTP 500" in results["huge_error"].error
    assert "over" in results["huge_event"].error and "MiB" in results["huge_event"].error
    for mode in ("huge_event", "huge_error"):
        assert hostile.sent[f"{mode}:1"] < MAX_SENT, (mode, hostile.sent[f"{mode}:1"])  # it stopped reading
    assert "malformed JSON" in results["bad_json"].error and "malformed JSON" in results["bad_utf8"].error
    for mode in ("absurd_usage", "absurd_continuous_usage"):
        r = results[mode]
        assert r.prompt_tokens is None or 0 <= r.prompt_tokens < 2**31, (mode, r.prompt_tokens)
        assert r.completion_tokens is None or 0 <= r.completion_tokens < 2**31, (mode, r.completion_tokens)
        assert r.tokens_per_event is None or all(0 <= n < 2**31 for n in r.tokens_per_event), r.tokens_per_event
        assert r.error and "usage" in r.error  # recorded, not silently dropped
    rows = [{"run_id": "r", "engine": "hostile", "image_digest": "sha256:" + "0" * 64, "scenario": "short", "round": 1,
             **r.row_fields()} for r in results.values()]
    assert _table_bytes("requests", rows)  # the archive and validation can take these rows


@pytest.mark.parametrize("mode", ["bad_json", "bad_utf8", "not_object", "absurd_usage", "huge_body"])
def test_functional_checks_record_hostile_answers_as_bounded_rows(hostile, mode, tmp_path):
    from tasks.checks import run_functional
    from tasks.config import parse_run_config
    from tasks.engines.context import EngineContext, endpoint_for
    from tasks.state.storage import RunDir

    hostile.mode = mode
    cfg = parse_run_config({"run_id": "hostile", "model": {"name": "hostile"}, "request_timeout_s": 20,
                            "engines": [{"name": "hostile", "dialect": "openai", "launcher": "external",
                                         "endpoint": hostile.url}]})
    ctx = EngineContext(cfg, endpoint_for(cfg, "hostile", hostile.url, "sha256:" + "0" * 64), RunDir("hostile", tmp_path))
    rows = run_functional(ctx)
    assert rows and all(r["outcome"] in ("pass", "fail", "not_applicable") for r in rows)
    assert any(r["outcome"] == "fail" for r in rows)
    for r in rows:
        assert len(json.dumps(r["evidence"], default=str)) < 20_000, (r["check"], len(json.dumps(r["evidence"], default=str)))
    assert _table_bytes("checks", rows)

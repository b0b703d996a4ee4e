"""A plain OpenAI-compatible server written for the tests, apart from DayOne's simulator.

The simulator and DayOne's client come from the same hands and could agree on a wrong belief;
this server shares no code with either. It does the obvious thing (a word per token, one token
per event, a fixed delay per token) and each test subclass changes one behaviour, so a verdict
that holds against it holds for any engine that behaves that way.

Hooks a subclass overrides (all optional):
- `completion_events(kind, prompt_tokens, max_tokens)` -> list of (delay_s, chunk dict): the
  streamed events of one request, usage and [DONE] excluded (the base adds them); unstreamed, a chat
  message carries the deltas' content and their other text fields (e.g. reasoning), joined;
- `first_token_delay_s(kind, prompt_tokens, max_tokens)`: the delay before the first token;
- `metrics_text()`: the Prometheus text of GET /metrics (404 when it returns None);
- `error_for(kind, body)`: an (HTTP status, message) to answer instead of generating.

Runs in a thread with its own event loop on a free loopback port; use as a context manager.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import web

MODEL = "plain-model"


def prompt_token_count(prompt: Any) -> int:
    """A token-ID list counts its IDs; text counts its words (this server's whole tokenizer)."""
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        return len(prompt) if (not prompt or isinstance(prompt[0], int)) else len(" ".join(map(str, prompt)).split())
    return len(str(prompt).split())


def messages_token_count(messages: list[dict[str, Any]]) -> int:
    words = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        words += len(str(content or "").split())
    return words


class PlainServer:
    model = MODEL
    token_delay_s = 0.002
    ssl_context: Any = None  # an ssl.SSLContext: serve https

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[dict[str, Any]] = []  # kind, prompt_tokens, arrived (time.time()), stream, temperature
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # ---- hooks -------------------------------------------------------------------------------
    def first_token_delay_s(self, kind: str, prompt_tokens: int, max_tokens: int) -> float:
        return 0.01

    def completion_events(self, kind: str, prompt_tokens: int, max_tokens: int) -> list[tuple[float, dict]]:
        """One event per token; chat streams open with a role-only event, as OpenAI's API does."""
        events: list[tuple[float, dict]] = []
        if kind == "chat":
            events.append((0.0, self.chat_chunk({"role": "assistant", "content": ""})))
        first = self.first_token_delay_s(kind, prompt_tokens, max_tokens)
        for i in range(max_tokens):
            delay = first if i == 0 else self.token_delay_s
            events.append((delay, self.text_chunk(kind, f"w{i} ")))
        return events

    def metrics_text(self) -> str | None:
        return None

    def error_for(self, kind: str, body: dict[str, Any]) -> tuple[int, str] | None:
        return None

    # ---- chunk builders ----------------------------------------------------------------------
    def chat_chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict:
        return {"id": "plain", "object": "chat.completion.chunk", "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def text_chunk(self, kind: str, text: str, finish: str | None = None) -> dict:
        if kind == "chat":
            return self.chat_chunk({"content": text}, finish)
        return {"id": "plain", "object": "text_completion", "model": self.model,
                "choices": [{"index": 0, "text": text, "finish_reason": finish}]}

    # ---- HTTP --------------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _metrics(self, request: web.Request) -> web.Response:
        text = self.metrics_text()
        if text is None:
            raise web.HTTPNotFound()
        return web.Response(text=text, content_type="text/plain")

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        body = await request.json()
        if kind == "chat":
            prompt_tokens = messages_token_count(body.get("messages") or [])
        else:
            prompt_tokens = prompt_token_count(body.get("prompt", ""))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        self.requests.append({"kind": kind, "prompt_tokens": prompt_tokens, "arrived": time.time(),
                              "stream": bool(body.get("stream")), "temperature": body.get("temperature")})
        error = self.error_for(kind, body)
        if error is not None:
            status, message = error
            return web.json_response({"error": {"message": message, "type": "server_error"}}, status=status)
        events = self.completion_events(kind, prompt_tokens, max_tokens)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        if not body.get("stream"):
            await asyncio.sleep(sum(d for d, _ in events))
            text = "".join(_chunk_text(c) for _, c in events)
            choice: dict[str, Any] = ({"index": 0, "message": {**_delta_fields(events), "role": "assistant",
                                                               "content": text},
                                       "finish_reason": "length"} if kind == "chat"
                                      else {"index": 0, "text": text, "finish_reason": "length"})
            return web.json_response({"id": "plain", "object": "chat.completion" if kind == "chat"
                                      else "text_completion", "model": self.model, "choices": [choice],
                                      "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for delay, chunk in events:
            if delay:
                await asyncio.sleep(delay)
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            last = {"id": "plain", "model": self.model, "choices": [], "usage": usage}
            await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    def routes(self) -> list[web.RouteDef]:
        """The server's routes; a subclass may add its own."""
        return [
            web.get("/v1/models", self._models),
            web.get("/health", self._health),
            web.get("/metrics", self._metrics),
            web.post("/v1/chat/completions", self._chat),
            web.post("/v1/completions", self._completions),
        ]

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "PlainServer":
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.add_routes(self.routes())
            self._runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
            self._loop.run_until_complete(site.start())
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{port}"
            ready.set()
            loop = self._loop
            loop.run_forever()
            loop.close()  # here, not at some later test's garbage collection

        self._thread = threading.Thread(target=serve, daemon=True, name=type(self).__name__)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("plain server did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        loop, runner = self._loop, self._runner
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)  # type: ignore[union-attr]
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> "PlainServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class TokenGap4ms(PlainServer):
    """4 ms between tokens: the base of the effect tests."""

    token_delay_s = 0.004


class TokenGap2ms(PlainServer):
    """2 ms between tokens: the one behaviour that differs from TokenGap4ms."""

    token_delay_s = 0.002


def _delta_fields(events: list[tuple[float, dict]]) -> dict[str, str]:
    """The text fields of a stream's deltas besides content (e.g. reasoning), joined: the same
    answer unstreamed carries them in its message."""
    fields: dict[str, str] = {}
    for _, chunk in events:
        for choice in chunk.get("choices") or []:
            for name, value in (choice.get("delta") or {}).items():
                if name not in ("role", "content") and isinstance(value, str):
                    fields[name] = fields.get(name, "") + value
    return fields


def _chunk_text(chunk: dict) -> str:
    out = ""
    for choice in chunk.get("choices") or []:
        out += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    return out

"""A plain server that records what each request carried (its prompt or messages and max_tokens, exactly as
sent), when it arrived, and how many requests it held at once: the dataset scenario's rows checked at the
receiving end."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from plain_server import PlainServer


class RecordingServer(PlainServer):
    token_delay_s = 0.003

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, Any]] = []  # kind, prompt, messages, max_tokens, arrived, in_flight_at_arrival
        self.in_flight = 0
        self.peak_in_flight = 0

    async def _recorded(self, request: web.Request, kind: str) -> web.StreamResponse:
        body = await request.json()  # aiohttp keeps the body: _generate reads it again
        self.in_flight += 1  # one event loop serves every request: no lock
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.received.append({"kind": kind, "prompt": body.get("prompt"), "messages": body.get("messages"),
                              "max_tokens": body.get("max_tokens"), "arrived": time.perf_counter(),
                              "in_flight_at_arrival": self.in_flight})
        try:
            return await self._generate(request, kind)
        finally:
            self.in_flight -= 1

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._recorded(request, "chat")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._recorded(request, "completions")

"""A multi-turn chat server written for the tests, apart from DayOne's simulator.

It remembers each conversation by its first message and answers a turn only when it carries that whole
conversation: every earlier message in order, its own earlier answers word for word, then one new user
message; anything else is HTTP 400, as a stateless chat API that lost the context would mislead. Its usage
reports the earlier conversation (an exact shared prefix, counted in words) as cached, the way vLLM and
SGLang fill prompt_tokens_details.cached_tokens.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from plain_server import PlainServer, messages_token_count


class MultiTurnServer(PlainServer):
    def __init__(self) -> None:
        super().__init__()
        self.conversations: dict[str, list[dict[str, Any]]] = {}  # first message -> the conversation so far
        self.refused: list[str] = []
        self.turns: list[dict[str, Any]] = []  # session, turn, prompt and cached words, per answered turn

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = [{"role": m.get("role"), "content": m.get("content")} for m in body.get("messages") or []]
        if not messages or messages[-1]["role"] != "user":
            return self._refuse("the last message must be the user's new one")
        key = str(messages[0]["content"])
        known = self.conversations.setdefault(key, [])
        if messages[:-1] != known:
            return self._refuse(f"turn {len(known) // 2} does not carry the whole conversation "
                                f"({len(messages) - 1} earlier messages sent, {len(known)} held)")
        session = list(self.conversations).index(key)
        turn = len(known) // 2
        words = [f"s{session}t{turn}w{i} " for i in range(int(body.get("max_tokens") or 16))]
        self.conversations[key] = [*messages, {"role": "assistant", "content": "".join(words)}]
        prompt, cached = messages_token_count(messages), messages_token_count(known)
        self.turns.append({"session": session, "turn": turn, "prompt_tokens": prompt, "cached_tokens": cached})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for word in words:
            await asyncio.sleep(self.token_delay_s)
            await resp.write(b"data: " + json.dumps(self.chat_chunk({"content": word})).encode() + b"\n\n")
        usage = {"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words),
                 "prompt_tokens_details": {"cached_tokens": cached}}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _refuse(self, why: str) -> web.Response:
        self.refused.append(why)
        return web.json_response({"error": {"message": why, "type": "invalid_request_error"}}, status=400)

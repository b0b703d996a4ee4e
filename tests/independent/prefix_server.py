"""A server written for the tests that caches by exact shared prefix, apart from DayOne's simulator.

Each token-ID prompt's cached tokens are its longest common prefix with any prompt that arrived before it,
reported in usage (prompt_tokens_details.cached_tokens, as vLLM and SGLang do) and in vLLM-named prefix-cache
counters: the ideal cache, so what a client measures against it must equal the reuse its traffic planned.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from plain_server import PlainServer


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ExactPrefixServer(PlainServer):
    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[list[int]] = []
        self.queries = self.hits = 0

    def metrics_text(self) -> str:
        return f"vllm:prefix_cache_queries_total {self.queries}\nvllm:prefix_cache_hits_total {self.hits}\n"

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        prompt = [int(t) for t in body["prompt"]]
        cached = max((common_prefix(prompt, p) for p in self.prompts), default=0)
        self.prompts.append(prompt)
        self.queries += len(prompt)
        self.hits += cached
        words = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(words):
            await asyncio.sleep(self.token_delay_s)
            await resp.write(b"data: " + json.dumps(self.text_chunk("completions", f"w{i} ")).encode() + b"\n\n")
        usage = {"prompt_tokens": len(prompt), "completion_tokens": words, "total_tokens": len(prompt) + words,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

"""Plain servers that score a prompt's tokens, written for the tests apart from DayOne's simulator: vLLM's
echo form on /v1/completions and SGLang's /generate with return_logprob, a token every 4 characters,
each token's log-probability from its text; subclasses plant an offset, or one that grows with depth."""

from __future__ import annotations

import zlib

from aiohttp import web
from quality_server import SolvesEverything

CHARS_PER_TOKEN = 4


def tokens_of(text: str) -> list[str]:
    return [text[i:i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def sound_logprob(token: str) -> float:
    """What a sound engine gives the token: between -1 and -3 nats, fixed by its text."""
    return -1.0 - 2.0 * (zlib.crc32(token.encode()) % 1000) / 1000


class ScoresPrompts(SolvesEverything):
    offset_nats = 0.0  # taken off every token's log-probability
    offset_nats_per_1k_tokens = 0.0  # and this much more per 1,000 tokens of depth

    def logprobs(self, text: str) -> list[float | None]:
        """None for the first token (no context), as both dialects answer."""
        return [None] + [sound_logprob(t) - self.offset_nats - self.offset_nats_per_1k_tokens * i / 1000
                         for i, t in enumerate(tokens_of(text)) if i > 0]

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("echo"):
            return await super()._completions(request)
        scored = self.logprobs(body["prompt"])
        return web.json_response({"object": "text_completion", "model": self.model, "choices": [
            {"index": 0, "text": body["prompt"] + " x", "finish_reason": "length",
             "logprobs": {"token_logprobs": [*scored, -0.5], "tokens": [*tokens_of(body["prompt"]), " x"]}}],
            "usage": {"prompt_tokens": len(scored), "completion_tokens": 1, "total_tokens": len(scored) + 1}})

    async def _native_generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        scored = self.logprobs(body["text"])
        start = body.get("logprob_start_len", -1)
        rows = [[lp, i, None] for i, lp in enumerate(scored)][start:] if body.get("return_logprob") and start >= 0 \
            else []
        return web.json_response({"text": " x", "meta_info": {"prompt_tokens": len(scored), "completion_tokens": 1,
                                                             "input_token_logprobs": rows,
                                                             "output_token_logprobs": [[-0.5, 7, None]]}})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/generate", self._native_generate)]


class OffsetsLogprobs(ScoresPrompts):
    offset_nats = 0.3


class DriftsWithDepth(ScoresPrompts):
    offset_nats_per_1k_tokens = 1.0

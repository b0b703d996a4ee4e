"""What the simulated model gives each prompt token: a log-probability fixed by the token, less the
profile's planted NLL offset and its growth with depth (Profile.quality), in vLLM's echo form and
SGLang's /generate form (docs/PROTOCOL.md, "Log-likelihood parity")."""

from __future__ import annotations

import zlib
from typing import Any

from tasks.config.sim_profile import QualityPlant
from tasks.sim.tokenizer import encode


def prompt_logprobs(text: str, plant: QualityPlant) -> list[float | None]:
    """None for the first token (nothing before it), then each token's log-probability: between -1 and
    -3 nats by its id, minus the planted offset and its growth per 1,000 tokens of depth."""
    ids = encode(text)
    return [None] + [-1.0 - 2.0 * (zlib.crc32(str(t).encode()) % 1000) / 1000 - plant.nll_offset_nats
                     - plant.nll_offset_nats_per_1k_tokens * i / 1000 for i, t in enumerate(ids) if i > 0]


def vllm_echo(body: dict[str, Any], model: str, plant: QualityPlant) -> dict[str, Any]:
    """/v1/completions with echo and logprobs: the prompt's token_logprobs, then one generated token's."""
    scored = prompt_logprobs(str(body.get("prompt", "")), plant)
    return {"object": "text_completion", "model": model, "choices": [
        {"index": 0, "text": str(body.get("prompt", "")) + " a", "finish_reason": "length",
         "logprobs": {"token_logprobs": [*scored, -0.5], "tokens": None, "top_logprobs": None, "text_offset": None}}],
        "usage": {"prompt_tokens": len(scored), "completion_tokens": 1, "total_tokens": len(scored) + 1}}


def sglang_generate(body: dict[str, Any], plant: QualityPlant) -> dict[str, Any]:
    """/generate: meta_info.input_token_logprobs from logprob_start_len on, when return_logprob asks."""
    scored = prompt_logprobs(str(body.get("text", "")), plant)
    start = body.get("logprob_start_len", -1)
    ids = encode(str(body.get("text", "")))
    rows = [[lp, t, None] for lp, t in zip(scored, ids)][start:] if body.get("return_logprob") and start >= 0 else []
    return {"text": " a", "meta_info": {"prompt_tokens": len(scored), "completion_tokens": 1,
                                        "input_token_logprobs": rows, "output_token_logprobs": [[-0.5, 1, None]]}}

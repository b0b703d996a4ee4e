"""Request planning: exact-length prompts, request bodies and arrival schedules. Pure functions.

Prompts of exact length are random token IDs sent as a token-ID prompt to /v1/completions, so no
tokenizer is needed; each engine's adapter adds the fields that force the output length. Every
prompt is seeded from its request's place in the run, so a rerun sends the same bytes. (Text
prompts of exact length, calibrated through the engine's tokenize endpoint, are in
tasks/load/prompts.py.)
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tasks.engines.base import EngineAdapter
from tasks.load.client import RequestSpec

COMPLETIONS_PATH = "/v1/completions"
# Token IDs drawn from here: above the special and byte tokens at the bottom of common
# vocabularies, below the 32K size of the smallest common ones.
TOKEN_ID_RANGE = (1000, 30000)


@dataclass(frozen=True)
class Shape:
    """A load shape the server compiles for: lengths and either a concurrency (closed loop) or an
    arrival rate (open loop, uncapped in flight: PROTOCOL.md section 6, "Closed and open loop")."""

    input_tokens: int
    output_tokens: int
    concurrency: int | None = None
    rate_rps: float | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate_rps is None):
            raise ValueError(f"a shape has a concurrency or a rate, not both nor neither: {self}")

    @property
    def key(self) -> str:
        tail = f"rate{self.rate_rps:g}" if self.rate_rps is not None else f"c{self.concurrency}"
        return f"in{self.input_tokens}-out{self.output_tokens}-{tail}"

    def streams(self, requests: int) -> int:
        """The most of a round's `requests` in flight at once: the concurrency, or open loop all of them."""
        return self.concurrency if self.concurrency is not None else requests

    def load_fields(self) -> dict[str, Any]:
        """The round's load as its rows record it: exactly one of concurrency and rate_rps is set."""
        return {"concurrency": self.concurrency, "rate_rps": self.rate_rps,
                "max_in_flight": None}  # open loop is uncapped, closed loop's bound is its concurrency


def random_token_ids(n: int, seed: str | int, id_range: tuple[int, int] = TOKEN_ID_RANGE) -> list[int]:
    """n token IDs drawn uniformly from id_range, the same for the same seed."""
    rng = random.Random(seed)
    lo, hi = id_range
    return [rng.randrange(lo, hi) for _ in range(n)]


def completion_body(model: str, prompt_ids: Sequence[int], output_tokens: int, adapter: EngineAdapter) -> dict[str, Any]:
    """A streaming /v1/completions body with a token-ID prompt and the output length forced."""
    return {
        "model": model,
        "prompt": list(prompt_ids),
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        **adapter.exact_output_fields(output_tokens),
    }


def run_tag(run_id: str) -> str:
    """A short tag of the run id, so request ids stay unique on a server shared by runs."""
    return hashlib.sha1(run_id.encode()).hexdigest()[:8]


def plan_requests(
    *,
    model: str,
    adapter: EngineAdapter,
    shape: Shape,
    count: int,
    id_prefix: str,
    seed: str,
) -> list[RequestSpec]:
    """`count` token-ID completion requests of the shape; request i's prompt is seeded by seed and i."""
    specs = []
    for i in range(count):
        ids = random_token_ids(shape.input_tokens, f"{seed}/{i}")
        body = completion_body(model, ids, shape.output_tokens, adapter)
        specs.append(
            RequestSpec(
                request_id=f"{id_prefix}-{i:05d}",
                path=COMPLETIONS_PATH,
                payload=json.dumps(body, separators=(",", ":")).encode(),
                expected_prompt_tokens=shape.input_tokens,
                expected_completion_tokens=shape.output_tokens,
            )
        )
    return specs


def poisson_arrivals(count: int, rate_rps: float, seed: str | int) -> list[float]:
    """Open-loop arrival offsets (seconds from the round's start): exponential gaps at rate_rps."""
    if rate_rps <= 0:
        raise ValueError(f"rate_rps must be > 0, got {rate_rps}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate_rps)
    return out

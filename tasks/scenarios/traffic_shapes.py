"""The load shapes of the traffic scenarios (sessions, shared prefix), bucketed, for the warmup to cover
(the report's rule: warm the traffic's own length x concurrency combinations) and first-encounter flags."""

from __future__ import annotations

from tasks.config import RunConfig
from tasks.config.sessions import SessionsScenario
from tasks.load.plan import Shape

MIN_BUCKET_TOKENS = 64


def bucket_tokens(n: int) -> int:
    """The power of two at or above n (at least MIN_BUCKET_TOKENS): lengths an engine compiles alike."""
    b = MIN_BUCKET_TOKENS
    while b < n:
        b *= 2
    return b


def sessions_turn_shape(s: SessionsScenario, turn: int, concurrency: int | None, rate_rps: float | None) -> Shape:
    """Turn `turn` (0-based) of a session: its conversation's length bucketed, at the level's load."""
    prompt = (turn + 1) * s.user_tokens + turn * s.output_tokens
    return Shape(bucket_tokens(prompt), s.output_tokens, concurrency, rate_rps)


def sessions_shapes(config: RunConfig) -> list[Shape]:
    s = config.scenarios.sessions
    loads = [(None, float(r)) for r in s.rates] if s.arrival == "poisson" else [(c, None) for c in s.concurrency]
    out: list[Shape] = []
    for c, rate in loads:
        out += [x for x in (sessions_turn_shape(s, t, c, rate) for t in range(s.turns)) if x not in out]
    return out


def shared_prefix_shapes(config: RunConfig) -> list[Shape]:
    s = config.scenarios.shared_prefix
    return [Shape(s.input_tokens, s.output_tokens, c) for c in s.concurrency]


def traffic_shapes(config: RunConfig) -> list[Shape]:
    """The shapes of every enabled traffic scenario, for the run's warmup matrix."""
    sc = config.scenarios
    return [*(sessions_shapes(config) if sc.sessions.enabled else []),
            *(shared_prefix_shapes(config) if sc.shared_prefix.enabled else [])]

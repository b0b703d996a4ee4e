"""Multi-turn chat sessions (PROTOCOL.md, "Sessions"): each turn sends the whole conversation so far,
the engine's own answers included, as a chat client does; one `session_turns` row per turn, and per turn
index the median TTFT and the share of the prompt the engine served from its cache, with intervals."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


from tasks.config.sessions import SessionsScenario
from tasks.engines.context import EngineContext
from tasks.load.prompts import FillerPool, calibrate, plain_text, tokenize_counter
from tasks.load.client import RequestResult, RequestSpec, new_session, run_async, send_request, timing_window
from tasks.load.plan import poisson_arrivals, run_tag
from tasks.load.progress import Progress
from tasks.stats.figures import median, round_figures
from tasks.stats.intervals import median_interval, share_t_interval
from tasks.scenarios.traffic_shapes import sessions_turn_shape
from tasks.scenarios.warmup import mark_seen, seen_shapes

log = logging.getLogger("dayone.load")

SCENARIO = "sessions"
CHAT_PATH = "/v1/chat/completions"
CONFIDENCE = 0.95
NOT_SENT = "not_sent"  # a turn after a failed one: its conversation never existed


@dataclass(frozen=True)
class Level:
    """A load level of the scenario: sessions in flight (arrival fixed) or session arrivals per second."""

    concurrency: int | None = None
    rate_rps: float | None = None

    @property
    def key(self) -> str:
        return f"rate{self.rate_rps:g}" if self.rate_rps is not None else f"c{self.concurrency}"


@dataclass(frozen=True)
class SessionPlan:
    """One session, planned before the clock starts: its user messages and the think time before each turn."""

    index: int
    user_messages: tuple[str, ...]
    think_s: tuple[float, ...]  # before each turn; 0 before the first


def levels(s: SessionsScenario) -> list[Level]:
    if s.arrival == "poisson":
        return [Level(rate_rps=float(r)) for r in s.rates]
    return [Level(concurrency=c) for c in s.concurrency]


def think_times(s: SessionsScenario, seed: str, turns: int) -> tuple[float, ...]:
    """The wait before each turn (none before the first), drawn from the seed."""
    rng = random.Random(f"think:{seed}")
    draw = (lambda: rng.expovariate(1 / s.think_time_s)) if s.think_distribution == "exponential" and s.think_time_s \
        else (lambda: s.think_time_s)
    return (0.0, *(draw() for _ in range(turns - 1)))


def plan_sessions(s: SessionsScenario, words_per_message: int, seed: str) -> list[SessionPlan]:
    """Every session of a round: distinct user messages (so sessions share no prefix) from the seed."""
    return [SessionPlan(i, tuple(plain_text(FillerPool(f"{seed}/s{i}/t{t}").take(words_per_message))
                                 for t in range(s.turns)),
                        think_times(s, f"{seed}/s{i}", s.turns))
            for i in range(s.sessions)]


def conversation(history: Sequence[dict[str, str]], user_message: str) -> list[dict[str, str]]:
    """What a turn sends: every earlier message, in order (the answers as the engine gave them), then the new one."""
    return [*history, {"role": "user", "content": user_message}]


def chat_body(model: str, messages: list[dict[str, str]], output_tokens: int, adapter: Any) -> dict[str, Any]:
    return {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0.0, **adapter.exact_output_fields(output_tokens)}


def words_per_message(ctx: EngineContext, s: SessionsScenario) -> tuple[int, bool]:
    """Filler words making one user message of `user_tokens`, calibrated once through the engine's tokenize
    endpoint (estimated without one); returns (words, estimated). Usage records each turn's real length."""
    ep = ctx.endpoint
    try:
        with ep.http_client(30.0) as client:
            count = tokenize_counter(client, ep.base_url, ep.adapter)
            found = calibrate(s.user_tokens, plain_text, count, FillerPool(f"sessions:{s.seed}"))
    except Exception as exc:  # noqa: BLE001 -- a tokenizer that will not count leaves the estimate
        log.info("sessions: user message length estimated (%s: %s)", type(exc).__name__, exc)
        found = calibrate(s.user_tokens, plain_text, None)
    return max(1, found.words), found.estimated


# ---- one round ---------------------------------------------------------------------------------


async def run_session(stream: Any, ctx: EngineContext, plan: SessionPlan, s: SessionsScenario,
                      id_prefix: str, on_turn: Any) -> None:
    """One session's turns in order; `on_turn(plan, turn, think_s, messages_sent, result)` for each sent turn.
    A failed turn ends the session: the next one would carry a conversation that never happened."""
    ep = ctx.endpoint
    history: list[dict[str, str]] = []
    for turn, user_message in enumerate(plan.user_messages):
        if plan.think_s[turn]:
            await asyncio.sleep(plan.think_s[turn])
        messages = conversation(history, user_message)
        spec = RequestSpec(request_id=f"{id_prefix}-s{plan.index:03d}-t{turn}", path=CHAT_PATH,
                           payload=json.dumps(chat_body(ep.model, messages, s.output_tokens, ep.adapter),
                                              separators=(",", ":")).encode(),
                           expected_completion_tokens=s.output_tokens, keep_output=True)
        result = await send_request(stream, ep.base_url, spec, ep.adapter, ep.request_timeout_s)
        on_turn(plan, turn, plan.think_s[turn], len(messages), result)
        if result.status != "ok":
            return
        history = [*messages, {"role": "assistant", "content": result.output_text or ""}]


async def run_round(stream: Any, ctx: EngineContext, s: SessionsScenario, level: Level, round_: int,
                    plans: list[SessionPlan], seed: str, on_turn: Any) -> None:
    """A round's sessions: `concurrency` at a time, or each starting at its Poisson arrival."""
    id_prefix = f"{SCENARIO}-{level.key}-r{round_}-{run_tag(ctx.endpoint.run_id)}"
    with timing_window():
        if level.rate_rps is not None:
            loop = asyncio.get_running_loop()
            start = loop.time()
            offsets = poisson_arrivals(len(plans), level.rate_rps, f"arrivals:{seed}")

            async def arrive(plan: SessionPlan, due: float) -> None:
                await asyncio.sleep(max(0.0, due - loop.time()))
                await run_session(stream, ctx, plan, s, id_prefix, on_turn)

            await asyncio.gather(*(arrive(p, start + o) for p, o in zip(plans, offsets)))
            return
        queue = list(plans)

        async def worker() -> None:
            while queue:
                await run_session(stream, ctx, queue.pop(0), s, id_prefix, on_turn)

        await asyncio.gather(*(worker() for _ in range(min(level.concurrency or 1, len(plans)))))


def turn_row(keys: dict[str, Any], level: Level, plan: SessionPlan, turn: int, think_s: float, messages: int,
             r: RequestResult | None, first_encounter: bool) -> dict[str, Any]:
    """One `session_turns` row; r None: the turn was never sent (an earlier turn of its session failed)."""
    return {**keys, "concurrency": level.concurrency, "rate_rps": level.rate_rps, "session": plan.index,
            "turn": turn, "request_id": None if r is None else r.request_id,
            "send_ts": None if r is None else r.send_ts, "think_s": think_s, "messages_sent": messages,
            "ttft_s": None if r is None else r.ttft_s, "e2e_s": None if r is None else r.e2e_s,
            "tpot_s": None if r is None else r.tpot_s,
            "prompt_tokens": None if r is None else r.prompt_tokens,
            "completion_tokens": None if r is None else r.completion_tokens,
            "cached_tokens": None if r is None else r.cached_prompt_tokens,
            "length_deviation": None if r is None else r.length_deviation,
            "first_encounter": first_encounter, "status": NOT_SENT if r is None else r.status,
            "http_status": None if r is None else r.http_status, "error": None if r is None else r.error}


# ---- the scenario -------------------------------------------------------------------------------


def run_sessions(ctx: EngineContext) -> dict[str, Any]:
    """Every level's rounds; rows in `session_turns`; the summary with each level's per-turn figures."""
    s = ctx.config.scenarios.sessions
    ep = ctx.endpoint
    engine = ep.engine
    words, estimated = words_per_message(ctx, s)
    all_rows: dict[str, list[dict[str, Any]]] = {}
    progress = Progress(len(levels(s)) * s.rounds * s.sessions * s.turns, f"{engine} {SCENARIO}")
    try:
        with (ctx.run_dir.rows("session_turns", engine, SCENARIO) as out,
              ctx.run_dir.rows("rounds", engine, SCENARIO) as rounds_out):
            for level in levels(s):
                rows = all_rows.setdefault(level.key, [])
                for n in range(1, s.rounds + 1):
                    seed = f"{s.seed}/{level.key}/r{n}"
                    plans = plan_sessions(s, words, seed)
                    seen = seen_shapes(ctx.run_dir, engine)
                    keys = ep.row_keys(SCENARIO, n)
                    sent: dict[tuple[int, int], dict[str, Any]] = {}

                    def on_turn(plan: SessionPlan, turn: int, think: float, messages: int,
                                r: RequestResult, level: Level = level, keys: dict = keys,
                                sent: dict = sent, seen: set = seen) -> None:
                        shape = sessions_turn_shape(s, turn, level.concurrency, level.rate_rps)
                        sent[(plan.index, turn)] = turn_row(keys, level, plan, turn, think, messages, r,
                                                            shape.key not in seen)
                        progress.advance(r.status == "ok", f"{SCENARIO}-{level.key}-r{n}")

                    run_async(_round_on_session(ctx, s, level, n, plans, seed, on_turn))
                    planned = [sent.get((plan.index, turn)) or turn_row(
                        keys, level, plan, turn, plan.think_s[turn], 0, None, False)
                        for plan in plans for turn in range(s.turns)]
                    for row in planned:
                        out.write(row)
                    rows += planned
                    rounds_out.write(round_row(keys, level, planned, ctx.config))
                    for turn in range(s.turns):
                        mark_seen(ctx.run_dir, engine, sessions_turn_shape(s, turn, level.concurrency, level.rate_rps))
    finally:
        progress.close()
    return {"engine": engine, "scenario": SCENARIO, "words_per_message": words, "lengths_estimated": estimated,
            "levels": [{"concurrency": lv.concurrency, "rate_rps": lv.rate_rps,
                        **level_turn_figures(all_rows[lv.key], s.turns)} for lv in levels(s)]}


async def _round_on_session(ctx: EngineContext, s: SessionsScenario, level: Level, n: int,
                            plans: list[SessionPlan], seed: str, on_turn: Any) -> None:
    async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream, ctx.endpoint.access) as stream:
        await run_round(stream, ctx, s, level, n, plans, seed, on_turn)


# ---- figures (pure) -------------------------------------------------------------------------------


def round_row(keys: dict[str, Any], level: Level, planned: Sequence[dict[str, Any]], config: Any) -> dict[str, Any]:
    """The round's `rounds` row from its planned turns: the load figures the engines and the nightly compare,
    like a performance level's (input and output lengths null: each turn has its own). A turn never sent (its
    session broke at an earlier turn) is a failed request: a session that fails at turn 0 must not hide its later
    turns from the failed share. First encounter: a turn of the round met its shape new to the server."""
    figures = round_figures(planned, config.slo, config.round_error_rate_max)
    return {**keys, "concurrency": level.concurrency, "rate_rps": level.rate_rps, "max_in_flight": None,
            "launch": 0, "input_tokens": None, "output_tokens": None,
            "first_encounter": any(r["first_encounter"] for r in planned), "warmup": False, **figures}



def level_turn_figures(rows: Sequence[dict[str, Any]], turns: int, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Per turn index: the median TTFT over every session and round with its median interval, and the cached
    share of the prompt (the engine's cached tokens over prompt tokens, where it reports them): pooled, and
    a t interval over the rounds' shares. Sessions broken by a failed turn are counted."""
    out = []
    for turn in range(turns):
        mine = [r for r in rows if r["turn"] == turn]
        ok = [r for r in mine if r["status"] == "ok"]
        ttfts = [r["ttft_s"] for r in ok if r.get("ttft_s") is not None]
        told = [r for r in ok if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
        by_round: dict[int, list[dict[str, Any]]] = {}
        for r in told:
            by_round.setdefault(r["round"], []).append(r)
        shares = [sum(r["cached_tokens"] for r in rs) / sum(r["prompt_tokens"] for r in rs) for rs in by_round.values()]
        pooled = (sum(r["cached_tokens"] for r in told) / sum(r["prompt_tokens"] for r in told)) if told else None
        out.append({
            "turn": turn, "sent": sum(1 for r in mine if r["status"] != NOT_SENT), "ok": len(ok),
            "ttft_median_s": median(ttfts), "ttft_median_interval_s": median_interval(ttfts, confidence),
            "e2e_median_s": median(r["e2e_s"] for r in ok),
            "prompt_tokens_median": median(r["prompt_tokens"] for r in ok),
            "cached_share": pooled, "cached_share_interval": share_t_interval(shares, confidence) if shares else None,
            "cached_reported": len(told),
        })
    broken = {(r["round"], r["session"]) for r in rows if r["status"] != "ok"}
    sessions = {(r["round"], r["session"]) for r in rows}
    return {"turns": out, "sessions": len(sessions), "sessions_broken": len(broken),
            "turns_failed": sum(1 for r in rows if r["status"] not in ("ok", NOT_SENT)),
            "turns_not_sent": sum(1 for r in rows if r["status"] == NOT_SENT)}


def failed_turns(rows: Sequence[dict[str, Any]], share_max: float) -> str | None:
    """Why the step fails: more than `share_max` of the planned turns did not complete, naming the errors."""
    planned = len(rows)
    bad = [r for r in rows if r["status"] != "ok"]
    if not planned or len(bad) / planned <= share_max:
        return None
    errors: dict[str, int] = {}
    for r in bad:
        if r["status"] != NOT_SENT:
            key = str(r.get("error") or r["status"])[:120]
            errors[key] = errors.get(key, 0) + 1
    why = "; ".join(f"{e} x{k}" for e, k in sorted(errors.items(), key=lambda kv: -kv[1])[:3])
    return (f"{len(bad)} of {planned} planned turns did not complete ({len(bad) / planned:.0%}, more than "
            f"{share_max:.0%}; a failed turn ends its session)" + (f": {why}" if why else ""))

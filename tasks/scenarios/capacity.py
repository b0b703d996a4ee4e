"""Capacity under SLO: the highest load at which an engine's goodput share meets a target.

`run_capacity(ctx)` searches one engine: probe, double until a probe fails, bisect; each probe is
`rounds` measured rounds at one load (tasks/load/rounds.py, scenario "capacity"), judged by an
interval on its goodput share, with extra rounds while the interval holds the target (PROTOCOL.md
section 8, "Capacity under SLO"). The search logic (`next_load`, `judge`) is pure, so it is tested
without an engine. The result (found capacity, outcome, bracket, every probe) goes to the summary,
one row per probe to the `capacity` table.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal


from tasks.config.scenarios import CapacityScenario
from tasks.engines.context import EngineContext
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.stats.figures import meets_slo, slo_judged_withheld
from tasks.core.names import CAPACITY_SCENARIO as SCENARIO
from tasks.scenarios.warmup import is_first_encounter, mark_seen, warmup_requests
from tasks.stats.intervals import share_t_interval, wilson

log = logging.getLogger("dayone.load")

Outcome = Literal["found", "at_least_max", "below_start"]


# ---- one probe's verdict -----------------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """A probe's goodput share with its interval, and what the interval says about the target."""

    share: float | None  # good requests / requests sent, pooled over the rounds
    low: float | None
    high: float | None
    target: float

    @property
    def side(self) -> Literal["pass", "fail", "close"]:
        """pass or fail when the whole interval lies on one side of the target; close when it holds it."""
        if self.low is None or self.high is None:
            return "fail"  # nothing was sent: nothing met the SLO
        return "pass" if self.low >= self.target else "fail" if self.high < self.target else "close"

    @property
    def verdict(self) -> Literal["pass", "fail"]:
        """The interval's side; a close probe is decided by its point estimate."""
        if self.side != "close":
            return self.side  # type: ignore[return-value]
        return "pass" if self.share is not None and self.share >= self.target else "fail"


def judge(rounds: Sequence[tuple[int, int]], target: float, confidence: float) -> Judgement:
    """The verdict of a probe from its rounds' (good, sent) request counts.

    Wilson alone treats requests as independent, which they are not within a round (one stall
    delays every request in flight); the t on round shares alone sees nothing when three rounds
    agree exactly. Their union covers both: the finite number of requests and the round-to-round
    variation.
    """
    good = sum(g for g, _ in rounds)
    sent = sum(n for _, n in rounds)
    if sent == 0:
        return Judgement(None, None, None, target)
    low, high = wilson(good, sent, confidence)
    t = share_t_interval([g / n for g, n in rounds if n], confidence)
    if t is not None:
        low, high = min(low, t[0]), max(high, t[1])
    return Judgement(good / sent, low, high, target)


# ---- the search --------------------------------------------------------------------------------


def bracket(s: CapacityScenario, probes: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """(highest load that passed below the lowest that failed, that lowest failing load)."""
    failed = [load for load, ok in probes if not ok]
    high = min(failed) if failed else None
    passed = [load for load, ok in probes if ok and (high is None or load < high)]
    return (max(passed) if passed else None), high


def next_load(s: CapacityScenario, probes: Sequence[tuple[float, bool]]) -> float | None:
    """The next load to probe given (load, passed) so far, or None when the search is done."""
    if not probes:
        return _as_load(s, s.start)
    low, high = bracket(s, probes)
    if low is None:
        return None  # the start failed: below start
    if high is None:  # still bracketing: double, capped at max
        return None if low >= s.max else _as_load(s, min(2 * low, s.max))
    if high - low <= max(float(s.step), s.resolution * low):
        return None
    mid = _as_load(s, (low + high) / 2)
    return mid if low < mid < high else None


def _as_load(s: CapacityScenario, value: float) -> float:
    """Concurrency is whole (the midpoint rounds down); a rate keeps six decimals."""
    return float(math.floor(value)) if s.mode == "concurrency" else round(float(value), 6)


def outcome_of(s: CapacityScenario, probes: Sequence[tuple[float, bool]]) -> tuple[Outcome, float | None]:
    low, high = bracket(s, probes)
    if low is None:
        return "below_start", None
    return ("at_least_max" if high is None else "found"), low


def decisive_bracket(result: Any) -> tuple[float | None, float | None]:
    """The search's bracket [highest load that passed, lowest that failed] on decisive probes only (their
    interval lay wholly on one side of the target): an end resting on a close probe (decided by its
    point estimate) moves to the nearest decisive probe of the same verdict beyond it, or is unknown.
    `result`: a search's result or its published Capacity (mapping or model)."""
    low, high = _get(result, "bracket") or (None, None)
    probes = [(float(_get(p, "load")), _get(p, "verdict"), bool(_get(p, "close"))) for p in _get(result, "probes") or []]
    close = {load for load, _, is_close in probes if is_close}
    if low is not None and low in close:
        passed = [load for load, verdict, is_close in probes if verdict == "pass" and not is_close and load < low]
        low = max(passed) if passed else None
    if high is not None and high in close:
        failed = [load for load, verdict, is_close in probes if verdict == "fail" and not is_close and load > high]
        high = min(failed) if failed else None
    return low, high


def order(mine: Any, base: Any) -> Literal["more", "less", "overlap"]:
    """Two searches compared on their decisive probes (`decisive_bracket`): "more" when mine passed a load
    the base failed, "less" when it failed one the base passed; otherwise "overlap": the searches cannot
    tell the two capacities apart (their brackets overlap, or rest on close probes)."""
    my_pass, my_fail = decisive_bracket(mine)
    base_pass, base_fail = decisive_bracket(base)
    if my_pass is not None and base_fail is not None and my_pass >= base_fail:
        return "more"
    if base_pass is not None and my_fail is not None and base_pass >= my_fail:
        return "less"
    return "overlap"


def _get(thing: Any, key: str) -> Any:
    return thing.get(key) if isinstance(thing, dict) else getattr(thing, key, None)


def published(result: dict[str, Any], ttft_reliable: bool, slo: Any) -> dict[str, Any]:
    """The result as every path publishes it (summary, report, regression check): a capacity judged
    on TTFT or TPOT is withheld where the engine's stream timing is unreliable (the rule of every
    SLO-judged figure, goodput too: tasks/stats/figures.py slo_judged_withheld); the probes stay."""
    withheld = slo_judged_withheld(ttft_reliable, slo)
    if withheld is None:
        return result
    withheld += "; the probes are shown as measured"
    return {**result, "capacity": None, "withheld": withheld, "text": "not published: " + withheld}


def describe(result: dict[str, Any]) -> str:
    """One line for logs and the report, e.g. `capacity 12 concurrent requests (13 failed)`."""
    unit = "concurrent requests" if result["mode"] == "concurrency" else "req/s"
    low, high = result["bracket"]
    if result["outcome"] == "below_start":
        return f"below the start: {_fmt(result['start'])} {unit} already failed the target"
    if result["outcome"] == "at_least_max":
        return f"at least {_fmt(result['capacity'])} {unit} (the max probed; it passed)"
    return f"{_fmt(result['capacity'])} {unit} ({_fmt(high)} failed)"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


# ---- measuring ---------------------------------------------------------------------------------


class EngineGone(RuntimeError):
    """A round none of whose requests reached the engine: the search cannot go on."""


def shape_for(s: CapacityScenario, load: float) -> Shape:
    if s.mode == "rate":
        return Shape(s.input_tokens, s.output_tokens, rate_rps=float(load))
    return Shape(s.input_tokens, s.output_tokens, int(load))


def run_capacity(ctx: EngineContext) -> dict[str, Any]:
    """Search the engine's capacity; write the probe rounds (requests, rounds) and one row per probe
    (capacity); return the result."""
    s = ctx.config.scenarios.capacity
    engine = ctx.endpoint.engine
    slo = ctx.config.slo
    warm_first = ctx.config.scenarios.warmup

    async def main() -> list[dict[str, Any]]:
        probes: list[dict[str, Any]] = []
        history: list[tuple[float, bool]] = []
        async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream, ctx.endpoint.access) as session:
            with ctx.run_dir.rows("requests", engine, partition=SCENARIO) as req_rows, ctx.run_dir.rows(
                "rounds", engine, partition=SCENARIO
            ) as round_rows, ctx.run_dir.rows("capacity", engine, partition=SCENARIO) as probe_rows:
                while (load := next_load(s, history)) is not None:
                    shape = shape_for(s, load)
                    progress = Progress(s.requests_for(load) * (s.rounds + s.extra_rounds), f"{engine} {SCENARIO} "
                                        f"{shape.key}")
                    try:
                        if warm_first and is_first_encounter(ctx.run_dir, engine, shape):
                            # A new shape's first round carries compile costs: it would judge the JIT, not the load.
                            plan = RoundPlan(scenario=SCENARIO, shape=shape, round=0, requests=warmup_requests(shape),
                                             first_encounter=True, warmup=True, arrival_seed=f"{s.seed}/{shape.key}/r0",
                                             **shard_plan(ctx.config.load, shape, ctx.endpoint.base_url,
                                                          warmup_requests(shape)))
                            round_rows.write((await run_round(ctx, session, plan, req_rows, progress)).row)
                            mark_seen(ctx.run_dir, engine, shape)
                        counts: list[tuple[int, int]] = []
                        verdict = judge([], s.target_goodput_share, s.confidence)
                        while len(counts) < s.rounds or (verdict.side == "close"
                                                          and len(counts) < s.rounds + s.extra_rounds):
                            n = len(counts) + 1
                            plan = RoundPlan(scenario=SCENARIO, shape=shape, round=n, requests=s.requests_for(load),
                                             first_encounter=is_first_encounter(ctx.run_dir, engine, shape),
                                             arrival_seed=f"{s.seed}/{shape.key}/r{n}",
                                             **shard_plan(ctx.config.load, shape, ctx.endpoint.base_url,
                                                          s.requests_for(load)))
                            outcome = await run_round(ctx, session, plan, req_rows, progress)
                            round_rows.write(outcome.row)
                            mark_seen(ctx.run_dir, engine, shape)
                            rows = [r.row_fields() for r in outcome.results]
                            if rows and all(r["status"] == "error" and r["http_status"] is None for r in rows):
                                # Not an overload (that answers late, or with an HTTP error): nothing is there.
                                raise EngineGone(f"{engine}: no request of capacity round {n} at {shape.key} "
                                                 f"reached the engine ({rows[0]['error']}); the search stops "
                                                 f"rather than judge loads on an engine that is gone")
                            counts.append((sum(1 for r in rows if meets_slo(r, slo)), len(rows)))
                            if len(counts) >= s.rounds:
                                verdict = judge(counts, s.target_goodput_share, s.confidence)
                    finally:
                        progress.close()
                    probe = _probe(s, len(probes) + 1, load, shape, counts, verdict, bool(history)
                                   and bracket(s, history)[1] is not None)
                    probes.append(probe)
                    probe_rows.write(probe_row(ctx, s, probe))  # each probe as it ends: a failed search keeps them
                    history.append((load, probe["verdict"] == "pass"))
                    log.info("%s capacity probe %s: goodput share %.3f [%.3f, %.3f] vs %.2f: %s%s", engine,
                             shape.key, probe["goodput_share"] or 0, probe["ci_low"] or 0, probe["ci_high"] or 0,
                             s.target_goodput_share, probe["verdict"], " (close)" if probe["close"] else "")
        return probes

    probes = run_async(main())
    history = [(p["load"], p["verdict"] == "pass") for p in probes]
    outcome, capacity = outcome_of(s, history)
    result: dict[str, Any] = {
        "engine": engine,
        "scenario": SCENARIO,
        "mode": s.mode,
        "input_tokens": s.input_tokens,
        "output_tokens": s.output_tokens,
        "target_goodput_share": s.target_goodput_share,
        "confidence": s.confidence,
        "start": float(s.start),
        "max": float(s.max),
        "step": float(s.step),
        "outcome": outcome,
        "capacity": capacity,
        "bracket": list(bracket(s, history)),
        "probes": probes,
    }
    result["text"] = describe(result)
    log.info("%s capacity: %s", engine, result["text"])
    return result


def _probe(s: CapacityScenario, index: int, load: float, shape: Shape, counts: list[tuple[int, int]],
           verdict: Judgement, bisecting: bool) -> dict[str, Any]:
    return {
        "probe": index,
        "phase": "bisect" if bisecting else "bracket",
        "load": load,
        "concurrency": shape.concurrency,
        "rate_rps": shape.rate_rps,
        "rounds": len(counts),
        "requests": sum(n for _, n in counts),
        "requests_good": sum(g for g, _ in counts),
        "round_shares": [g / n if n else None for g, n in counts],
        "goodput_share": verdict.share,
        "ci_low": verdict.low,
        "ci_high": verdict.high,
        "verdict": verdict.verdict,
        "close": verdict.side == "close",
        "decided_by": "point estimate" if verdict.side == "close" else "interval",
    }


def probe_row(ctx: EngineContext, s: CapacityScenario, probe: dict[str, Any]) -> dict[str, Any]:
    """The capacity-table row of one probe (tasks/state/tables.py CAPACITY)."""
    keep = ("probe", "phase", "concurrency", "rate_rps", "rounds", "requests", "requests_good", "round_shares",
            "goodput_share", "ci_low", "ci_high", "verdict", "close", "decided_by")
    return {**ctx.endpoint.row_keys(SCENARIO), "mode": s.mode, "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens, **{k: probe[k] for k in keep},
            "target_goodput_share": s.target_goodput_share, "confidence": s.confidence}


__all__ = ["EngineGone", "Judgement", "bracket", "decisive_bracket", "describe", "judge", "next_load", "order", "outcome_of", "published",
           "run_capacity"]

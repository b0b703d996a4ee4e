"""Engines compared on the decision's figures (decision.LEAD_FIGURES): each level's steady rounds (the
first-encounter round left out) as effects with an interval (tasks/stats/effects.py), only where a figure is
published, like with like (a dataset round that met an emptied prefix cache against one that did). The summary
compares every engine with the base engine; the choice by purpose every pair."""

from __future__ import annotations

import math
from collections.abc import Collection

from tasks.report.decision import LEAD_FIGURES
from tasks.report.schema.comparison import Comparison
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.perf import Figure, PerfLevel
from tasks.stats.effects import COVERS_ROUNDS, effect

SMALL_CHANGE = 0.05  # the change whose rounds needed each comparison states (rounds_needed_for_5pct)


def comparisons(engines: dict[str, EngineSummary], base: str, confidence: float,
                others: Collection[str] | None = None) -> list[Comparison]:
    """Every other engine (those of `others`, when given) against `base` per decision figure and level both
    published."""
    if base not in engines:
        return []
    out = []
    for scenario, figure, higher_is_better, _ in LEAD_FIGURES:
        for base_level in engines[base].levels(scenario):
            base_figure = base_level.figures.get(figure)
            if base_figure is None:
                continue  # not published for the base
            for name, e in engines.items():
                level = next((lv for lv in e.levels(scenario) if lv.label == base_level.label), None)
                if name == base or level is None or (others is not None and name not in others):
                    continue
                mine = level.figures.get(figure)
                like = _like_rounds(base_level, level)
                if mine is None or like is None:
                    continue  # not published for this engine, or no rounds alike to compare
                base_values, my_values = _steady(base_level, base_figure, like), _steady(level, mine, like)
                launches = max(1, len(set(base_level.launches)), len(set(level.launches)))
                if launches > 1:  # replicated starts: one value per launch, so the interval holds their variation
                    base_values, my_values = _per_launch(base_level, base_values), _per_launch(level, my_values)
                paired = (scenario in engines[base].perf and name in engines[base].perf[scenario].interleaved_with
                          and list(base_values) == list(my_values))
                out.append(_comparison(scenario, base_level.label, figure, higher_is_better, base, name,
                                       list(base_values.values()), list(my_values.values()), confidence, paired,
                                       launches))
    return out


def _per_launch(level: PerfLevel, steady: dict[int | None, float | None]) -> dict[int | None, float | None]:
    """Launch -> the geometric mean of its steady rounds' values (None where none is positive): the launch,
    not the round, is the replicate when each engine was started several times."""
    launch_of = dict(zip(level.rounds, level.launches))
    logs: dict[int | None, list[float]] = {}
    for r, v in steady.items():
        logs.setdefault(launch_of.get(r), [])
        if v is not None and v > 0 and math.isfinite(v):
            logs[launch_of.get(r)].append(math.log(v))
    return {launch: math.exp(sum(xs) / len(xs)) if xs else None for launch, xs in logs.items()}


def _cache_states(level: PerfLevel) -> dict[int | None, bool | None]:
    """Round number -> its cache state (a dataset round: emptied before it or not; None elsewhere)."""
    return dict(zip(level.rounds, level.cache_cleared or [None] * len(level.rounds)))


def _like_rounds(a: PerfLevel, b: PerfLevel) -> tuple[bool | None] | None:
    """The cache state whose steady rounds both levels hold, the emptied cache first (the protocol's rounds),
    as a one-tuple; None where they hold none alike (one engine cleared its cache before every round, the other
    could not: its rows may have come from cache, so the two are not compared)."""
    held = [{s for r, s in _cache_states(x).items() if r not in x.first_encounter_rounds} for x in (a, b)]
    common = held[0] & held[1]
    return None if not common else (True,) if True in common else (next(iter(common)),)


def _steady(level: PerfLevel, figure: Figure, like: tuple[bool | None] = (None,)) -> dict[int | None, float | None]:
    """Round number -> value of the rounds in cache state `like`, without the first-encounter round (with
    warmup off, a server's first round of a shape pays its compilation: shown beside the median, never an
    engine's steady figure)."""
    states = _cache_states(level)
    return {r: v for r, v in zip(level.rounds, figure.rounds)
            if r not in level.first_encounter_rounds and states.get(r) == like[0]}


def _comparison(scenario: str, level: str, figure: str, higher_is_better: bool, base: str, engine: str,
                base_values: list[float | None], values: list[float | None], confidence: float,
                paired: bool, launches: int = 1) -> Comparison:
    # Interleaved rounds pair by repetition (a drift moves both); engines run one after another do not.
    # The engines of a position are started anew together, so launch n of each is a pair as well.
    covers = (f"launch-to-launch variation ({launches} launches of each engine, each the geometric mean of its "
              "rounds) and the round-to-round noise within them") if launches > 1 else COVERS_ROUNDS
    e = effect(base_values, values, confidence, paired=paired, covers=covers)
    if e.verdict in ("higher", "lower"):
        verdict = "better" if (e.verdict == "higher") == higher_is_better else "worse"
    else:
        verdict = e.verdict
    return Comparison(scenario=scenario, level=level, figure=figure, base=base, engine=engine, ratio=e.ratio,
                      low=e.low, high=e.high, confidence=confidence, verdict=verdict, detectable=e.detectable,
                      rounds_needed_for_5pct=e.rounds_needed(SMALL_CHANGE), paired=paired, covers=e.covers,
                      launches=launches, reason=e.reason)

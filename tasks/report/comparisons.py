"""Engines compared on the decision's figures (decision.LEAD_FIGURES): each level's steady rounds (the
first-encounter round left out) as effects with an interval (tasks/stats/effects.py), only where a figure is
published. The summary compares every engine with the base engine; the choice by purpose every pair."""

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
                if mine is None:
                    continue  # not published for this engine
                base_values, my_values = _steady(base_level, base_figure), _steady(level, mine)
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


def _steady(level: PerfLevel, figure: Figure) -> dict[int | None, float | None]:
    """Round number -> value, without the first-encounter round (with warmup off, a server's first round
    of a shape pays its compilation: shown beside the median, never an engine's steady figure)."""
    return {r: v for r, v in zip(level.rounds, figure.rounds) if r not in level.first_encounter_rounds}


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

"""The choice by purpose: for each purpose of the run config, the engine DayOne would pick and the
evidence for and against it (PROTOCOL.md, "The choice by purpose").

Criteria are weighed in the purpose's order, answers and failed requests first: an engine detectably
worse than another still standing on a criterion is dropped before the next criterion is read, so a
later criterion (speed) never rescues an engine an earlier one (answers) dropped. "Detectably" is each
criterion's own rule, the one the rest of the report uses: an item of a fixed set right on one engine and
wrong on the other at greedy decoding, or a log-likelihood finding (answers), an interval that excludes no
difference (failed requests, over every load scenario; speed, between every pair of engines), a check one
engine passed and the other failed, a preview (nightly, dev) engine against a release that passed every check
it passed, a capacity one engine held that the other did not, more restarts and startup warnings
(first-encounter tails and rounds that spread are shown as caveats, never a reason to drop: one round's tail
or a busy client's noise would then decide). A criterion is one entry of CRITERIA: its rule, its words and
the report section holding its evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tasks.config.maturity import ranks_below_release
from tasks.core.names import PERF_SCENARIOS, TRACE_SCENARIO, TRAFFIC_SCENARIOS
from tasks.report.comparisons import comparisons
from tasks.report.decision import answer_gaps, capacity_order
from tasks.report.schema import RunSummary
from tasks.report.schema.comparison import Comparison
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.run import ChoiceReason, PurposeChoice
from tasks.scenarios.capacity import order
from tasks.stats.intervals import newcombe

# (worse engine, better engine, the evidence)
Gap = tuple[str, str, str]

# The figures each speed criterion reads from the comparisons between engines.
SPEED_FIGURES = {"latency": ("ttft_p95_s", "tpot_p50_s"), "throughput": ("output_tps", "goodput_rps")}
# Every scenario whose requests are counted: a failed request anywhere is a failed request.
LOAD_SCENARIOS = (*PERF_SCENARIOS, TRACE_SCENARIO, *TRAFFIC_SCENARIOS)
FIRST_ENCOUNTER_TAIL = 1.5  # a first-encounter P99 this many times the steady median is a finding


@dataclass(frozen=True)
class Criterion:
    """One criterion of the choice: who is detectably worse than whom (`rule`), how the report names it, and
    the report section holding its evidence (its anchor)."""

    rule: Callable[[RunSummary], list[Gap]]
    words: str
    section: str
    spoken: bool = False  # its evidence is a whole sentence naming both engines, not "A worse than B (...)"
    # pairs it found better at one level and worse at another: shown beside the choice, ordering neither
    mixed: Callable[[RunSummary], list[Gap]] | None = None


def choose(summary: RunSummary, orders: dict[str, tuple[str, ...]]) -> list[PurposeChoice]:
    """One choice per purpose, from the summary's figures."""
    gaps = {name: c.rule(summary) for name, c in CRITERIA.items()}
    mixed = {name: c.mixed(summary) for name, c in CRITERIA.items() if c.mixed is not None}
    choices = [_choose(purpose, order_, summary.engines, gaps, mixed) for purpose, order_ in orders.items()]
    for c in choices:
        if "maturity" in c.order:
            c.reasons += maturity_overridden(summary)
    return choices


def _choose(purpose: str, criteria: tuple[str, ...], engines: dict[str, EngineSummary],
            gaps: dict[str, list[Gap]], mixed: dict[str, list[Gap]]) -> PurposeChoice:
    reasons: list[ChoiceReason] = []
    standing = [n for n, e in engines.items() if e.ready]
    reasons += [ChoiceReason(engine=n, stance="against", criterion="readiness", section="startup",
                             text=f"{n} never became ready") for n, e in engines.items() if not e.ready]
    dropped_by: dict[str, str] = {}
    for criterion in criteria:
        live = [g for g in gaps[criterion] if g[0] in standing and g[1] in standing]
        worse = {g[0] for g in live}
        if worse and worse >= set(standing):
            # each is worse than another somewhere (answers in different families): none is dropped
            reasons += [_reason(g, "against", criterion, "each engine is worse somewhere: none dropped") for g in live]
            continue
        for g in live:
            reasons.append(_reason(g, "against", criterion, "dropped"))
            dropped_by.setdefault(g[0], criterion)
        standing = [n for n in standing if n not in worse]
    for criterion in criteria:  # the rest of the evidence on the engines still standing, for and against
        for g in gaps[criterion]:
            if g[1] in standing and g[0] in dropped_by:
                reasons.append(_reason(g, "for", criterion, ""))
            elif g[0] in standing and g[1] in dropped_by:
                reasons.append(_reason(g, "against", criterion,
                                       f"outranked: {g[1]} was dropped on {CRITERIA[dropped_by[g[1]]].words}"))
    for criterion in criteria:  # speed that went both ways between engines still standing: why none stood out
        for engine, base, evidence in mixed.get(criterion, []):
            if engine in standing and base in standing:
                reasons.append(ChoiceReason(
                    engine=engine, stance="mixed", criterion=criterion, section=CRITERIA[criterion].section,
                    text=f"{CRITERIA[criterion].words}: {engine} against {base} went both ways ({evidence}); "
                         "orders neither"))
    for name in standing:
        caveats = measurement_caveats(engines[name])
        if caveats:
            reasons.append(ChoiceReason(
                engine=name, stance="against", criterion="stability", section="throughput",
                text=f"measurement caveats (shown, never a reason to drop): {'; '.join(caveats[:3])}"
                     + (f" and {len(caveats) - 3} more" if len(caveats) > 3 else "")))
    return PurposeChoice(purpose=purpose, order=list(criteria), picked=standing,
                         text=_verdict(purpose, standing, len(engines)), reasons=reasons)


def _reason(gap: Gap, stance: str, criterion: str, note: str) -> ChoiceReason:
    worse, better, evidence = gap
    engine = worse if stance == "against" else better
    said = evidence if CRITERIA[criterion].spoken else f"{worse} worse than {better} ({evidence})"
    text = f"{CRITERIA[criterion].words}: {said}" + (f"; {note}" if note else "")
    return ChoiceReason(engine=engine, stance=stance, criterion=criterion, text=text,
                        section=CRITERIA[criterion].section)


def _verdict(purpose: str, standing: list[str], engines: int) -> str:
    words = purpose.replace("_", " ")
    if not standing:
        return f"For {words}: no engine to pick; none became ready."
    if len(standing) == 1:
        return f"For {words}: {standing[0]}" + ("." if engines > 1 else " (the only engine).")
    return (f"For {words}: no engine stands out; {' and '.join(standing)} were not told apart on this purpose's "
            "evidence (more rounds, or the criteria this run did not measure, might).")


# ---- each criterion's rule: who is detectably worse than whom --------------------------------------


def failed_counts(e: EngineSummary) -> dict[str, tuple[int, int]]:
    """scenario -> (failed, sent) over every level's measured rounds, for every load scenario it measured."""
    out = {}
    for scenario in LOAD_SCENARIOS:
        levels = e.levels(scenario)
        failed = sum(lv.requests_failed for lv in levels)
        if levels:
            out[scenario] = (failed, failed + sum(lv.requests_ok for lv in levels))
    return out


def _failed_requests(summary: RunSummary) -> list[Gap]:
    """The share of each load scenario's measured requests that failed (performance sweeps, trace, sessions with
    the turns a broken session never sent, shared prefix, your own prompts), compared scenario by scenario on the
    traffic both engines were sent: worse where some scenario's Newcombe interval of the difference lies wholly
    above 0 and none wholly below."""
    counts = {name: failed_counts(e) for name, e in summary.engines.items()}
    gaps = []
    for a, ca in counts.items():
        for b, cb in counts.items():
            if a == b:
                continue
            worse, better = [], []
            for scenario in (s for s in LOAD_SCENARIOS if s in ca and s in cb and ca[s][1] and cb[s][1]):
                (fa, na), (fb, nb) = ca[scenario], cb[scenario]
                low, high = newcombe(fa, na, fb, nb, summary.confidence)
                said = f"{scenario} {fa}/{na} failed against {fb}/{nb}, difference CI {low:+.1%} to {high:+.1%}"
                (worse if low > 0 else better if high < 0 else []).append(said)
            if worse and not better:
                gaps.append((a, b, "; ".join(worse)))
    return gaps


def _functional_checks(summary: RunSummary) -> list[Gap]:
    gaps = []
    for a, ea in summary.engines.items():
        for b, eb in summary.engines.items():
            lost = sorted(c for c, o in ea.checks.items() if o == "fail" and eb.checks.get(c) == "pass")
            if a != b and lost:
                gaps.append((a, b, f"failed {', '.join(lost)}, which {b} passed"))
    return gaps


def _maturity(summary: RunSummary) -> list[Gap]:
    """A preview, nightly or dev engine below a release engine that passed every check it passed, whatever
    either's speed (the Day-1 report's production pick); none while the run overrides it."""
    if summary.maturity_override:
        return []
    known = {n: e.maturity for n, e in summary.engines.items() if e.maturity is not None and e.maturity.maturity}
    gaps = []
    for a, ma in known.items():
        for b, mb in known.items():
            passed = [c for c, o in summary.engines[a].checks.items() if o == "pass"]
            if ranks_below_release(ma.maturity) and mb.maturity == "release" and all(
                    summary.engines[b].checks.get(c) == "pass" for c in passed):
                upstream = f"; its support waits on {ma.upstream}" if ma.upstream else ""
                gaps.append((a, b, f"{a} is a {ma.maturity} ({ma.source}{upstream}) and {b} a release that passed "
                                   f"every check {a} passed: production takes the release, whatever the "
                                   f"{ma.maturity}'s speed"))
    return gaps


def maturity_overridden(summary: RunSummary) -> list[ChoiceReason]:
    """Where the run overrides maturity (choice.maturity_override): each engine it would have ranked below a
    release, with the reason given."""
    if not summary.maturity_override:
        return []
    return [ChoiceReason(engine=n, stance="for", criterion="maturity", section=CRITERIA["maturity"].section,
                         text=f"maturity: {n} is a {e.maturity.maturity} ({e.maturity.source}), not ranked below a "
                              f"release in this run: overridden ({summary.maturity_override})")
            for n, e in summary.engines.items() if e.maturity is not None and ranks_below_release(e.maturity.maturity)]


def stability_findings(e: EngineSummary) -> list[str]:
    """What the engine itself did that a calm service does not: restarts, startup warnings or errors."""
    found = []
    if e.restarts_before_ready is not None:
        found.append(f"restarts while loading ({e.restarts_before_ready.severity})")
    if e.restarts.total:
        found.append(f"{e.restarts.total} restart(s) during its steps")
    found += [f"startup {f.severity}: {f.finding}" for f in e.startup_findings
              if f.severity in ("warning", "error") and f != e.restarts_before_ready]
    return found


def measurement_caveats(e: EngineSummary) -> list[str]:
    """First-encounter tails and rounds that spread: shown against an engine, never a reason to drop it (one
    round's tail, or a busy client's noise, would then decide the choice)."""
    found = []
    metric = "ttft_p99_s" if e.ttft_published else "e2e_p99_s"
    for scenario in LOAD_SCENARIOS:
        for level in e.levels(scenario):
            tail = None if level.first_encounter is None else level.first_encounter.figure(metric)
            median = level.median(metric)
            if tail and median and tail / median >= FIRST_ENCOUNTER_TAIL:
                found.append(f"first-encounter tail {tail / median:.1f}x at {scenario} {level.label}")
            found += [f"{scenario} {level.label} {fig} spread over rounds" for fig, f in level.figures.items()
                      if f.spread and fig in ("output_tps", "ttft_p95_s", "e2e_p95_s", "tpot_p50_s")]
    if e.trace is not None:  # out of the comparisons already (the trace's level holds none of them): said here
        found += [f"trace round {r.round} left out, the client fell behind (lateness p99 "
                  f"{1e3 * (r.lateness_p99_s or 0.0):.1f} ms > {1e3 * e.trace.lateness_p99_max_s:.1f} ms)"
                  for r in e.trace.rounds if r.behind]
    return found


def _stability(summary: RunSummary) -> list[Gap]:
    found = {n: stability_findings(e) for n, e in summary.engines.items()}
    return [(a, b, f"{len(fa)} finding(s) against {len(found[b])}: {'; '.join(fa[:3])}")
            for a, fa in found.items() for b in found if a != b and len(fa) > len(found[b])]


def speed_comparisons(summary: RunSummary) -> list[Comparison]:
    """Every pair of engines on the decision's figures: the summary's comparisons with the base engine, and each
    pair without the base compared the same way (steady rounds; tasks/report/comparisons.py), so two engines are
    told apart whichever engine is the base, and whatever the base's own fate in the choice."""
    covered = {frozenset((c.base, c.engine)) for c in summary.comparisons}
    names = list(summary.engines)
    return [*summary.comparisons, *(c for i, a in enumerate(names) for b in names[i + 1:]
                                     if frozenset((a, b)) not in covered
                                     for c in comparisons(summary.engines, a, summary.confidence, others=(b,)))]


def _speed_verdicts(summary: RunSummary, criterion: str) -> dict[tuple[str, str], list[Comparison]]:
    """(engine, other) -> the comparisons on the criterion's figures that found a difference."""
    found: dict[tuple[str, str], list[Comparison]] = {}
    for c in speed_comparisons(summary):
        if c.figure in SPEED_FIGURES[criterion] and c.verdict in ("better", "worse"):
            found.setdefault((c.engine, c.base), []).append(c)
    return found


def _speed_evidence(found: list[Comparison]) -> str:
    return "; ".join(f"{c.scenario} {c.figure} at {c.level} {c.verdict} {c.interval()}" for c in found[:3]) + (
        f" and {len(found) - 3} more" if len(found) > 3 else "")


def _speed(criterion: str) -> Callable[[RunSummary], list[Gap]]:
    """One engine against another on the criterion's figures: worse where some level's interval says worse and
    none says better (mixed verdicts order nothing; `mixed_speed` names them)."""

    def rule(summary: RunSummary) -> list[Gap]:
        gaps = []
        for (engine, other), found in _speed_verdicts(summary, criterion).items():
            verdicts = {c.verdict for c in found}
            if len(verdicts) == 1:
                gaps.append((engine, other, _speed_evidence(found)) if verdicts == {"worse"}
                            else (other, engine, _speed_evidence(found)))
        return gaps

    return rule


def mixed_speed(criterion: str) -> Callable[[RunSummary], list[Gap]]:
    """(engine, other, evidence) where the criterion's figures found the engine better somewhere and worse
    elsewhere: shown beside a choice that could not tell them apart, never a reason to drop either."""

    def mixed(summary: RunSummary) -> list[Gap]:
        return [(engine, other, _speed_evidence(sorted(found, key=lambda c: c.verdict)))
                for (engine, other), found in _speed_verdicts(summary, criterion).items()
                if len({c.verdict for c in found}) > 1]

    return mixed


def _capacity(summary: RunSummary) -> list[Gap]:
    searched = {n: e.capacity for n, e in summary.engines.items() if e.capacity is not None and not e.capacity.withheld}
    gaps = []
    for a, ca in searched.items():
        for b, cb in searched.items():
            if a != b and order(ca, cb) == "less":
                gaps.append((a, b, capacity_order(ca, cb)))
    return gaps


# The criteria a purpose may order (and answers and failed requests, read first for every purpose).
CRITERIA: dict[str, Criterion] = {
    "answers": Criterion(answer_gaps, "answers", "quality"),
    "failed_requests": Criterion(_failed_requests, "failed requests", "throughput"),
    "functional_checks": Criterion(_functional_checks, "functional checks", "checks"),
    "maturity": Criterion(_maturity, "maturity", "engines", spoken=True),
    "stability": Criterion(_stability, "stability", "startup"),
    "latency": Criterion(_speed("latency"), "latency", "comparison", mixed=mixed_speed("latency")),
    "throughput": Criterion(_speed("throughput"), "throughput", "comparison", mixed=mixed_speed("throughput")),
    "capacity": Criterion(_capacity, "capacity under the SLO", "capacity"),
}

"""The choice by purpose: for each purpose of the run config, the engine DayOne would pick and the
evidence for and against it (PROTOCOL.md, "The choice by purpose").

Criteria are weighed in the purpose's order, answers and failed requests first: an engine detectably
worse than another still standing on a criterion is dropped before the next criterion is read, so a
later criterion (speed) never rescues an engine an earlier one (answers) dropped. "Detectably" is each
criterion's own rule, the one the rest of the report uses: an interval that excludes no difference
(answers, failed requests, speed), a check one engine passed and the other failed, a preview (nightly, dev)
engine against a release that passed every check it passed, a capacity one engine held that the other did not,
more restarts and startup warnings (first-encounter tails and rounds that
spread are shown as caveats, never a reason to drop: one round's tail or a busy client's noise would
then decide).
"""

from __future__ import annotations

from collections.abc import Callable

from tasks.config.maturity import ranks_below_release
from tasks.report.decision import answer_gaps, capacity_order
from tasks.report.schema import RunSummary
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.run import ChoiceReason, PurposeChoice
from tasks.scenarios.capacity import order
from tasks.stats.intervals import newcombe

# (worse engine, better engine, the evidence)
Gap = tuple[str, str, str]

# Where each criterion's evidence stands in the report (its section's anchor).
SECTIONS = {"answers": "quality", "failed_requests": "throughput", "functional_checks": "checks",
            "maturity": "engines", "stability": "startup", "latency": "comparison", "throughput": "comparison",
            "capacity": "capacity"}
WORDS = {"answers": "answers", "failed_requests": "failed requests", "functional_checks": "functional checks",
         "maturity": "maturity", "stability": "stability", "latency": "latency", "throughput": "throughput",
         "capacity": "capacity under the SLO"}
# Criteria whose evidence is a whole sentence naming both engines (not "A worse than B (...)").
SPOKEN = ("maturity",)
# The figures each speed criterion reads from the comparisons against the base engine.
SPEED_FIGURES = {"latency": ("ttft_p95_s", "tpot_p50_s"), "throughput": ("output_tps", "goodput_rps")}
FIRST_ENCOUNTER_TAIL = 1.5  # a first-encounter P99 this many times the steady median is a finding


def choose(summary: RunSummary, orders: dict[str, tuple[str, ...]]) -> list[PurposeChoice]:
    """One choice per purpose, from the summary's figures."""
    gaps = {criterion: rule(summary) for criterion, rule in RULES.items()}
    mixed = {criterion: mixed_speed(summary, criterion) for criterion in SPEED_FIGURES}
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
                                       f"outranked: {g[1]} was dropped on {WORDS[dropped_by[g[1]]]}"))
    for criterion in criteria:  # speed that went both ways between engines still standing: why none stood out
        for engine, base, evidence in mixed.get(criterion, []):
            if engine in standing and base in standing:
                reasons.append(ChoiceReason(
                    engine=engine, stance="mixed", criterion=criterion, section=SECTIONS[criterion],
                    text=f"{WORDS[criterion]}: {engine} against {base} went both ways ({evidence}); orders neither"))
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
    said = evidence if criterion in SPOKEN else f"{worse} worse than {better} ({evidence})"
    text = f"{WORDS[criterion]}: {said}" + (f"; {note}" if note else "")
    return ChoiceReason(engine=engine, stance=stance, criterion=criterion, text=text, section=SECTIONS[criterion])


def _verdict(purpose: str, standing: list[str], engines: int) -> str:
    words = purpose.replace("_", " ")
    if not standing:
        return f"For {words}: no engine to pick; none became ready."
    if len(standing) == 1:
        return f"For {words}: {standing[0]}" + ("." if engines > 1 else " (the only engine).")
    return (f"For {words}: no engine stands out; {' and '.join(standing)} were not told apart on this purpose's "
            "evidence (more rounds, or the criteria this run did not measure, might).")


# ---- each criterion's rule: who is detectably worse than whom --------------------------------------


def _answers(summary: RunSummary) -> list[Gap]:
    return answer_gaps(summary)


def _failed_requests(summary: RunSummary) -> list[Gap]:
    """The share of the performance steps' measured requests that failed, Newcombe interval of the
    difference wholly above 0."""
    counts = {}
    for name, e in summary.engines.items():
        levels = [lv for p in e.perf.values() for lv in p.levels]
        failed = sum(lv.requests_failed for lv in levels)
        counts[name] = (failed, failed + sum(lv.requests_ok for lv in levels))
    gaps = []
    for a, (fa, na) in counts.items():
        for b, (fb, nb) in counts.items():
            if a != b and na and nb:
                low, high = newcombe(fa, na, fb, nb, summary.confidence)
                if low > 0:
                    gaps.append((a, b, f"{fa}/{na} failed against {fb}/{nb}, difference CI {low:+.0%} to {high:+.0%}"))
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
    return [ChoiceReason(engine=n, stance="for", criterion="maturity", section=SECTIONS["maturity"],
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
    for scenario, p in e.perf.items():
        for level in p.levels:
            tail = None if level.first_encounter is None else level.first_encounter.figure(metric)
            median = level.median(metric)
            if tail and median and tail / median >= FIRST_ENCOUNTER_TAIL:
                found.append(f"first-encounter tail {tail / median:.1f}x at {scenario} {level.label}")
            found += [f"{scenario} {level.label} {fig} spread over rounds" for fig, f in level.figures.items()
                      if f.spread and fig in ("output_tps", "ttft_p95_s", "e2e_p95_s", "tpot_p50_s")]
    return found


def _stability(summary: RunSummary) -> list[Gap]:
    found = {n: stability_findings(e) for n, e in summary.engines.items()}
    return [(a, b, f"{len(fa)} finding(s) against {len(found[b])}: {'; '.join(fa[:3])}")
            for a, fa in found.items() for b in found if a != b and len(fa) > len(found[b])]


def _speed_verdicts(summary: RunSummary, criterion: str) -> dict[tuple[str, str], list]:
    """(engine, base) -> the comparisons on the criterion's figures that found a difference."""
    found: dict[tuple[str, str], list] = {}
    for c in summary.comparisons:
        if c.figure in SPEED_FIGURES[criterion] and c.verdict in ("better", "worse"):
            found.setdefault((c.engine, c.base), []).append(c)
    return found


def _speed_evidence(found: list) -> str:
    return "; ".join(f"{c.scenario} {c.figure} at {c.level} {c.verdict} {c.interval()}" for c in found[:3]) + (
        f" and {len(found) - 3} more" if len(found) > 3 else "")


def _speed(criterion: str) -> Callable[[RunSummary], list[Gap]]:
    """An engine against the base engine on the criterion's figures: worse where some level's interval says
    worse and none says better (mixed verdicts order nothing; mixed_speed names them)."""

    def rule(summary: RunSummary) -> list[Gap]:
        gaps = []
        for (engine, base), found in _speed_verdicts(summary, criterion).items():
            verdicts = {c.verdict for c in found}
            if len(verdicts) == 1:
                gaps.append((engine, base, _speed_evidence(found)) if verdicts == {"worse"}
                            else (base, engine, _speed_evidence(found)))
        return gaps

    return rule


def mixed_speed(summary: RunSummary, criterion: str) -> list[Gap]:
    """(engine, base, evidence) where the criterion's figures found the engine better somewhere and worse
    elsewhere: shown beside a choice that could not tell them apart, never a reason to drop either."""
    return [(engine, base, _speed_evidence(sorted(found, key=lambda c: c.verdict)))
            for (engine, base), found in _speed_verdicts(summary, criterion).items()
            if len({c.verdict for c in found}) > 1]


def _capacity(summary: RunSummary) -> list[Gap]:
    searched = {n: e.capacity for n, e in summary.engines.items() if e.capacity is not None and not e.capacity.withheld}
    gaps = []
    for a, ca in searched.items():
        for b, cb in searched.items():
            if a != b and order(ca, cb) == "less":
                gaps.append((a, b, capacity_order(ca, cb)))
    return gaps


RULES: dict[str, Callable[[RunSummary], list[Gap]]] = {
    "answers": _answers, "failed_requests": _failed_requests, "functional_checks": _functional_checks,
    "maturity": _maturity, "stability": _stability, "latency": _speed("latency"), "throughput": _speed("throughput"),
    "capacity": _capacity,
}

"""The decision summary: a few sentences written from the summary's figures, never by hand.

Answers first: an engine that answered a family detectably worse than another on the same items (or
whose speculative decoding changed a greedy answer) is named before any speed lead, and its speed
leads carry the caveat. Then how each engine compares with the base engine (the config's first) where, from the summary's
comparisons: a ratio with its confidence interval, called better or worse only when the interval
excludes 1 and otherwise "no detectable difference" with the change this run could have detected
(no winner without an interval); what is unreliable and why, what was not tested, and the
regressions against the baseline when the nightly comparison wrote any.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tasks.report.schema import RunSummary
from tasks.report.schema.capacity import Capacity
from tasks.report.schema.comparison import Comparison, Regression
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.evidence import StartupFinding
from tasks.report.schema.run import DecisionLine
from tasks.report.schema.speculative import OffOnPair
from tasks.evidence.startup_facts import CAPS_PERFORMANCE
from tasks.stats.effects import ratio_interval
from tasks.scenarios.capacity import decisive_bracket, order

# The figures engines are compared on: (scenario, figure, higher is better, words)
LEAD_FIGURES = (
    ("short", "output_tps", True, "output throughput"),
    ("short", "ttft_p95_s", False, "P95 TTFT"),
    ("prefill", "output_tps", True, "output throughput"),
    ("prefill", "ttft_p95_s", False, "P95 TTFT"),
    ("decode", "output_tps", True, "output throughput"),
    ("decode", "tpot_p50_s", False, "P50 TPOT"),
    ("rate", "goodput_rps", True, "goodput"),
    ("trace", "output_tps", True, "output throughput"),
    ("trace", "ttft_p95_s", False, "P95 TTFT"),
    ("sessions", "output_tps", True, "output throughput"),
    ("sessions", "ttft_p95_s", False, "P95 TTFT"),
    ("shared_prefix", "output_tps", True, "output throughput"),
    ("shared_prefix", "ttft_p95_s", False, "P95 TTFT"),
    ("dataset", "output_tps", True, "output throughput"),
    ("dataset", "ttft_p95_s", False, "P95 TTFT"),
)
LEAD_WORDS = {(scenario, figure): words for scenario, figure, _, words in LEAD_FIGURES}


def decide(summary: RunSummary) -> list[DecisionLine]:
    """The decision summary's lines, each under one topic: leads, reliability, not_tested, regressions."""
    out: list[DecisionLine] = []
    if summary.dry_run:
        out.append(DecisionLine(topic="not_tested",
                                text="Dry run: manifests were rendered, nothing was deployed or measured."))
    out += [DecisionLine(topic="leads", text=t) for t in _leads(summary)]
    out += [DecisionLine(topic="reliability", text=t) for t in _reliability(summary)]
    out += [DecisionLine(topic="not_tested", text=t) for t in _not_tested(summary)]
    out += [DecisionLine(topic="regressions", text=t) for t in _regressions(summary.regressions)]
    out += [DecisionLine(topic="regressions", text=t[:1].upper() + t[1:] + ".")
            for t in (*summary.baselines_skipped, *summary.baseline_caveats)]
    return out


# ---- leads ---------------------------------------------------------------------------------------


def _leads(summary: RunSummary) -> list[str]:
    engines = summary.engines
    if len(engines) < 2:
        return ([_single_engine(engines)] if engines else []) + _capacity_leads(summary)
    lines, worse_answers = _answer_leads(summary)
    for scenario, figure, _, words in LEAD_FIGURES:
        mine = [c for c in summary.comparisons if (c.scenario, c.figure) == (scenario, figure)]
        for engine in dict.fromkeys(c.engine for c in mine):
            parts = [comparison_words(c) for c in mine if c.engine == engine]
            line = f"{scenario} {words}, {engine} vs {mine[0].base}: " + "; ".join(parts) + "."
            lines.append(line + _answers_caveat((engine, mine[0].base), worse_answers))
    lines += _speculative_leads(summary)
    lines += _evidence_leads(engines)
    lines += _capacity_leads(summary, worse_answers)
    return lines


def _answers_caveat(named: tuple[str, ...], worse_answers: Collection[str]) -> str:
    """A speed lead is never a recommendation for an engine whose answers are worse."""
    wrong = [n for n in named if n in worse_answers]
    return f" Not a reason to choose {' or '.join(wrong)}: its answers are worse (see above)." if wrong else ""


def answer_gaps(summary: RunSummary) -> list[tuple[str, str, str]]:
    """(worse engine, better engine, the evidence) for each pair whose answers differ: items of a family right
    on one and wrong on the other (`parity_gaps`), a log-likelihood finding (`nll_gaps`), and an engine whose
    speculative decoding made greedy answers wrong that its off twin answered right."""
    return parity_gaps(summary) + nll_gaps(summary) + [
        (p.on, p.off, f"speculative decoding made {len(p.wrong)} of {p.items} greedy answers wrong "
                      f"({', '.join(p.wrong[:5])})")
        for p in (summary.speculative.pairs if summary.speculative else []) if p.wrong]


def parity_gaps(summary: RunSummary) -> list[tuple[str, str, str]]:
    """(worse engine, better engine, the evidence) for each pair and family with items right on the better
    engine and wrong on the worse: the items are fixed and decoded greedily, so each such item is a change in
    itself, not a draw from a sample, and is named. The paired interval of the difference of accuracies
    (tasks/quality/parity.py) stands beside it for the question of the family's other items."""
    gaps: list[tuple[str, str, str]] = []
    for p in (summary.parity.answers if summary.parity else []):
        for worse, other, lost, kept in ((p.b, p.a, p.only_a_right, p.only_b_right),
                                         (p.a, p.b, p.only_b_right, p.only_a_right)):
            if not lost:
                continue
            low, high = (p.low, p.high) if worse == p.a else (-p.high, -p.low)  # accuracy(worse) - accuracy(other)
            right, other_right = p.both_right + len(kept), p.both_right + len(lost)
            gaps.append((worse, other,
                         f"{p.family} {right / p.items:.0%} ({right}/{p.items}) against {other}'s "
                         f"{other_right / p.items:.0%} ({other_right}/{p.items}), difference CI {low:+.0%} to "
                         f"{high:+.0%} for other items of the family; {len(lost)} item{'s' if len(lost) > 1 else ''} "
                         f"right on {other} and wrong on {worse} at greedy decoding, each a change "
                         f"({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''})"))
    return gaps


def nll_gaps(summary: RunSummary) -> list[tuple[str, str, str]]:
    """(engine, other, the evidence) for each log-likelihood finding (tasks/quality/loglik.py `nll_findings`):
    the engine whose NLL of the fixed text lies above the others' (a gap) or rises with depth where theirs does
    not is worse than each engine that scored that length and served the same weights."""
    parity = summary.parity
    if parity is None:
        return []
    differ = {frozenset((w.a, w.b)) for w in summary.same_weights if w.verdict == "differ"}
    scored = {(pt.engine, pt.length_tokens) for pt in parity.nll if pt.status == "ok"}
    return [(f.engine, other, f"NLL {f.kind} at {f.length_tokens:,} tokens: {f.text}")
            for f in parity.nll_findings for other in summary.engines
            if other != f.engine and (other, f.length_tokens) in scored and frozenset((f.engine, other)) not in differ]


def _answer_leads(summary: RunSummary) -> tuple[list[str], set[str]]:
    """The families where one engine answered items wrong that another answered right (`parity_gaps`), its
    log-likelihood findings (`nll_gaps`), and the answers speculative decoding changed, first among the leads:
    answers outrank speed. Also the engines named, whose speed leads then carry the caveat."""
    found: dict[str, list[str]] = {}
    for worse, _, evidence in parity_gaps(summary):
        found.setdefault(worse, []).append(evidence)
    lines = [f"Answers differ: {name} answered worse in " + "; ".join(parts)
             + ". Its answers outrank any speed lead: do not choose it on speed." for name, parts in found.items()]
    nll: dict[str, list[str]] = {f.engine: [] for f in (summary.parity.nll_findings if summary.parity else [])}
    for engine, _, evidence in nll_gaps(summary):
        if evidence not in nll[engine]:
            nll[engine].append(evidence)
    lines += [f"Log-likelihood differs: {name}'s " + "; ".join(parts)
              + ". Its answers outrank any speed lead: do not choose it on speed." for name, parts in nll.items() if parts]
    wrong = [p for p in (summary.speculative.pairs if summary.speculative else []) if p.wrong]
    lines += [f"Speculative decoding changed answers: {p.on} answered {len(p.wrong)} of {p.items} items wrong that "
              f"{p.off} (off) answered right at greedy decoding ({', '.join(p.wrong[:5])}), where it must not make "
              "any wrong. Its answers outrank any speed lead: do not choose it on speed." for p in wrong]
    return lines, set(found) | {n for n, parts in nll.items() if parts} | {p.on for p in wrong}


def _speculative_leads(summary: RunSummary) -> list[str]:
    """Each off/on pair: the on engine's acceptance per level with its interval, and its answers kept."""
    lines = []
    for p in summary.speculative.pairs if summary.speculative else []:
        parts = [f"{a.scenario} {a.level} {a.acceptance_rate:.0%}"
                 + (f" (CI {a.acceptance_rate_low:.0%} to {a.acceptance_rate_high:.0%})"
                    if a.acceptance_rate_low is not None else " (one round: no interval)")
                 + (f", {a.accepted_length:.2f} tokens per step" if a.accepted_length is not None else "")
                 + (f" ({a.accepted_length_low:.2f} to {a.accepted_length_high:.2f})"
                    if a.accepted_length_low is not None else "") for a in p.acceptance]
        text = f"Speculative decoding, {p.on} ({p.on_setting}) vs {p.off} (off): acceptance " + (
            "; ".join(parts) if parts else "not measured (no rounds with drafts)")
        lines.append(text + _answers_kept(p) + ".")
    return lines


def _answers_kept(p: OffOnPair) -> str:
    """What the pair's greedy answers say beside its acceptance, where none was made wrong: identical only where
    every item was checked and none parted; a changed answer still right is a diagnostic; an empty off answer is
    not checked."""
    if p.wrong:
        return ""
    parts = []
    if p.items:
        parts.append(f"greedy answers identical on all {p.items} items" if not p.changed else
                     f"no greedy answer made wrong on {p.items} items ({len(p.changed)} worded otherwise: a "
                     "diagnostic, kernels may part after some tokens)")
    if p.not_checked:
        parts.append(f"{len(p.not_checked)} items not checked: {p.off}'s answer was empty or failed (a reasoning "
                     "model that spent scenarios.quality.max_tokens thinking; raise it)")
    return "".join(f"; {part}" for part in parts)


def _capacity_leads(summary: RunSummary, worse_answers: Collection[str] = ()) -> list[str]:
    """Each engine's capacity under the SLO and, against the base, an order only where one engine
    passed a load the other failed: a search brackets a capacity between two probed loads, so
    overlapping brackets cannot be told apart."""
    searched = {n: e.capacity for n, e in summary.engines.items() if e.capacity is not None}
    if not searched:
        return []
    parts = [f"{n} {'not published: ' + c.withheld if c.withheld else c.text}" for n, c in searched.items()]
    first = next(iter(searched.values()))
    lines = [f"Capacity under the SLO (goodput share >= {first.target_goodput_share:.0%}): " + "; ".join(parts) + "."]
    base_name = summary.experiment.base if summary.experiment else next(iter(summary.engines))
    base = searched.get(base_name)
    if base is None or base.withheld:
        return lines
    for name, c in searched.items():
        if name != base_name and not c.withheld:
            lines.append(f"capacity, {name} vs {base_name}: {capacity_order(c, base)}."
                         + _answers_caveat((name, base_name), worse_answers))
    return lines


def capacity_order(mine: Capacity, base: Capacity) -> str:
    """Whether `mine` holds more load than `base`, from the probes each passed and failed."""
    unit = "concurrent requests" if mine.mode == "concurrency" else "req/s"
    # Decisive probes only (their interval wholly on one side of the target): a close probe orders nothing.
    (my_pass, my_fail), (base_pass, base_fail) = decisive_bracket(mine), decisive_bracket(base)
    found = order(mine, base)
    if found == "more":
        return f"more: it passed {_load(my_pass)} {unit}; the base failed at {_load(base_fail)}"
    if found == "less":
        return f"less: it failed at {_load(my_fail)} {unit}; the base passed {_load(base_pass)}"
    return (f"no detectable difference: their brackets overlap ({_bracket(mine.bracket, mine.start)} and "
            f"{_bracket(base.bracket, base.start)} {unit}; only probes decided by their interval order "
            "them); a finer step or more rounds might tell them apart")


def _bracket(bracket: list[float | None], start: float) -> str:
    passed, failed = bracket
    return f"[{'<' + _load(start) if passed is None else _load(passed)}, {'-' if failed is None else _load(failed)})"


def _load(v: float) -> str:
    return f"{v:g}"


def comparison_words(c: Comparison) -> str:
    """One level's comparison: the interval and verdict, or what this run could have detected."""
    if c.verdict in ("better", "worse"):
        return f"at {c.level} {c.interval(covers=True)}, {c.verdict}"
    if c.ratio is None or c.low is None or c.high is None:
        return f"not enough rounds at {c.level} ({c.reason or '2 good rounds a side needed'})"
    text = f"no detectable difference at {c.level} ({c.interval(covers=True)[:-1].replace(' (', ', ', 1)}"
    if c.detectable is not None:
        text += f"; this run could detect ±{c.detectable:.0%}"
    if c.rounds_needed_for_5pct is not None:
        # with replicated starts the replicate is the launch (measurement.launches), not the round
        text += f"; {c.rounds_needed_for_5pct} {'launches' if c.launches > 1 else 'rounds'} a side would detect 5%"
    return text + ")"


def _single_engine(engines: dict[str, EngineSummary]) -> str:
    name, e = next(iter(engines.items()))
    if not e.ready:
        return f"One engine ({name}), which never became ready: nothing was measured."
    checks = [o for o in e.checks.values() if o != "not_applicable"]
    text = (f"One engine ({name}), so no comparison: {checks.count('pass')}/{len(checks)} functional checks "
            f"passed, needles {e.needles.passed}/{e.needles.total}")
    peak = max(((lv.median("output_tps") or 0, lv.label) for lv in e.levels("short")), default=(0, ""))
    if peak[0]:
        text += f", peak short output {_num(peak[0])} tokens/s at {peak[1]}"
    return text + "."


def _evidence_leads(engines: dict[str, EngineSummary]) -> list[str]:
    lines = []
    checks = []
    for name, e in engines.items():
        outcomes = e.checks
        if not outcomes:
            continue
        failed = sorted(c for c, o in outcomes.items() if o == "fail")
        applicable = [o for o in outcomes.values() if o != "not_applicable"]
        text = f"{name} {applicable.count('pass')}/{len(applicable)}"
        checks.append(text + (f" (failed: {', '.join(failed)})" if failed else ""))
    if checks:
        lines.append("Functional checks passed: " + "; ".join(checks) + ".")
    needles = []
    for name, e in engines.items():
        rows = e.long_context
        if not rows:
            continue
        failed = [f"{r.target_tokens} tokens at {r.depth:.0%}" for r in rows if not r.passed]
        longest = max((r.target_tokens for r in rows if r.passed), default=None)
        text = f"{name} {sum(r.passed for r in rows)}/{len(rows)}"
        text += f", longest retrieved {longest} tokens" if longest else ""
        needles.append(text + (f" (missed: {', '.join(failed[:4])})" if failed else ""))
    if needles:
        lines.append("Long-context needles (exact string back): " + "; ".join(needles) + ".")
    cache = []
    for name, e in engines.items():
        pc = e.prefix_cache
        if pc is not None:
            hit = pc.hit_rate
            cache.append(f"{name} {pc.verdict}" + (f" (server hit rate {hit:.0%})" if hit is not None else ""))
    if cache:
        lines.append("Prefix cache: " + "; ".join(cache) + ".")
    warnings = []
    for name, e in engines.items():
        found = sorted({str(f.finding) for f in e.startup_findings  # these have lines of their own
                        if f.severity != "info" and f != e.restarts_before_ready and f.finding not in CAPS_PERFORMANCE})
        if found:
            warnings.append(f"{name}: {', '.join(found)}")
    if warnings:
        lines.append("Startup warnings and errors: " + "; ".join(warnings) + ".")
    return lines


def fallback_caveats(engines: dict[str, EngineSummary]) -> list[str]:
    """Each engine whose startup log shows it running a slower path than its best (CAPS_PERFORMANCE): its
    figures are this path's, not the engine's ceiling on this hardware, whichever way a comparison went."""
    lines = []
    for name, e in engines.items():
        found = [f for f in e.startup_findings if f.finding in CAPS_PERFORMANCE]
        if found:
            what = " and ".join(dict.fromkeys(CAPS_PERFORMANCE[str(f.finding)] for f in found))
            more = f" and {len(found) - 1} more line(s)" if len(found) > 1 else ""
            lines.append(f"{name}'s figures are not its ceiling on this hardware: its startup log shows {what} "
                         f"(\"{str(found[0].line)[:160]}\"{more}); a native backend or a tuned config may be faster, "
                         "so read its speed as this run's path, not the engine's best.")
    return lines


# ---- reliability -----------------------------------------------------------------------------------


def _reliability(summary: RunSummary) -> list[str]:
    engines = summary.engines
    lines = []
    validation = summary.validation
    if validation.ran and not validation.success:
        lines.append("The result tables failed validation (" + ", ".join(validation.failed_tables)
                     + "): the run is quarantined and never a regression baseline.")
    elif not validation.ran:
        lines.append("Validation did not run: these tables are unchecked.")
    lines += fallback_caveats(engines)
    for name, e in engines.items():
        if e.ready and e.restarts_before_ready is not None:
            lines.append(_restarts_before_ready(name, e.restarts_before_ready))
    for name, e in engines.items():
        if e.ready and not e.ttft_published:
            lines.append(f"{name}: {e.ttft.reason}. TPOT and ITL are withheld with it; "
                         "throughput and E2E stand.")
    worst = _worst_first_encounter(engines)
    if worst:
        lines.append(worst)
    spread = [f"{name} {scen} {level.label} {fig}"
              for name, e in engines.items()
              for scen, p in e.perf.items()
              for level in p.levels
              for fig, f in level.figures.items()
              if f.spread and fig in ("output_tps", "ttft_p95_s", "e2e_p95_s", "tpot_p50_s")]
    if spread:
        lines.append(f"{len(spread)} headline figure(s) spread more than 25% of their median over rounds "
                     f"(e.g. {', '.join(spread[:4])}): treat those medians as rough.")
    for name, e in engines.items():
        levels = [level for p in e.perf.values() for level in p.levels]
        failed_rounds = sum(level.rounds_failed for level in levels)
        failed_requests = sum(level.requests_failed for level in levels)
        deviations = sum(level.length_deviations for level in levels)
        if failed_rounds or failed_requests or deviations:
            lines.append(f"{name}: {failed_rounds} failed round(s), {failed_requests} failed request(s), "
                         f"{deviations} request(s) whose usage differs from the requested lengths.")
        pc = e.prefix_cache
        if pc is not None and pc.verdict != "effective":
            lines.append(f"{name} prefix cache {pc.verdict}: {pc.reason}.")
    return lines


def _restarts_before_ready(name: str, finding: StartupFinding) -> str:
    """The cold start's restarts: a warning when only probes killed the engine, an error otherwise."""
    if finding.severity == "warning":
        advice = ("the probes' budget was shorter than this cold start; give the startup probe the whole load "
                  "(the figures, taken after the last start, stand)")
    else:
        advice = ("a replica with these settings may not come up at all; raise the memory limit or find the "
                  "crash before trusting a restart in production (the figures, taken after the last start, stand)")
    return f"{name} {finding.line}: {advice}."


def _worst_first_encounter(engines: dict[str, EngineSummary]) -> str | None:
    """The largest first-encounter P99 against its steady median: the JIT tail a median view hides.

    Always named when any shape was met for the first time in this run (the GLM-5.3-Flash Day 1
    Hands-on report's lesson: look at the first round of a new shape separately); advice follows
    when it is 1.5x or more.
    """
    worst = None
    for name, e in engines.items():
        metric = "ttft_p99_s" if e.ttft_published else "e2e_p99_s"
        for scen, p in e.perf.items():
            for level in p.levels:
                first = level.first_encounter
                tail = None if first is None else first.figure(metric)
                med = level.median(metric)
                if first is not None and tail and med:
                    ratio = tail / med
                    if worst is None or ratio > worst[0]:
                        worst = (ratio, name, scen, level.label, metric, tail, med,
                                 first.source or "its first round")
    if worst is None:
        return None
    ratio, name, scen, label, metric, first, med, source = worst
    words = "P99 TTFT" if metric == "ttft_p99_s" else "P99 E2E"
    text = (f"Worst first encounter: {name} {scen} {label} had {words} {_num(first)} s in {source}, the first "
            f"round of that shape on a fresh server, against a steady median of {_num(med)} s ({ratio:.1f}x)")
    if ratio >= 1.5:
        return text + "; warm up every production shape before serving."
    return text + "."


# ---- not tested, regressions ---------------------------------------------------------------------


def _not_tested(summary: RunSummary) -> list[str]:
    if not summary.not_tested:
        return ["Every enabled scenario and check ran on every engine."]
    by_what: dict[str, list[str]] = {}
    for item in summary.not_tested:
        by_what.setdefault(f"{item.what} ({item.why})", []).append(item.engine)
    return [f"Not tested: {what} for {', '.join(engines)}." for what, engines in by_what.items()]


def _regressions(rows: list[Regression]) -> list[str]:
    if not rows:
        return []
    bad = [r for r in rows if r.regressed]
    baseline = sorted({r.baseline_run_id for r in rows if r.baseline_run_id})
    against = f" against {', '.join(baseline)}" if baseline else ""
    if not bad:
        return [f"No regression{against} ({len(rows)} comparisons)."]
    listed = "; ".join(
        f"{r.engine} {r.scenario}{'' if r.concurrency is None else ' c=' + str(r.concurrency)} "
        f"{r.metric} {_change(r.change)}{_interval(r)}"
        + (" vs the reference " + str(r.baseline_run_id) if r.baseline_kind == "reference" else "") for r in bad[:5]
    )
    return [f"{len(bad)} regression(s){against}: {listed}."]


def _interval(r: Regression) -> str:
    """` (0.70×, CI 0.66–0.74)` for a figure compared over rounds, ` (difference CI +10.2% to +61.0%)` for a
    share of failed requests; empty for a check or a needle."""
    covering = f", covering {r.covers}" if r.covers else ""
    if r.ratio is None and r.ci_low is not None and r.ci_high is not None:
        return f" (difference CI {r.ci_low:+.1%} to {r.ci_high:+.1%}{covering})"
    if r.ratio is None or r.ci_low is None or r.ci_high is None:
        return ""
    return " (" + ratio_interval(r.ratio, r.ci_low, r.ci_high, covers=r.covers)[:-1].replace(" (", ", ", 1) + ")"


def _change(change: Any) -> str:
    return "" if change is None else f"{change:+.1%}"


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"

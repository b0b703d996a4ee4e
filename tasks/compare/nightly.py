"""Regression comparison against the last good run and the accepted reference (the nightly's compare step).

Per comparable baseline (tasks/compare/baselines.py chooses them; tasks/compare/sides.py reads both sides
and says what makes them comparable), each shape's figures are compared as effects with an interval
(tasks/stats/effects.py, widened by the lineage's history: tasks/stats/history.py); checks,
needles, cache verdicts and capacity regress on pass -> fail; a quality family's accuracy on a drop its
interval detects; the fixed text's NLL on a rise beyond its tolerance. The rules: PROTOCOL.md section 8,
"Regression verdicts". Every comparison is a row of the `regressions` table; any regressed row makes
`compare` raise RegressionFound after the rows are written, so the table is archived and the task fails.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from tasks.state import documents as run_documents
from tasks.compare.baselines import BaselineKind, Candidates, history, references
from tasks.compare.sides import Shape, Side, alike_rounds, current_side, median_of, metric_values, run_index
from tasks.compare.traffic import planned_load
from tasks.config import RunConfig
from tasks.stats.effects import Effect, effect, widen
from tasks.stats.history import between_run_log_sd
from tasks.state.storage import RunDir
from tasks.stats.intervals import newcombe
from tasks.scenarios.capacity import order as capacity_order

log = logging.getLogger("dayone.compare")

class RegressionFound(RuntimeError):
    """The run regressed against its baseline; the message lists what."""


def _mostly_failed(counts: dict[str, int]) -> bool:
    return 2 * counts["rounds_failed"] > counts["rounds"]


def compare_engine(cfg: RunConfig, engine: str, digest: str | None, current: Side, bases: dict[str, Side],
                   refs: dict[str, Side] | None = None,
                   histories: dict[str, list[Side]] | None = None) -> list[dict[str, Any]]:
    """The regressions rows of one engine: every comparison made, regressed or not, against the last good
    run of each scenario and, where it is another run, against the reference."""
    rows = _compare_with(cfg, engine, digest, current, bases, "last_good", histories or {})
    for scenario, ref in sorted((refs or {}).items()):
        last = bases.get(scenario)
        if last is None or last.run_id != ref.run_id:
            rows += _compare_with(cfg, engine, digest, current, {scenario: ref}, "reference", histories or {})
    return rows


def _compare_with(cfg: RunConfig, engine: str, digest: str | None, current: Side, bases: dict[str, Side],
                  kind: BaselineKind, histories: dict[str, list[Side]]) -> list[dict[str, Any]]:
    t = cfg.thresholds
    rows: list[dict[str, Any]] = []

    def row(scenario: str, metric: str, base: Side, baseline_value: float | None, value: float | None,
            change: float | None, threshold: float | None, regressed: bool, verdict: str,
            concurrency: int | None = None, e: Effect | None = None, interval: tuple[float, float] | None = None,
            covers: str | None = None) -> None:
        low, high = interval if interval is not None else ((e.low, e.high) if e else (None, None))
        rows.append({"run_id": cfg.run_id, "engine": engine, "image_digest": digest, "scenario": scenario,
                     "round": 0, "concurrency": concurrency, "metric": metric, "baseline_run_id": base.run_id,
                     "baseline_kind": kind, "baseline_value": baseline_value, "value": value, "change": change,
                     "threshold": threshold, "regressed": bool(regressed), "ratio": e.ratio if e else None,
                     "ci_low": low, "ci_high": high, "covers": covers or (e.covers if e and e.ratio is not None
                                                                           else None),
                     "verdict": verdict})

    # metric -> the threshold as a change, and whether worse is below it (throughput) or above (latency)
    limits = {"output_tps": (-t.output_tps_drop, "below"), "ttft_p95_s": (t.ttft_p95_rise, "above")}
    now_rounds = current.steady_rounds()
    now_counts = current.shape_counts()
    ttft_ok_now = current.ttft_reliable()
    planned = planned_load(cfg)
    for scenario in sorted(({k[0] for k in now_rounds} | planned) & set(bases)):
        base = bases[scenario]
        base_rounds = base.steady_rounds()
        base_counts = base.shape_counts()
        ttft_ok = ttft_ok_now and base.ttft_reliable()
        past = [h for h in histories.get(scenario, []) if h.run_id != current.run_id]
        shapes = {k for k in (*now_rounds, *now_counts, *base_counts) if k[0] == scenario}
        for key in sorted(shapes, key=lambda k: (k[1] or 0, k[2] or 0)):
            suffix = f"@{key[2]:g}rps" if key[2] is not None else ""
            was_counts, now_count = base_counts.get(key), now_counts.get(key)
            if was_counts is not None and scenario in planned:
                if now_count is None:
                    row(scenario, "measured" + suffix, base, float(was_counts["rounds"]), 0.0, None, None, True,
                        "measured -> missing", key[1])
                    continue
                _failed_share_row(row, cfg, scenario, suffix, base, key, was_counts, now_count)
            behind = [f"{whose} {why}" for whose, side in (("tonight's", current), (f"{base.run_id}'s", base))
                      for why in side.left_out_of(scenario)]
            if behind:  # the client fell behind the trace: those rounds are compared with nothing, and said so
                row(scenario, "client_behind" + suffix, base, None, None, None, None, False,
                    "left out: " + "; ".join(behind), key[1])
            if key not in base_rounds or key not in now_rounds:
                continue
            alike = alike_rounds(base_rounds[key], now_rounds[key])
            if alike is None:
                row(scenario, "cache_state" + suffix, base, None, None, None, None, False,
                    "not compared: the rounds of one run met an emptied prefix cache and the other's did not "
                    "(rows served from cache are no like for rows computed)", key[1])
                continue
            was_values, now_values = metric_values(alike[0]), metric_values(alike[1])
            for metric, (threshold, worse) in limits.items():
                if metric == "ttft_p95_s" and not ttft_ok:
                    continue
                was, now = was_values[metric], now_values[metric]
                was_median, now_median = median_of(was), median_of(now)
                if not was_median or now_median is None:
                    continue
                e = effect(was, now, t.confidence)
                between = between_run_log_sd([h.shape_rounds().get(key, {}).get(metric, []) for h in reversed(past)])
                if between is not None:  # the lineage's own run-to-run variation, from its good runs
                    covers = f"{e.covers}, and run-to-run variation estimated from {between.runs} past runs"
                    e = replace(widen(e, between.log_sd, covers, between.df), covers=covers)
                regressed = _beyond(e, 1 + threshold, worse)
                change = now_median / was_median - 1
                _log_undecided(engine, scenario, key[1], metric + suffix, e, change, threshold, worse)
                row(scenario, metric + suffix, base, was_median, now_median, change, threshold, regressed,
                    e.verdict, key[1], e)
    if "functional" in bases and not current.checks.empty:
        base = bases["functional"]
        now_checks = current.check_outcomes()
        for check, was in sorted(base.check_outcomes().items()):
            if was == "pass" and check in now_checks:
                now = now_checks[check]
                row("functional", f"check:{check}", base, 1.0, 1.0 if now == "pass" else 0.0, None, None,
                    now == "fail", f"pass -> {now}")
    if "long_context" in bases and not current.needles.empty:
        base = bases["long_context"]
        now_needles = current.needle_outcomes()
        for (length, depth), was in sorted(base.needle_outcomes().items()):
            if was and (length, depth) in now_needles:
                now = now_needles[(length, depth)]
                row("long_context", f"needle:{length}@{depth:g}", base, 1.0, 1.0 if now else 0.0, None, None, not now,
                    f"passed -> {'passed' if now else 'failed'}")
    if "prefix_cache" in bases and current.cache_verdict:
        base = bases["prefix_cache"]
        if base.cache_verdict == "effective":
            now_ok = current.cache_verdict == "effective"
            row("prefix_cache", "cache_verdict", base, 1.0, 1.0 if now_ok else 0.0, None, None, not now_ok,
                f"effective -> {current.cache_verdict}")
    if "quality" in bases and not current.quality.empty:
        _accuracy_rows(row, cfg, bases["quality"], current)
        _item_rows(row, bases["quality"], current)
        _nll_rows(row, cfg, bases["quality"], current)
    if "capacity" in bases and current.capacity is not None:
        base = bases["capacity"]
        was, now = base.capacity or {}, current.capacity
        if not was.get("withheld") and not now.get("withheld"):
            found = capacity_order(now, was)
            words = {"more": "higher: it passed a load the baseline failed",
                     "less": "lower: it failed a load the baseline passed",
                     "overlap": "no detectable difference: the brackets overlap or rest on close probes"}[found]
            row("capacity", "capacity", base, was.get("capacity"), now.get("capacity"), None, None, found == "less",
                f"{words} (baseline {was.get('text')}; now {now.get('text')})")
    return rows


def _failed_share_row(row: Callable[..., None], cfg: RunConfig, scenario: str, suffix: str, base: Side,
                      key: Shape, was: dict[str, int], now: dict[str, int]) -> None:
    """The share of failed requests of one shape, then and now: a regression when the interval of the
    difference lies wholly above `failed_share_rise`, or when most rounds failed now and not then."""
    t = cfg.thresholds
    n_was, n_now = was["ok"] + was["failed"], now["ok"] + now["failed"]
    if not n_was or not n_now:
        return
    share_was, share_now = was["failed"] / n_was, now["failed"] / n_now
    low, high = newcombe(now["failed"], n_now, was["failed"], n_was, t.confidence)
    rounds_now = _mostly_failed(now) and not _mostly_failed(was)
    regressed = low > t.failed_share_rise or rounds_now
    verdict = "higher" if low > 0 else "lower" if high < 0 else "no detectable difference"
    if rounds_now:
        verdict += f"; {now['rounds_failed']} of {now['rounds']} measured rounds failed"
    row(scenario, "failed_share" + suffix, base, share_was, share_now, share_now - share_was, t.failed_share_rise,
        regressed, verdict, key[1], interval=(low, high),
        covers=f"the finite number of requests ({n_was} then, {n_now} now), taken as independent")


def _shared_items(base: Side, current: Side) -> dict[str, list[tuple[str, bool, bool]]]:
    """family -> (item id, right then, right now) of the items both runs were sent (same id, prompt digest,
    expected answer and rule): an item added, removed or reworded under the same name is no engine's change."""
    return {family: [(item, then, now) for item, then, now, _ in items]
            for family, items in _shared_item_verdicts(base, current).items()}


def _shared_item_verdicts(base: Side, current: Side) -> dict[str, list[tuple[str, bool, bool, bool]]]:
    """`_shared_items`, each with whether tonight's wrong answer was right when asked again (unstable)."""
    was, now = base.item_verdicts(), current.item_verdicts()
    out: dict[str, list[tuple[str, bool, bool, bool]]] = {}
    for key in sorted(was.keys() & now.keys()):
        family, right_then, _ = was[key]
        _, right_now, unstable_now = now[key]
        out.setdefault(family, []).append((key[0], right_then, right_now, unstable_now))
    return out


def _accuracy_rows(row: Callable[..., None], cfg: RunConfig, base: Side, current: Side) -> None:
    """Each family's accuracy over the items both runs were sent, then and now: a regression when the Newcombe
    interval of the difference lies wholly below -`accuracy_drop` (docs/PROTOCOL.md, "Answers"); the interval
    speaks for the family's other items (an item that changed is `_item_rows`' finding)."""
    t = cfg.thresholds
    for family, items in sorted(_shared_items(base, current).items()):
        n = len(items)
        good_was, good_now = sum(then for _, then, _ in items), sum(now for _, _, now in items)
        was, now = good_was / n, good_now / n
        low, high = newcombe(good_now, n, good_was, n, t.confidence)
        verdict = "lower" if high < 0 else "higher" if low > 0 else "no detectable difference"
        row("quality", f"accuracy/{family}", base, was, now, now - was, -t.accuracy_drop, high < -t.accuracy_drop,
            f"{verdict} ({good_was}/{n} then, {good_now}/{n} now)", interval=(low, high),
            covers=f"the finite number of items ({n} then, {n} now), taken as independent")


def _item_rows(row: Callable[..., None], base: Side, current: Side) -> None:
    """Each family's items, one by one: a fixed item at greedy decoding answered right then and wrong now is a
    change in itself, not a draw, so any such item regresses (metric `items/<family>`, the items named; the
    values are the items right then and now among those both runs were sent). A wrong answer counts once asking
    again gave a wrong one too; an item right when asked again is unstable, named, never a regression."""
    for family, items in sorted(_shared_item_verdicts(base, current).items()):
        lost = [item for item, then, now, unstable in items if then and not now and not unstable]
        wavering = [item for item, then, now, unstable in items if then and not now and unstable]
        right_then, right_now = sum(i[1] for i in items), sum(i[2] for i in items)
        verdict = (f"{len(lost)} of {len(items)} item{'s' if len(items) > 1 else ''} right then and wrong now at "
                   f"greedy decoding, wrong again when asked again: {', '.join(lost)}" if lost else
                   f"no item right then is wrong now ({right_then}/{len(items)} then, {right_now}/{len(items)} now)")
        if wavering:
            verdict += (f"; unstable (wrong at first, right when asked again, not counted): {', '.join(wavering)}")
        row("quality", f"items/{family}", base, float(right_then), float(right_now), None, 0.0, bool(lost), verdict)


def _nll_rows(row: Callable[..., None], cfg: RunConfig, base: Side, current: Side) -> None:
    """The fixed text's NLL per token at each length, then and now: the same weights and text score the same
    up to kernel noise, so a rise beyond `scenarios.quality.nll_tolerance` regresses (docs/PROTOCOL.md,
    "Log-likelihood parity")."""
    tolerance = cfg.scenarios.quality.nll_tolerance
    now_nll = current.nll_by_length()
    for length, was in sorted(base.nll_by_length().items()):
        if length not in now_nll:
            continue
        now = now_nll[length]
        rise = now - was
        verdict = "higher" if rise > tolerance else "lower" if rise < -tolerance else "within the tolerance"
        row("quality", f"nll/{length}", base, was, now, rise, tolerance, rise > tolerance,
            f"{verdict} ({was:.3f} then, {now:.3f} nats/token now)")


def _beyond(e: Effect, limit: float, worse: str) -> bool:
    """Whether the whole interval of the ratio lies beyond `limit` on the worse side: a regression.
    Without an interval (fewer than 2 good rounds a side) nothing is shown, so nothing regressed."""
    if e.low is None or e.high is None:
        return False
    return e.high < limit if worse == "below" else e.low > limit


def _log_undecided(engine: str, scenario: str, concurrency: int | None, metric: str, e: Effect, change: float,
                   threshold: float, worse: str) -> None:
    """A median beyond the threshold whose interval still holds it is not a regression; say what would tell."""
    limit = 1 + threshold
    beyond = change < threshold if worse == "below" else change > threshold
    if not beyond or e.ratio is None or _beyond(e, limit, worse):
        return
    needed = e.rounds_needed(e.ratio / limit - 1)
    log.info("%s/%s%s %s: median %+.1f%% is beyond the threshold %+.0f%% but the interval %.3f-%.3f (covering %s) "
             "holds %.2f: not a regression at %d vs %d rounds (%s)",
             engine, scenario, "" if concurrency is None else f" c={concurrency}", metric, 100 * change, 100 * threshold, e.low, e.high, e.covers, limit,
             e.rounds_a, e.rounds_b, f"about {needed} rounds a side would tell either way" if needed else
             "no number of rounds would tell: the run-to-run variation alone is as large")


def compare_run(run_dir: RunDir, cfg: RunConfig, s3: Any, accepted: tuple[str, ...] = ()) -> dict[str, Any]:
    """Write the run's regressions rows per engine; raise RegressionFound when any row regressed.
    `accepted`: run ids a person accepted as the new level (the Variable dayone_nightly_accept)."""
    pinned = run_documents.pinned(run_dir)
    manifest = run_documents.manifest(run_dir) or {}
    created = manifest.get("created_ts")
    runs = run_index(s3, cfg)
    known = {str(d.get("run_id")) for d in runs}
    for run_id in accepted:
        if run_id not in known:
            log.warning("accepted run %s is not in the run index of %s: nothing to accept", run_id, cfg.model.name)
    regressed: list[str] = []
    result: dict[str, Any] = {"engines": {}}
    skipped: list[str] = []
    caveats: list[str] = []
    for e in cfg.engines:
        current = current_side(run_dir, e.name, cfg)
        wanted = current.scenarios() | planned_load(cfg)
        found = Candidates(s3, cfg, e.name, manifest)
        past = history(found, runs, e.name, wanted, created, accepted)
        bases = {scenario: sides[0] for scenario, sides in past.items()}
        refs = references(found, runs, e.name, wanted, created, accepted)
        rows = compare_engine(cfg, e.name, pinned.get(e.name, {}).get("image_digest"), current, bases, refs, past)
        with run_dir.rows("regressions", e.name, "compare") as out:
            for r in rows:
                out.write(r)
        bad = [r for r in rows if r["regressed"]]
        regressed += [_describe(r) for r in bad]
        skipped += found.skipped
        caveats += found.caveats({b.run_id for b in (*bases.values(), *refs.values())})
        result["engines"][e.name] = {
            "baselines": {s: b.run_id for s, b in sorted(bases.items())},
            "references": {s: b.run_id for s, b in sorted(refs.items())},
            "compared": len(rows), "regressed": len(bad),
        }
    accepted_here = sorted(set(accepted) & known)
    run_dir.write_json(run_documents.REGRESSIONS, {**result, "regressions": regressed, "skipped": skipped,
                                           "caveats": caveats, "accepted": accepted_here})
    if regressed:
        raise RegressionFound(f"{len(regressed)} regression(s) against the last good run or the reference: "
                              + "; ".join(regressed))
    return result


def _describe(r: dict[str, Any]) -> str:
    where = f"{r['engine']}/{r['scenario']}" + (f" c={r['concurrency']}" if r.get("concurrency") is not None else "")
    vs = f"vs {r['baseline_run_id']} ({r['baseline_kind'].replace('_', ' ')})"
    if r["metric"].startswith("failed_share"):
        return (f"{where} {r['metric']}: {r['baseline_value']:.1%} -> {r['value']:.1%} of requests failed "
                f"(difference interval {r['ci_low']:+.1%} to {r['ci_high']:+.1%}, threshold "
                f"+{r['threshold']:.0%}; {r['verdict']}) {vs}")
    if r["metric"].startswith("accuracy/"):
        return (f"{where} {r['metric']}: {r['baseline_value']:.0%} -> {r['value']:.0%} of items answered right "
                f"(difference interval {r['ci_low']:+.1%} to {r['ci_high']:+.1%}, threshold "
                f"{r['threshold']:+.0%}; {r['verdict']}) {vs}")
    if r["metric"].startswith("items/"):
        return f"{where} {r['metric']}: {r['verdict']} {vs}"
    if r["metric"].startswith("nll/"):
        return (f"{where} {r['metric']}: {r['baseline_value']:.3f} -> {r['value']:.3f} nats/token of the fixed text "
                f"({r['change']:+.3f}, tolerance {r['threshold']:g}) {vs}")
    if r["metric"].startswith("measured"):
        return f"{where} {r['metric']}: measured in {r['baseline_run_id']}, missing now {vs}"
    if r.get("ratio") is not None:
        return (f"{where} {r['metric']}: {r['baseline_value']:.4g} -> {r['value']:.4g} ({r['change']:+.1%}; ratio "
                f"{r['ratio']:.3f}, interval {r['ci_low']:.3f}-{r['ci_high']:.3f} beyond the threshold "
                f"{r['threshold']:+.0%}" + (f", covering {r['covers']}" if r.get("covers") else "") + f") {vs}")
    return f"{where} {r['metric']}: passed in {r['baseline_run_id']}, fails now {vs}"

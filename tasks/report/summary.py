"""summary.json: every figure the report shows, built from the run directory, desensitized.

One schema, many renderings: the HTML page and its charts are drawn from this document alone,
so what a reader sees and what is archived as JSON never disagree. Nothing here measures.

Per PROTOCOL.md section 5: each figure is the median over rounds with every round's value and a
spread flag; the first-encounter round's P95/P99 TTFT sits beside it; an engine whose TTFT is
unreliable publishes no TTFT (nor TPOT/ITL, which come from the same stream timing), only E2E.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.config import RunConfig
from tasks.desensitize import desensitize
from tasks.evidence.reliability import ttft_verdict, withhold_stream_timed
from tasks.evidence.restarts import CHECK as RESTARTS_CHECK
from tasks.evidence.restarts import restart_summary
from tasks.load.stats import HEADLINE_FIGURES, first_encounter_tail, over_rounds
from tasks.staging import RunDir

SCHEMA = "dayone.summary/1"
PERF_SCENARIOS = ("short", "prefill", "decode", "rate")
FIGURES = HEADLINE_FIGURES
# What no DayOne run proves, whatever ran (the seed's standing caveats): said in every report.
STANDING_LIMITS = (
    "Performance prompts are random token IDs: they measure the serving path (scheduling, batching, "
    "kernels, caches), not the quality of the model's answers.",
    "A needle found is a minimum correctness threshold for long context, not proof that the model "
    "reasons over the whole window.",
    "Results hold for this hardware, this image digest and this configuration only; another GPU, "
    "driver, image or engine setting is another experiment.",
)
SCENARIO_SWITCHES = ("functional", "short", "prefill", "decode", "rate", "long_context", "boundary", "prefix_cache")


def build_summary(run_dir: RunDir, cfg: RunConfig) -> dict[str, Any]:
    """The run's summary document (see the module docstring); desensitized."""
    from tasks.report.decision import decide

    steps = _step_outcomes(run_dir)
    validation = run_dir.read_json("validation.json")
    archived = run_dir.read_json("archive.json") or {}
    engines = {e.name: _engine_summary(run_dir, cfg, e.name, steps.get(e.name, {})) for e in cfg.engines}
    summary: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": cfg.run_id,
        "model": cfg.model.name,
        "model_revision": cfg.model.revision,
        "target": cfg.target,
        "dry_run": cfg.dry_run,
        "validation_success": bool(validation and validation.get("success")),
        "validation": {
            "ran": validation is not None,
            "success": bool(validation and validation.get("success")),
            "failed_tables": list((validation or {}).get("failed_tables") or []),
            "quarantined": archived.get("quarantined"),
        },
        "scenarios": _scenario_settings(cfg),
        "engines": engines,
        # Restarts seen during each engine's steps over the run, for the report's header.
        "restarts": {name: e["restarts"]["total"] for name, e in engines.items()},
        "run_steps": steps.get("", {}),
        "regressions": _regressions(run_dir),
    }
    summary["limits"] = list(STANDING_LIMITS)
    summary["not_tested"] = _not_tested(cfg, engines, steps.get("", {}), bool(summary["regressions"]))
    summary["decision"] = decide(summary)
    return desensitize(summary)


# ---- per engine ----------------------------------------------------------------------------------


def _engine_summary(run_dir: RunDir, cfg: RunConfig, engine: str, steps: dict[str, Any]) -> dict[str, Any]:
    spec = cfg.engine(engine)
    pinned = (run_dir.read_json("pinned.json", {}) or {}).get(engine, {})
    ready = run_dir.read_json(f"state/{engine}/ready.json", {}) or {}
    checks = run_dir.read_rows("checks", engine)
    perf_requests = [r for r in run_dir.read_rows("requests", engine) if r.get("scenario") in PERF_SCENARIOS]
    ttft = ttft_verdict(checks, perf_requests)
    published = bool(ttft.get("reliable"))
    needles = _needle_rows(run_dir.read_rows("needles", engine), published)
    long_context = [n for n in needles if n["scenario"] == "long_context"]
    functional = [c for c in checks if c.get("scenario") != "boundary" and c.get("check") != RESTARTS_CHECK]
    restarts = next((c for c in checks if c.get("check") == "boundary_restarts"), None)
    engine_restarts = restart_summary(checks)
    restarted = set(engine_restarts["restarted_steps"])
    perf = _perf(run_dir, engine, cfg, published)
    for scenario, block in perf.items():
        block["engine_restarted"] = scenario in restarted  # the figures of a step the engine restarted in
    prefix_cache = _prefix_cache(run_dir, engine, published)
    if prefix_cache is not None:
        prefix_cache["engine_restarted"] = "prefix_cache" in restarted
    return {
        "dialect": spec.dialect,
        "image": spec.image,
        "image_digest": pinned.get("image_digest"),
        "ready": bool(ready.get("ready")),
        "ready_detail": ready.get("detail"),
        "ready_waited_s": ready.get("waited_s"),
        "ttft": ttft,
        "checks": {str(c["check"]): str(c["outcome"]) for c in functional},
        "check_evidence": {str(c["check"]): _evidence(c) for c in functional},
        "perf": perf,
        "long_context": long_context,
        "boundary": {
            "needles": [n for n in needles if n["scenario"] == "boundary"],
            "restarts": None if restarts is None else {"outcome": restarts["outcome"], **_evidence(restarts)},
        },
        "needles": {"passed": sum(1 for n in long_context if n["passed"]), "total": len(long_context)},
        "prefix_cache": prefix_cache,
        "cache_trials": _cache_trials(run_dir.read_rows("cache_trials", engine), published),
        "startup_findings": [
            {"finding": f.get("finding"), "severity": f.get("severity"), "line": f.get("line")}
            for f in run_dir.read_rows("startup_findings", engine)
        ],
        "restarts": engine_restarts,
        "steps": steps,
    }


def _perf(run_dir: RunDir, engine: str, cfg: RunConfig, ttft_published: bool) -> dict[str, Any]:
    all_rounds = run_dir.read_rows("rounds", engine)
    rows = [r for r in all_rounds if r.get("scenario") in PERF_SCENARIOS]
    warmup_rounds = [r for r in all_rounds if r.get("warmup")]
    out: dict[str, Any] = {}
    for scenario in PERF_SCENARIOS:
        mine = [r for r in rows if r.get("scenario") == scenario and not r.get("warmup")]
        if not mine:
            continue
        settings = getattr(cfg.scenarios, scenario)
        levels = []
        for key in sorted({(r.get("concurrency"), r.get("rate_rps")) for r in mine}, key=_level_order):
            group = sorted((r for r in mine if (r.get("concurrency"), r.get("rate_rps")) == key),
                           key=lambda r: r.get("round") or 0)
            levels.append(_level(key, group, ttft_published, warmup_rounds))
        out[scenario] = {
            "input_tokens": settings.input_tokens,
            "output_tokens": settings.output_tokens,
            "levels": levels,
        }
    return out


def _level_order(key: tuple[Any, Any]) -> tuple[float, float]:
    concurrency, rate = key
    return (float(rate or 0), float(concurrency or 0))


def _level(key: tuple[Any, Any], rounds: list[dict[str, Any]], ttft_published: bool,
           warmup_rounds: list[dict[str, Any]]) -> dict[str, Any]:
    concurrency, rate = key
    figures = over_rounds(rounds, FIGURES)
    first = first_encounter_tail(rounds, warmup_rounds)
    if not ttft_published:
        figures = withhold_stream_timed(figures) or {}
        first = withhold_stream_timed(first)
    return {
        "label": f"{rate:g} req/s" if rate is not None else f"c={concurrency}",
        "concurrency": concurrency,
        "rate_rps": rate,
        "rounds": [r.get("round") for r in rounds],
        "round_status": [r.get("status") for r in rounds],
        "first_encounter_rounds": [r.get("round") for r in rounds if r.get("first_encounter")],
        "figures": figures,
        "first_encounter": first,
        "rounds_failed": sum(1 for r in rounds if r.get("status") == "failed"),
        "requests_failed": sum(int(r.get("requests_failed") or 0) for r in rounds),
        "length_deviations": sum(int(r.get("length_deviations") or 0) for r in rounds),
    }


def _needle_rows(rows: list[dict[str, Any]], ttft_published: bool) -> list[dict[str, Any]]:
    keep = ("scenario", "target_tokens", "prompt_tokens", "depth", "attempt", "first_encounter", "ttft_s",
            "e2e_s", "passed", "status", "error", "expected", "answer")
    out = []
    for r in sorted(rows, key=lambda r: (r.get("scenario") or "", r.get("target_tokens") or 0,
                                         r.get("attempt") or 0, r.get("depth") or 0)):
        n = {k: r.get(k) for k in keep}
        n["passed"] = bool(n["passed"])
        if not ttft_published:
            n["ttft_s"] = None
        out.append(n)
    return out


def _prefix_cache(run_dir: RunDir, engine: str, ttft_published: bool) -> dict[str, Any] | None:
    verdict = run_dir.read_json(f"verdicts/{engine}/prefix_cache.json")
    if verdict is None or ttft_published:
        return verdict
    withheld = {k: v for k, v in verdict.items() if "ttft" not in k}
    withheld["reason"] = (
        "the verdict's TTFT half is not published because this engine's TTFT is unreliable; "
        "shown instead: E2E cold vs repeats and the server's hit rate over the trial"
    )
    return withheld


def _cache_trials(rows: list[dict[str, Any]], ttft_published: bool) -> list[dict[str, Any]]:
    keep = ("trial", "ttft_s", "e2e_s", "prompt_tokens", "cached_tokens", "server_queries_delta",
            "server_hits_delta", "deltas_unpublished", "status", "error")
    out = []
    for r in sorted(rows, key=lambda r: r.get("trial") or 0):
        t = {k: r.get(k) for k in keep}
        if not ttft_published:
            t["ttft_s"] = None
        out.append(t)
    return out


def _evidence(row: dict[str, Any]) -> dict[str, Any]:
    ev = row.get("evidence")
    if isinstance(ev, str):
        try:
            ev = json.loads(ev)
        except ValueError:
            ev = {"excerpt": ev}
    ev = ev if isinstance(ev, dict) else {}
    return {
        "outcome": row.get("outcome"),
        "status": ev.get("status"),
        "field": ev.get("field"),
        "reason": _clip(ev.get("reason")),
        "excerpt": _clip(ev.get("excerpt")),
    }


def _clip(text: Any, limit: int = 160) -> str | None:
    if text is None:
        return None
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ---- run level -----------------------------------------------------------------------------------


def _step_outcomes(run_dir: RunDir) -> dict[str, dict[str, Any]]:
    """state/steps/*.json by engine ("" for run-level steps): {step: {status, detail}}."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted((run_dir.path / "state" / "steps").glob("*.json")):
        doc = run_dir.read_json(str(p.relative_to(run_dir.path))) or {}
        if doc.get("step") == "report":
            continue  # the report's own outcome: a retried report must rebuild the same bytes
        out.setdefault(doc.get("engine") or "", {})[str(doc.get("step") or p.stem)] = {
            "status": doc.get("status"), "detail": doc.get("detail"),
        }
    return out


def _scenario_settings(cfg: RunConfig) -> dict[str, Any]:
    s = cfg.scenarios
    return {
        "enabled": {name: bool(getattr(s, name).enabled) for name in SCENARIO_SWITCHES},
        "warmup": s.warmup,
        "rounds": {name: getattr(s, name).rounds for name in PERF_SCENARIOS},
        "long_context_lengths": list(s.long_context.lengths),
        "long_context_depths": list(s.long_context.depths),
        "prefix_cache_prompt_tokens": s.prefix_cache.prompt_tokens,
        "prefix_cache_repeats": s.prefix_cache.repeats,
        "slo": cfg.slo.model_dump(mode="json"),
    }


def _not_tested(cfg: RunConfig, engines: dict[str, Any], run_steps: dict[str, Any],
                has_regressions: bool = False) -> list[dict[str, str]]:
    """What this run did not test, and why: switched off, not applicable, or a step that did not finish."""
    out: list[dict[str, str]] = []
    for name in SCENARIO_SWITCHES:
        if not getattr(cfg.scenarios, name).enabled:
            out.append({"engine": "all", "what": f"{name} scenario", "why": "disabled in the run config"})
    if not cfg.scenarios.warmup:
        out.append({"engine": "all", "what": "warmup", "why": "disabled: first-encounter rounds carry JIT costs"})
    for name, e in engines.items():
        if not e["ready"]:
            # One line for the whole engine; its not-attempted steps all say the same thing.
            out.append({"engine": name, "what": "every scenario",
                        "why": f"engine never became ready: {e.get('ready_detail') or 'not deployed'}"})
        for check, ev in e["check_evidence"].items():
            if ev["outcome"] == "not_applicable":
                out.append({"engine": name, "what": f"check {check}", "why": ev.get("reason") or "not applicable"})
        for step, st in e["steps"].items():
            if st.get("status") == "failed" or (st.get("status") == "not_attempted" and e["ready"]):
                status = "failed" if st["status"] == "failed" else "not attempted"
                out.append({"engine": name, "what": f"step {step}", "why": f"{status}: {st.get('detail') or ''}"})
    for step, st in run_steps.items():
        if step == "compare" and has_regressions:
            continue  # a comparison that found regressions did test: they have their own table
        if st.get("status") in ("failed", "not_attempted"):
            out.append({"engine": "run", "what": f"step {step}", "why": f"{st['status']}: {st.get('detail') or ''}"})
    return out


def _regressions(run_dir: RunDir) -> list[dict[str, Any]]:
    keep = ("engine", "scenario", "concurrency", "metric", "baseline_run_id", "baseline_value", "value", "change",
            "threshold", "regressed")
    rows = [{k: r.get(k) for k in keep} for r in run_dir.read_rows("regressions")]
    return sorted(rows, key=lambda r: (not r["regressed"], str(r["engine"]), str(r["scenario"]), str(r["metric"])))


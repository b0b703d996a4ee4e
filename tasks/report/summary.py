"""summary.json: every figure the report shows, built from the run directory, desensitized.

One schema (the tasks/report/schema package), many renderings: the HTML page and its charts are drawn
from this document alone, so what a reader sees and what is archived never disagree. Nothing here
measures. Each figure is the median over rounds with every round's value, a spread flag and the
first-encounter tail, with TTFT (and TPOT, ITL) withheld where unreliable (PROTOCOL.md section 5).
Engines are compared with the base engine on the decision's figures (decision.LEAD_FIGURES) as effects
with an interval (tasks/report/comparisons.py), only where a figure is published.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.state import documents as run_documents
from tasks.config import RunConfig
from tasks.config.engines import EngineSpec
from tasks.config.maturity import spec_maturity
from tasks.core.desensitize import desensitize
from tasks.evidence.cache import published_verdict
from tasks.stats.reliability import engine_ttft_verdict, withhold_stream_timed
from tasks.evidence.restarts import CHECK as RESTARTS_CHECK
from tasks.evidence.restarts import COLD_START_FINDING
from tasks.evidence.restarts import restart_summary
from tasks.stats.figures import client_load, level_figures, withhold_slo_judged
from tasks.report.choice import choose
from tasks.report.comparisons import comparisons
from tasks.report.decision import decide
from tasks.report.limits import not_proved
from tasks.report.parity import build_parity
from tasks.report.speculative import build_speculative
from tasks.report.schema import RunSummary
from tasks.report.schema.cache import CacheTrial, PrefixCache
from tasks.report.schema.capacity import Capacity, CapacityProbe
from tasks.report.schema.trace import TraceReplay
from tasks.report.schema.comparison import Regression
from tasks.report.schema.engine import EngineSummary
from tasks.report.schema.evidence import EngineMaturity, EngineRestarts, OutcomeSummary, StartupFinding, TtftVerdict
from tasks.report.schema.functional import Boundary, CheckEvidence, Needle, NeedleCount
from tasks.report.schema.perf import Figure, FirstEncounter, Launch, PerfLevel, ScenarioResults
from tasks.report.schema.quality import FamilyAccuracy, Quality, WrongAnswer
from tasks.report.schema.run import ExperimentSummary, NotTested, ScenarioSettings, Slo, Validation, Variant
from tasks.report.schema.telemetry import (ClientLoad, EngineRound, Hardware, KvCapacity, KvPeak, MemoryPerCard,
                                           MemoryPoint, TelemetryRound, TelemetryWindow)
from tasks.core.names import PERF_SCENARIOS, SCENARIO_SWITCHES, TRAFFIC_SCENARIOS
from tasks.scenarios.capacity import published as published_capacity
from tasks.report.traffic import traffic_summary
from tasks.state.storage import RunDir

CONFIDENCE = 0.95  # of every comparison's interval
# What no DayOne run proves, whatever ran (the GLM-5.3-Flash Day 1 Hands-on report's standing
# caveats): said in every report.
STANDING_LIMITS = (
    "Performance prompts are random token IDs: they measure the serving path (scheduling, batching, "
    "kernels, caches), not the quality of the model's answers.",
    "A needle found is a minimum correctness threshold for long context, not proof that the model "
    "reasons over the whole window.",
    "Results hold for this hardware, this image digest and this configuration only; another GPU, "
    "driver, image or engine setting is another experiment.",
)


def build_summary(run_dir: RunDir, cfg: RunConfig) -> RunSummary:
    """The run's summary document (see the module docstring); desensitized."""
    steps = _step_outcomes(run_dir)
    validation = run_dir.read_json(run_documents.VALIDATION)
    archived = run_dir.read_json(run_documents.ARCHIVED) or {}
    engines = {e.name: _engine_summary(run_dir, cfg, e.name, steps.get(e.name, {})) for e in cfg.engines}
    run_steps = steps.get("", {})
    regressions = _regressions(run_dir)
    succeeded = bool(validation and validation.get("success"))
    weights = _weights_pairs(run_dir, cfg)
    summary = RunSummary(
        run_id=cfg.run_id,
        model=cfg.model.name,
        model_revision=cfg.model.revision,
        target=cfg.target,
        dry_run=cfg.dry_run,
        validation_success=succeeded,
        validation=Validation(
            ran=validation is not None,
            success=succeeded,
            failed_tables=list((validation or {}).get("failed_tables") or []),
            quarantined=archived.get("quarantined"),
        ),
        scenarios=_scenario_settings(cfg),
        engines=engines,
        # Restarts seen during each engine's steps over the run, for the report's header.
        restarts={name: e.restarts.total for name, e in engines.items()},
        run_steps=run_steps,
        regressions=regressions,
        baselines_skipped=list((run_dir.read_json(run_documents.REGRESSIONS) or {}).get("skipped") or []),
        baseline_caveats=list((run_dir.read_json(run_documents.REGRESSIONS) or {}).get("caveats") or []),
        limits=list(STANDING_LIMITS),
        not_tested=_not_tested(cfg, engines, run_steps, bool(regressions)),
        confidence=CONFIDENCE,
        comparisons=comparisons(engines, cfg.experiment.base if cfg.experiment else cfg.engines[0].name, CONFIDENCE),
        decision=[],
        **_design(run_dir),
        slice_findings=_slice_findings(engines),
        parity=build_parity(run_dir, cfg, CONFIDENCE, weights),
        speculative=build_speculative(run_dir, cfg, CONFIDENCE),
        maturity_override=cfg.choice.maturity_override,
        resolved_revision=run_dir.read_json(run_documents.MODEL_REVISION),
        same_weights=weights,
        warmup_matrix=(run_dir.read_json(run_documents.WARMUP_MATRIX) or {}).get("shapes") or [],
    )
    summary.fairness = _fairness(summary)
    summary.not_proved = not_proved(cfg, summary)
    summary.decision = decide(summary)
    summary.choices = choose(summary, cfg.choice.orders())
    return RunSummary.model_validate(desensitize(summary.model_dump(mode="json")))


def _weights_pairs(run_dir: RunDir, cfg: RunConfig) -> list[dict[str, Any]]:
    """Each pair of engines that said what they served, held against each other (tasks/evidence/revision.py)."""
    from tasks.evidence.revision import weights_pairs

    served = {e.name: run_dir.read_json(run_documents.served_revision_doc(e.name)) for e in cfg.engines}
    return weights_pairs({n: r for n, r in served.items() if r}, {e.name: e.weights_variant for e in cfg.engines})


def _design(run_dir: RunDir) -> dict[str, Any]:
    """How the run measured its engines against each other, as the plan recorded it."""
    planned = run_documents.manifest(run_dir) or {}
    exp = planned.get("experiment")
    experiment = None if not exp else ExperimentSummary(
        base=exp["base"], factors=[f["setting"] for f in exp.get("factors") or []], design=exp.get("design", ""),
        base_values=exp.get("base_values") or {},
        variants=[Variant(engine=name, changes=changes) for name, changes in (exp.get("variants") or {}).items()])
    return {"measurement_design": planned.get("design") or "lanes",
            "engine_order": [p for p in planned.get("positions") or [] if p], "experiment": experiment}


# ---- per engine ----------------------------------------------------------------------------------


def _engine_summary(run_dir: RunDir, cfg: RunConfig, engine: str, steps: dict[str, Any]) -> EngineSummary:
    spec = cfg.engine(engine)
    pinned = run_documents.pinned(run_dir).get(engine, {})
    ready = run_documents.readiness(run_dir, engine)
    checks = run_dir.read_rows("checks", engine)
    ttft = TtftVerdict.model_validate(engine_ttft_verdict(run_dir, engine))
    published = ttft.reliable
    needles = _needle_rows(run_dir.read_rows("needles", engine), published)
    long_context = [n for n in needles if n.scenario == "long_context"]
    functional = [c for c in checks if c.get("scenario") != "boundary" and c.get("check") != RESTARTS_CHECK]
    restarts = next((c for c in checks if c.get("check") == "boundary_restarts"), None)
    engine_restarts = EngineRestarts.model_validate(restart_summary(checks))
    restarted = set(engine_restarts.restarted_steps)
    perf = _perf(run_dir, engine, cfg, published)
    for scenario, block in perf.items():
        block.engine_restarted = scenario in restarted  # the figures of a step the engine restarted in
    prefix_cache = _prefix_cache(run_dir, engine, ttft.model_dump())
    if prefix_cache is not None:
        prefix_cache.engine_restarted = "prefix_cache" in restarted
    findings = [StartupFinding(finding=f.get("finding"), severity=f.get("severity"), line=f.get("line"))
                for f in run_dir.read_rows("startup_findings", engine)]
    return EngineSummary(
        dialect=spec.dialect,
        image=spec.image,
        image_digest=pinned.get("image_digest"),
        ready=ready.ready,
        ready_detail=ready.detail or None,
        ready_waited_s=ready.waited_s,
        ttft=ttft,
        checks={str(c["check"]): str(c["outcome"]) for c in functional},
        check_evidence={str(c["check"]): _evidence(c) for c in functional},
        perf=perf,
        long_context=long_context,
        boundary=Boundary(needles=[n for n in needles if n.scenario == "boundary"],
                          restarts=None if restarts is None else _evidence(restarts)),
        needles=NeedleCount(passed=sum(1 for n in long_context if n.passed), total=len(long_context)),
        prefix_cache=prefix_cache,
        cache_trials=_cache_trials(run_dir.read_rows("cache_trials", engine),
                                   published and (prefix_cache is None or prefix_cache.withheld is None)),
        startup_findings=findings,
        # the first start's, else a relaunch's (measurement.launches: "launch N: ...")
        restarts_before_ready=min((f for f in findings if f.finding == COLD_START_FINDING),
                                  key=lambda f: str(f.line).startswith("launch "), default=None),
        served_revision=run_dir.read_json(run_documents.served_revision_doc(engine)),
        maturity=EngineMaturity.model_validate(spec_maturity(spec, pinned)),
        **_engine_log(run_dir, engine, spec.dialect),
        restarts=engine_restarts,
        steps=steps,
        engine_rounds=_engine_rounds(run_dir.read_rows("engine_rounds", engine), published,
                                     run_dir.read_rows("rounds", engine), spec.dialect),
        client_load=[ClientLoad.model_validate(c) for c in client_load(run_dir.read_rows("client_shards", engine),
                                                                         run_dir.read_rows("requests", engine))],
        capacity=_capacity(run_dir, engine, cfg, published, "capacity" in restarted),
        kv_capacity=_kv_capacity(run_dir, engine),
        hardware=_hardware(run_dir, engine),
        telemetry_rounds=_telemetry_rounds(run_dir.read_rows("telemetry_rounds", engine)),
        telemetry_windows=_telemetry_windows(run_dir.read_rows("telemetry_rounds", engine)),
        memory_per_card=_memory_per_card(run_dir, engine, spec),
        quality=_quality(run_dir.read_rows("quality", engine)),
        traffic=traffic_summary(run_dir, cfg, engine, published, ttft.reason),
        trace=_trace(run_dir, engine, cfg, published, ttft.reason),
        traffic_levels=_traffic_levels(run_dir, engine, cfg, published),
    )


def _engine_log(run_dir: RunDir, engine: str, dialect: str) -> dict[str, Any]:
    """Whether the engine's own log was kept, and its first-encounter and outlier rounds held against it
    (tasks/evidence/engine_log.py)."""
    from tasks.engines import adapter_for
    from tasks.evidence.engine_log import tail_causes

    text = run_dir.read_bytes(run_documents.kept_log_doc(engine))
    if text is None:
        return {"log_kept": False, "tail_causes": []}
    causes = tail_causes(text.decode("utf-8", errors="replace"), adapter_for(dialect),
                         run_dir.read_rows("rounds", engine), run_dir.read_rows("requests", engine))
    return {"log_kept": True, "tail_causes": causes}


def _trace(run_dir: RunDir, engine: str, cfg: RunConfig, ttft_published: bool,
           ttft_reason: str | None) -> TraceReplay | None:
    """The trace step's summary (tasks/scenarios/trace.py), its TTFT under the engine's TTFT rule, and its
    rounds' figures as one level (compared between engines like a performance level)."""
    doc = run_dir.read_json(run_documents.perf_summary_doc(engine, "trace"))
    if doc is None:
        return None
    keep = {k: doc[k] for k in ("trace", "rounds", "behind", "lateness_p99_max_s", "engine_restarted",
                                "client_processes", "client_processes_reason", "left_out") if k in doc}
    if not ttft_published:
        keep["rounds"] = [{**r, "ttft_p50_s": None, "ttft_p99_s": None} for r in keep["rounds"]]
        keep["ttft_withheld"] = ttft_reason or "this engine's TTFT is not published"
    # A round the client fell behind in sent other traffic than the trace's: out of the level, so out of every
    # comparison and the choice (its figures stay in the trace's own table, the reason beside them).
    late = {r.get("round") for r in keep.get("rounds", []) if r.get("behind")}
    rounds = sorted((r for r in run_dir.read_rows("rounds", engine) if r.get("scenario") == "trace"
                     and r.get("round") not in late), key=lambda r: r.get("round") or 0)
    level = _level((None, rounds[0].get("rate_rps")), rounds, ttft_published, [], cfg.slo) if rounds else None
    return TraceReplay.model_validate({**keep, "level": level})


def _traffic_levels(run_dir: RunDir, engine: str, cfg: RunConfig, ttft_published: bool) -> dict[str, list[PerfLevel]]:
    """The traffic scenarios' rounds (sessions, shared prefix, your own prompts) as load levels, compared
    between engines like a performance level's."""
    all_rounds = run_dir.read_rows("rounds", engine)
    warmup_rounds = [r for r in all_rounds if r.get("warmup")]
    out: dict[str, list[PerfLevel]] = {}
    for scenario in TRAFFIC_SCENARIOS:
        mine = [r for r in all_rounds if r.get("scenario") == scenario and not r.get("warmup")]
        keys = sorted({(r.get("concurrency"), r.get("rate_rps")) for r in mine}, key=_level_order)
        if keys:
            out[scenario] = [_level(key, sorted((r for r in mine if (r.get("concurrency"), r.get("rate_rps")) == key),
                                                key=lambda r: r.get("round") or 0),
                                    ttft_published, warmup_rounds, cfg.slo) for key in keys]
    return out


def _perf(run_dir: RunDir, engine: str, cfg: RunConfig, ttft_published: bool) -> dict[str, ScenarioResults]:
    all_rounds = run_dir.read_rows("rounds", engine)
    rows = [r for r in all_rounds if r.get("scenario") in PERF_SCENARIOS]
    warmup_rounds = [r for r in all_rounds if r.get("warmup")]
    out: dict[str, ScenarioResults] = {}
    for scenario in PERF_SCENARIOS:
        mine = [r for r in rows if r.get("scenario") == scenario and not r.get("warmup")]
        if not mine:
            continue
        settings = getattr(cfg.scenarios, scenario)
        levels = []
        for key in sorted({(r.get("concurrency"), r.get("rate_rps")) for r in mine}, key=_level_order):
            group = sorted((r for r in mine if (r.get("concurrency"), r.get("rate_rps")) == key),
                           key=lambda r: r.get("round") or 0)
            levels.append(_level(key, group, ttft_published, warmup_rounds, cfg.slo))
        kept = run_dir.read_json(run_documents.perf_summary_doc(engine, scenario)) or {}
        design = kept.get("design") or {}
        together = [e for e in design.get("engines") or [] if e != engine] if design.get("order") == "interleaved" \
            else []
        out[scenario] = ScenarioResults(input_tokens=settings.input_tokens, output_tokens=settings.output_tokens,
                                        levels=levels, interleaved_with=together,
                                        launches=[Launch.model_validate({k: x.get(k) for k in Launch.model_fields})
                                                  for x in kept.get("launches") or []])
    return out


def _level_order(key: tuple[Any, Any]) -> tuple[float, float]:
    concurrency, rate = key
    return (float(rate or 0), float(concurrency or 0))


def _level(key: tuple[Any, Any], rounds: list[dict[str, Any]], ttft_published: bool,
           warmup_rounds: list[dict[str, Any]], slo: Any = None) -> PerfLevel:
    concurrency, rate = key
    level = level_figures(rounds, warmup_rounds)
    # goodput obeys the capacity's rule: judged on TTFT/TPOT, it goes where the stream timing goes
    figures = withhold_slo_judged(level["figures"], ttft_published, slo) or {}
    first = level["first_encounter"]
    if not ttft_published:
        figures = withhold_stream_timed(figures) or {}
        first = withhold_stream_timed(first)
    return PerfLevel(
        label=f"{rate:g} req/s" if rate is not None else f"c={concurrency}",
        concurrency=concurrency,
        rate_rps=rate,
        rounds=[r.get("round") for r in rounds],
        launches=[r.get("launch") or 0 for r in rounds],
        round_status=[r.get("status") for r in rounds],
        first_encounter_rounds=[r.get("round") for r in rounds if r.get("first_encounter")],
        cache_cleared=([r.get("cache_cleared") for r in rounds]
                       if any(r.get("cache_cleared") is not None for r in rounds) else []),
        figures={name: Figure.model_validate(f) for name, f in figures.items()},
        first_encounter=None if first is None else FirstEncounter.model_validate(first),
        rounds_failed=level["failed_rounds"],
        requests_failed=sum(int(r.get("requests_failed") or 0) for r in rounds),
        requests_ok=sum(int(r.get("requests_ok") or 0) for r in rounds),
        length_deviations=level["length_deviations"],
    )


def _capacity(run_dir: RunDir, engine: str, cfg: RunConfig, ttft_published: bool,
              restarted: bool) -> Capacity | None:
    """The capacity search's result (tasks/scenarios/capacity.py), when it ran. A capacity judged on
    TTFT or TPOT is not published for an engine whose stream timing is unreliable: the probes stay."""
    doc = run_dir.read_json(run_documents.perf_summary_doc(engine, "capacity"))
    if doc is None:
        return None
    doc = published_capacity(doc, ttft_published, cfg.slo)
    probes = [CapacityProbe.model_validate({k: p.get(k) for k in CapacityProbe.model_fields}) for p in doc["probes"]]
    return Capacity.model_validate({**{k: doc.get(k) for k in Capacity.model_fields if k in doc},
                                    "probes": probes, "engine_restarted": restarted})


def _quality(rows: list[dict[str, Any]]) -> Quality | None:
    """Accuracy per family with its interval (tasks/quality/score.py), and the items answered wrong."""
    from tasks.quality.score import accuracy_by_family

    if not rows:
        return None
    families = next(iter(accuracy_by_family(rows, CONFIDENCE).values()))
    return Quality(families={f: FamilyAccuracy.model_validate(a) for f, a in families.items()},
                   wrong=[WrongAnswer(item_id=r["item_id"], family=r["family"], expected=r["expected"],
                                      answer=r.get("answer"), error=r.get("error")) for r in rows if not r["correct"]])


def _needle_rows(rows: list[dict[str, Any]], ttft_published: bool) -> list[Needle]:
    out = []
    for r in sorted(rows, key=lambda r: (r.get("scenario") or "", r.get("target_tokens") or 0,
                                         r.get("attempt") or 0, r.get("depth") or 0)):
        n = {k: r.get(k) for k in Needle.model_fields}
        n["passed"] = bool(n["passed"])
        if not ttft_published:
            n["ttft_s"] = None
        out.append(Needle.model_validate(n))
    return out


def _prefix_cache(run_dir: RunDir, engine: str, ttft: dict[str, Any]) -> PrefixCache | None:
    doc = run_dir.read_json(run_documents.cache_verdict_doc(engine))
    return None if doc is None else PrefixCache.model_validate(published_verdict(doc, ttft))


def _cache_trials(rows: list[dict[str, Any]], ttft_published: bool) -> list[CacheTrial]:
    out = []
    for r in sorted(rows, key=lambda r: r.get("trial") or 0):
        t = {k: r.get(k) for k in CacheTrial.model_fields}
        if not ttft_published:
            t["ttft_s"] = None
        out.append(CacheTrial.model_validate(t))
    return out


# Why a measured round of these scenarios has no engine_rounds row: its scenario reads no figures per round.
_UNWATCHED_SCENARIOS = {
    "sessions": "a sessions level is timed turn by turn, with no /metrics scrape around it",
}
_ROUND_KEY = ("scenario", "input_tokens", "output_tokens", "concurrency", "rate_rps", "round")


def _why_no_engine_round(scenario: str | None, dialect: str | None) -> str:
    from tasks.engines import adapter_for

    if dialect is not None and adapter_for(dialect).metrics_path is None:
        return (f"not_exposed: {dialect} serves no /metrics, so the engine's TTFT and ITL histograms the client's "
                "timing would stand beside do not exist")
    return _UNWATCHED_SCENARIOS.get(scenario or "", "no engine_rounds row was written for this round")


def _engine_rounds(rows: list[dict[str, Any]], ttft_published: bool, rounds: list[dict[str, Any]] | None = None,
                   dialect: str | None = None) -> list[EngineRound]:
    """Every measured round's engine figures (warmup rounds left out), in scenario and level order; a
    measured round (rounds table) without an engine_rounds row is listed too, saying why it has none."""
    out = []
    have = {tuple(r.get(k) for k in _ROUND_KEY) for r in rows}
    bare = [{**{k: r.get(k) for k in (*_ROUND_KEY, "warmup")}, "no_engine_figures": _why_no_engine_round(
        r.get("scenario"), dialect)} for r in rounds or () if tuple(r.get(k) for k in _ROUND_KEY) not in have]
    for r in sorted((r for r in [*rows, *bare] if not r.get("warmup")),
                    key=lambda r: (r.get("scenario") or "", float(r.get("rate_rps") or 0),
                                   float(r.get("concurrency") or 0), r.get("round") or 0)):
        e = {k: r.get(k) for k in EngineRound.model_fields}
        rate = r.get("rate_rps")
        e["level"] = f"{rate:g} req/s" if rate is not None else f"c={r.get('concurrency')}"
        not_exposed = r.get("not_exposed")
        if isinstance(not_exposed, str):
            not_exposed = json.loads(not_exposed)
        e["not_exposed"] = sorted(not_exposed or {})
        if not ttft_published:  # the client's stream timing is withheld: nothing of it stands beside the engine's
            e.update(client_ttft_mean_s=None, ttft_gap_finding=None, client_itl_mean_s=None, client_tpot_mean_s=None,
                     ttft_gap_s=None, itl_gap_s=None, itl_gap_finding=None)
        out.append(EngineRound.model_validate(e))
    return out


def _telemetry_rounds(rows: list[dict[str, Any]]) -> list[TelemetryRound]:
    """Every measured round's GPU figures (warmup rounds left out) in time order, each reading's
    time counted from the engine's first reading."""
    rows = sorted((r for r in rows if not r.get("warmup")), key=lambda r: r.get("started_ts") or 0.0)
    t0 = next((r["started_ts"] for r in rows if r.get("started_ts") is not None), None)
    out = []
    for r in rows:
        readings = r.get("readings")
        if isinstance(readings, str):
            readings = json.loads(readings)
        shift = (r["started_ts"] - t0) if t0 is not None and r.get("started_ts") is not None else None
        rate = r.get("rate_rps")
        out.append(TelemetryRound(
            scenario=r["scenario"], level=f"{rate:g} req/s" if rate is not None else f"c={r.get('concurrency')}",
            round=r["round"], gpus=r.get("gpus"), gpu_util_mean_pct=r.get("gpu_util_mean_pct"),
            memory_used_peak_mib=r.get("memory_used_peak_mib"), power_mean_w=r.get("power_mean_w"),
            energy_j=r.get("energy_j"), ok_output_tokens=r.get("ok_output_tokens"),
            energy_per_output_token_j=r.get("energy_per_output_token_j"),
            why_missing=r.get("unavailable") or r.get("energy_unpublished"),
            readings=[] if shift is None or not readings else [[t + shift, u, w] for t, u, w, *_ in readings],
            exporter_refresh_s=r.get("exporter_refresh_s")))
    return out


def _telemetry_windows(rows: list[dict[str, Any]]) -> list[TelemetryWindow]:
    """Energy per scenario and load level, under the one energy rule (telemetry.energy_windows)."""
    from tasks.telemetry.gpu import energy_windows

    return [TelemetryWindow(level=f"{w['rate_rps']:g} req/s" if w["rate_rps"] is not None else f"c={w['concurrency']}",
                            **{k: w[k] for k in TelemetryWindow.model_fields if k != "level"})
            for w in energy_windows(rows)]


def _memory_per_card(run_dir: RunDir, engine: str, spec: EngineSpec) -> MemoryPerCard | None:
    """Memory per card set against the startup log's weights, KV and state pool as one card's share: the first
    rank's own line where the engine logs per rank, else the log's / tensor parallel. Read from the DCGM readings
    around the rounds where telemetry was on, else from nvidia-smi's lines in the engine pod's kept log (the
    memory loop of tasks/telemetry/hardware.py), taken around the rounds' spans."""
    from statistics import median

    from tasks.engines import adapter_for
    from tasks.telemetry.gpu import memory_per_card, memory_rows_from_readings, round_spans
    from tasks.telemetry.hardware import memory_readings

    adapter = adapter_for(spec.dialect)
    divisor = 1 if adapter.startup_memory_per_card else spec.tp
    kv = (run_dir.read_rows("kv_capacity", engine) or [{}])[-1]
    share = {name: None if kv.get(name) is None else float(kv[name]) * 1024.0 / divisor
             for name in ("weights_gib", "kv_cache_gib")}
    # the state pool's line is among the lines the startup step read its figures from (kv_capacity.log_lines)
    pool_gib = adapter.startup_memory("\n".join(kv.get("log_lines") or [])).state_pool_gib
    pool = None if pool_gib is None else pool_gib * 1024.0 / divisor
    rows = [r for r in run_dir.read_rows("telemetry_rounds", engine) if r.get("memory_cards")]
    source = "the DCGM exporter, read just before each round and just after it"
    if not any((r["memory_cards"] if isinstance(r["memory_cards"], dict) else json.loads(r["memory_cards"])).get(k)
               for r in rows for k in ("before", "after")):
        kept = run_dir.read_bytes(run_documents.kept_log_doc(engine))
        readings, notes = memory_readings(kept.decode("utf-8", "replace") if kept else "")
        if not readings and not notes:
            return None  # no DCGM and no memory loop in the engine's log (a local engine, an older pod)
        source = "nvidia-smi in the engine's pod"
        rows = []
        if len(readings) >= 2:
            cadence = median(b[0] - a[0] for a, b in zip(readings, readings[1:]))
            spans = round_spans(run_dir.read_rows("requests", engine) + run_dir.read_rows("trace_requests", engine),
                                run_dir.read_rows("rounds", engine))
            # a reading is a round's when it falls within two of the loop's periods of the round's start or end
            rows = memory_rows_from_readings(readings, spans, max_age_s=2.0 * cadence)
            source += f", every {round(cadence, 1):g} s (its log's readings nearest each round)"
    points = memory_per_card(rows, share["weights_gib"], share["kv_cache_gib"], pool)
    not_read = None
    if not points:
        if source.startswith("the DCGM"):
            return None
        # the pod's loop ran, or said why it could not: the section says why there is no figure
        not_read = ("; ".join(notes) if not readings else
                    f"none of the pod's {len(readings)} readings fell within two of its periods of a round's start "
                    "or end (the node's clock and the worker's may disagree, or the log was cut)")
    basis = ("the first tensor-parallel rank's own lines (each rank logs its share)" if adapter.startup_memory_per_card
             else f"the log's figures / {spec.tp} (tensor parallel)")
    return MemoryPerCard(tensor_parallel=spec.tp, share_basis=basis, weights_per_card_mib=share["weights_gib"],
                         kv_cache_per_card_mib=share["kv_cache_gib"], state_pool_per_card_mib=pool, source=source,
                         not_read=not_read, points=[MemoryPoint.model_validate(p) for p in points])


def _kv_capacity(run_dir: RunDir, engine: str) -> KvCapacity | None:
    """The engine's KV capacity from its startup log, with the peak KV usage of each scenario."""
    from tasks.evidence.kv_capacity import peak_kv_by_scenario

    rows = run_dir.read_rows("kv_capacity", engine)
    if not rows:
        return None
    row = rows[-1]
    not_logged = row.get("not_logged")
    if isinstance(not_logged, str):
        not_logged = json.loads(not_logged)
    tokens = row.get("kv_tokens")
    peaks = [KvPeak(scenario=scenario, usage=usage, tokens=None if tokens is None else usage * tokens)
             for scenario, usage in sorted(peak_kv_by_scenario(run_dir.read_rows("engine_rounds", engine)).items())]
    return KvCapacity.model_validate({**{k: row.get(k) for k in KvCapacity.model_fields if k in row},
                                      "not_logged": sorted(not_logged or {}), "peaks": peaks})


def _hardware(run_dir: RunDir, engine: str) -> Hardware | None:
    rows = run_dir.read_rows("hardware", engine)
    if not rows:
        return None
    row = dict(rows[-1])
    for name in ("gpu_uuids", "sources", "unknown"):
        if isinstance(row.get(name), str):
            row[name] = json.loads(row[name])
    return Hardware.model_validate({**{k: row.get(k) for k in Hardware.model_fields},
                                    "gpu_uuids": row.get("gpu_uuids") or [], "sources": row.get("sources") or {},
                                    "unknown": row.get("unknown") or {}})


def _slice_findings(engines: dict[str, EngineSummary]) -> list[str]:
    from tasks.telemetry.hardware import slice_findings

    return slice_findings({name: e.hardware.model_dump() for name, e in engines.items() if e.hardware})


def _fairness(summary: RunSummary) -> list[str]:
    """Whether the engines shared a node and GPU UUIDs, up together or in series (tasks/telemetry/hardware.py)."""
    from tasks.telemetry.hardware import fairness_boundary

    placed = {name: e.hardware.model_dump() for name, e in summary.engines.items() if e.ready and e.hardware}
    return fairness_boundary(placed, summary.engine_order)


def _evidence(row: dict[str, Any]) -> CheckEvidence:
    ev = row.get("evidence")
    if isinstance(ev, str):
        try:
            ev = json.loads(ev)
        except ValueError:
            ev = {"excerpt": ev}
    ev = ev if isinstance(ev, dict) else {}
    return CheckEvidence(
        outcome=row.get("outcome"),
        status=ev.get("status"),
        field=ev.get("field"),
        reason=_clip(ev.get("reason")),
        excerpt=_clip(ev.get("excerpt")),
    )


def _clip(text: Any, limit: int = 160) -> str | None:
    if text is None:
        return None
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# ---- run level -----------------------------------------------------------------------------------


def _step_outcomes(run_dir: RunDir) -> dict[str, dict[str, OutcomeSummary]]:
    """Recorded step outcomes by engine ("" for run-level steps): {step: {status, detail}}."""
    out: dict[str, dict[str, OutcomeSummary]] = {}
    for outcome in run_documents.outcomes(run_dir):
        if outcome.step == "report":
            continue  # the report's own outcome: a retried report must rebuild the same bytes
        out.setdefault(outcome.engine or "", {})[outcome.step] = OutcomeSummary(status=outcome.status,
                                                                                detail=outcome.detail)
    return out


def _scenario_settings(cfg: RunConfig) -> ScenarioSettings:
    s = cfg.scenarios
    return ScenarioSettings(
        enabled={name: bool(getattr(s, name).enabled) for name in SCENARIO_SWITCHES},
        warmup=s.warmup,
        rounds={name: getattr(s, name).rounds for name in PERF_SCENARIOS},
        long_context_lengths=list(s.long_context.lengths),
        long_context_depths=list(s.long_context.depths),
        prefix_cache_prompt_tokens=s.prefix_cache.prompt_tokens,
        prefix_cache_repeats=s.prefix_cache.repeats,
        slo=Slo.model_validate(cfg.slo.model_dump(mode="json")),
        cites={key: list(refs) for key, refs in s.cites.items()},
    )


def _not_tested(cfg: RunConfig, engines: dict[str, EngineSummary], run_steps: dict[str, OutcomeSummary],
                has_regressions: bool = False) -> list[NotTested]:
    """What this run did not test, and why: switched off, not applicable, or a step that did not finish."""
    out: list[NotTested] = []
    for name in SCENARIO_SWITCHES:
        if not getattr(cfg.scenarios, name).enabled:
            out.append(NotTested(engine="all", what=f"{name} scenario", why="disabled in the run config"))
    if not cfg.scenarios.warmup:
        out.append(NotTested(engine="all", what="warmup", why="disabled: first-encounter rounds carry JIT costs"))
    for name, e in engines.items():
        if not e.ready:
            # One line for the whole engine; its not-attempted steps all say the same thing.
            out.append(NotTested(engine=name, what="every scenario",
                                 why=f"engine never became ready: {e.ready_detail or 'not deployed'}"))
        for check, ev in e.check_evidence.items():
            if ev.outcome == "not_applicable":
                out.append(NotTested(engine=name, what=f"check {check}", why=ev.reason or "not applicable"))
        for step, st in e.steps.items():
            if st.status == "failed" or (st.status == "not_attempted" and e.ready):
                status = "failed" if st.status == "failed" else "not attempted"
                out.append(NotTested(engine=name, what=f"step {step}", why=f"{status}: {st.detail or ''}"))
    for step, st in run_steps.items():
        if step == "compare" and has_regressions:
            continue  # a comparison that found regressions did test: they have their own table
        if st.status in ("failed", "not_attempted"):
            out.append(NotTested(engine="run", what=f"step {step}", why=f"{st.status}: {st.detail or ''}"))
    return out


def _regressions(run_dir: RunDir) -> list[Regression]:
    rows = [Regression.model_validate({k: r.get(k) for k in Regression.model_fields})
            for r in run_dir.read_rows("regressions")]
    return sorted(rows, key=lambda r: (not r.regressed, str(r.engine), str(r.scenario), str(r.metric)))

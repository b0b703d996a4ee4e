"""The traffic part of an engine's summary, computed once from its tables: per-turn session figures from
`session_turns`, shared-prefix reuse from `shared_prefix_rounds` beside the load figures of its `rounds`,
your own prompts' lengths and cached share from `dataset_rounds`."""

from __future__ import annotations

from typing import Any

from tasks.config import RunConfig
from tasks.report.schema.perf import FirstEncounter
from tasks.report.schema.traffic import (Dataset, DatasetLevel, ReuseFigure, Sessions, SessionsLevel, SharedPrefix,
                                         SharedPrefixLevel, Traffic)
from tasks.state.storage import RunDir


def traffic_summary(run_dir: RunDir, cfg: RunConfig, engine: str, ttft_published: bool,
                    ttft_reason: str | None = None) -> Traffic | None:
    """None when neither traffic scenario ran for the engine. Where its stream timing is not reliable,
    TTFT figures are withheld (PROTOCOL.md, the TTFT rule) and the reason kept."""
    withheld = None if ttft_published else (ttft_reason or "the engine's stream timing was not shown reliable")
    sessions = _sessions(run_dir, cfg, engine, withheld) if cfg.scenarios.sessions.enabled else None
    shared = _shared_prefix(run_dir, engine, withheld) if cfg.scenarios.shared_prefix.enabled else None
    dataset = _dataset(run_dir, engine) if cfg.scenarios.dataset.enabled else None
    if sessions is None and shared is None and dataset is None:
        return None
    return Traffic(sessions=sessions, shared_prefix=shared, dataset=dataset)


def _sessions(run_dir: RunDir, cfg: RunConfig, engine: str, withheld: str | None) -> Sessions | None:
    from tasks.scenarios.sessions import levels, level_turn_figures

    s = cfg.scenarios.sessions
    rows = [r for r in run_dir.read_rows("session_turns", engine) if r.get("scenario") == "sessions"]
    if not rows:
        return None
    out = []
    for lv in levels(s):
        mine = [r for r in rows if r.get("concurrency") == lv.concurrency and r.get("rate_rps") == lv.rate_rps]
        figures = level_turn_figures(mine, s.turns)
        if withheld:
            for t in figures["turns"]:
                t["ttft_median_s"] = t["ttft_median_interval_s"] = None
        out.append(SessionsLevel(concurrency=lv.concurrency, rate_rps=lv.rate_rps, **figures))
    return Sessions(levels=out, ttft_withheld=withheld)


def _shared_prefix(run_dir: RunDir, engine: str, withheld: str | None) -> SharedPrefix | None:
    from tasks.load.plan import Shape
    from tasks.scenarios.shared_prefix import level_reuse

    rows = [r for r in run_dir.read_rows("shared_prefix_rounds", engine) if r.get("scenario") == "shared_prefix"]
    if not rows:
        return None
    every_round = run_dir.read_rows("rounds", engine)
    rounds = [r for r in every_round if r.get("scenario") == "shared_prefix"]
    warmup = [r for r in every_round if r.get("warmup")]
    out = []
    for c in sorted({int(r["concurrency"]) for r in rows}):
        mine = [r for r in rows if r["concurrency"] == c]
        first = mine[0]
        shape = Shape(first["prefix_tokens"] + first["suffix_tokens"], _output_tokens(rounds, c), c)
        reuse = level_reuse(shape, mine, [r for r in rounds if r.get("concurrency") == c and not r.get("warmup")],
                            warmup)
        figures: dict[str, Any] = reuse["figures"]
        out.append(SharedPrefixLevel(
            concurrency=c, input_tokens=shape.input_tokens, output_tokens=shape.output_tokens,
            expected_reuse=reuse["expected_reuse"], usage_hit_rate=reuse["usage_hit_rate"],
            server_hit_rate=reuse["server_hit_rate"],
            ttft_p50_s=None if withheld else figures["ttft_p50_s"]["median"],
            e2e_p50_s=figures["e2e_p50_s"]["median"], output_tps=figures["output_tps"]["median"],
            failed_rounds=reuse["failed_rounds"],
            first_encounter=None if reuse["first_encounter"] is None else FirstEncounter.model_validate(
                {**reuse["first_encounter"], **({"ttft_p95_s": None, "ttft_p99_s": None} if withheld else {})})))
    return SharedPrefix(levels=out, ttft_withheld=withheld)


def _dataset(run_dir: RunDir, engine: str) -> Dataset | None:
    """Per level: lengths from usage and the cached share, medians over the rounds that did not fail."""
    from tasks.stats.intervals import share_t_interval
    from tasks.stats.figures import median

    rows = run_dir.read_rows("dataset_rounds", engine)
    if not rows:
        return None
    out = []
    for key in sorted({(r.get("concurrency"), r.get("rate_rps")) for r in rows},
                      key=lambda k: (float(k[1] or 0), float(k[0] or 0))):
        mine = [r for r in rows if (r.get("concurrency"), r.get("rate_rps")) == key]
        kept = [r for r in mine if r.get("status") != "failed"]

        def over(name: str) -> float | None:
            return median([r[name] for r in kept if r.get(name) is not None])

        shares = [r["usage_hit_rate"] for r in kept if r.get("usage_hit_rate") is not None]
        out.append(DatasetLevel(
            concurrency=key[0], rate_rps=key[1], rows=int(mine[0]["rows_sent"]),
            prompt_tokens_p50=over("prompt_tokens_p50"), completion_tokens_p50=over("completion_tokens_p50"),
            usage_hit_rate=ReuseFigure(median=median(shares), interval=share_t_interval(shares, 0.95) if shares else None,
                                       rounds=len(shares)),
            rounds_cache_cleared=sum(1 for r in mine if r.get("cache_cleared")), rounds=len(mine),
            failed_rounds=len(mine) - len(kept)))
    return Dataset(source=str(rows[0]["source"]), levels=out)


def _output_tokens(rounds: list[dict[str, Any]], concurrency: int) -> int:
    return next((int(r["output_tokens"]) for r in rounds if r.get("concurrency") == concurrency), 0)

"""Speculative decoding off against on: which engines of a run differ in it alone, whether it made any greedy
answer wrong (it must not; an answer that changed and stayed right is a diagnostic), and its acceptance per load
level with a t-interval over rounds (docs/PROTOCOL.md, "Speculative decoding off against on")."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations
from statistics import mean
from typing import Any


from tasks.config import RunConfig
from tasks.engines import adapter_for
from tasks.config.variants import differences
from tasks.quality.agreement import first_divergence
from tasks.stats.intervals import mean_t_interval


def speculative_setting(cfg: RunConfig, engine: str) -> str | None:
    """The engine's speculative-decoding switch as launched ("off" when none is given): its dialect's
    arguments, or a simulated engine's profile; None where DayOne does not read the dialect's switches."""
    spec = cfg.engine(engine)
    if spec.launcher == "sim" and cfg.target == "local":  # a cluster runs the engine's image, whatever the launcher
        planted = (spec.sim_profile or {}).get("speculative")
        return "off" if not planted else f"sim {planted}"
    adapter = adapter_for(spec.dialect)
    if not adapter.speculative_args:
        return None
    return adapter.launch_setting(spec.args, adapter.speculative_args) or "off"


def off_on_pairs(cfg: RunConfig) -> list[tuple[str, str]]:
    """(off, on) engine pairs of one dialect that differ only in their speculative-decoding switch (the
    arguments or profile that carry it, an experiment's variants), in config order."""
    out = []
    for a, b in combinations([e.name for e in cfg.engines], 2):
        sa, sb = speculative_setting(cfg, a), speculative_setting(cfg, b)
        if None in (sa, sb) or sa == sb or "off" not in (sa, sb):
            continue
        spec_a, spec_b = cfg.engine(a), cfg.engine(b)
        differ = {p.split(".")[0] for p in differences(spec_a, spec_b)}
        if spec_a.dialect == spec_b.dialect and differ <= {"args", "sim_profile"}:
            out.append((a, b) if sa == "off" else (b, a))
    return out


def answers_off_on(rows: Iterable[dict[str, Any]], off: str, on: str) -> dict[str, Any]:
    """The items both engines were sent, judged for correctness first: `wrong`, the items answered right with
    the switch off and wrong with it on (a fault: at greedy decoding speculative decoding must not make an
    answer wrong); `not_checked`, the items whose off answer is empty or failed (a reasoning model that spent its
    max_tokens thinking: nothing to hold the on answer against, never "identical"); `items`, the others, checked;
    `changed`, a diagnostic among those: item -> where the two answer texts part (an answer that changed and is
    still right is no fault: kernels may part after some tokens)."""
    answers: dict[str, dict[tuple[str, str], tuple[str, bool]]] = {off: {}, on: {}}
    for r in rows:
        if r["engine"] in answers:
            text = r.get("answer") if r.get("status") == "ok" else None
            answers[r["engine"]][(r["item_id"], r["prompt_sha256"])] = (text or "", bool(r.get("correct")))
    shared = sorted(answers[off].keys() & answers[on].keys())
    not_checked = [k for k in shared if not answers[off][k][0]]
    checked = [k for k in shared if answers[off][k][0]]
    parted = {k[0]: first_divergence(answers[off][k][0], answers[on][k][0]) for k in checked}
    return {"off": off, "on": on, "items": len(checked),
            "wrong": [k[0] for k in checked if answers[off][k][1] and not answers[on][k][1]],
            "not_checked": [k[0] for k in not_checked],
            "changed": {item: at for item, at in parted.items() if at is not None}}


def _mean_interval(values: list[float], confidence: float) -> tuple[float | None, float | None]:
    found = mean_t_interval(values, confidence)
    return (None, None) if found is None else (found[1], found[2])


def acceptance_by_level(rows: Iterable[dict[str, Any]], confidence: float) -> list[dict[str, Any]]:
    """Per scenario and load level of the measured `engine_rounds` rows with drafts: the mean acceptance
    rate and accepted length (tokens per verification step) over rounds, each with its t-interval."""
    levels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("warmup") or r.get("spec_acceptance_rate") is None:
            continue
        level = f"c={r['concurrency']}" if r.get("concurrency") is not None else f"{r.get('rate_rps')} req/s"
        levels.setdefault((str(r["scenario"]), level), []).append(r)
    out = []
    for (scenario, level), group in sorted(levels.items()):
        rates = [float(r["spec_acceptance_rate"]) for r in group]
        lengths = [float(r["spec_mean_accepted_length"]) for r in group
                   if r.get("spec_mean_accepted_length") is not None]
        rate_low, rate_high = _mean_interval(rates, confidence)
        length_low, length_high = _mean_interval(lengths, confidence)
        out.append({"scenario": scenario, "level": level, "rounds": len(group), "acceptance_rate": mean(rates),
                    "acceptance_rate_low": None if rate_low is None else max(0.0, rate_low),
                    "acceptance_rate_high": None if rate_high is None else min(1.0, rate_high),
                    "accepted_length": mean(lengths) if lengths else None,
                    "accepted_length_low": length_low, "accepted_length_high": length_high,
                    "confidence": confidence})
    return out

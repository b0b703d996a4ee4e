"""summary.json's `parity`: the engines' answers compared item by item, their greedy agreement, and
their NLL by length with its findings, from the `quality` and `loglik` rows (tasks/quality/)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasks.config import RunConfig
from tasks.quality.agreement import greedy_agreement
from tasks.quality.loglik import nll_findings
from tasks.quality.parity import answer_parity
from tasks.report.schema.parity import FamilyParity, GreedyAgreement, NllFinding, NllPoint, Parity
from tasks.state.storage import RunDir


def build_parity(run_dir: RunDir, cfg: RunConfig, confidence: float,
                 weights: Sequence[dict[str, Any]] = ()) -> Parity | None:
    """None when no engine ran the quality step. Engines that served different weights (`weights`, the
    pairs of tasks/evidence/revision.py `weights_pairs`) are not held against each other: a gap between
    them would be the weights', not the engines'."""
    names = [e.name for e in cfg.engines]
    answers = [r for n in names for r in run_dir.read_rows("quality", n)]
    loglik = [r for n in names for r in run_dir.read_rows("loglik", n)]
    if not answers and not loglik:
        return None
    tolerance = cfg.scenarios.quality.nll_tolerance
    apart = [p for p in weights if p["verdict"] == "differ"]
    kept = {frozenset((p["a"], p["b"])) for p in apart}

    def compared(pair: dict[str, Any]) -> bool:
        return frozenset((pair["a"], pair["b"])) not in kept

    findings = [f for group in _same_weights_groups(names, kept)
                for f in nll_findings([r for r in loglik if r.get("engine") in group], tolerance)]
    return Parity(
        answers=[FamilyParity.model_validate(p) for p in answer_parity(answers, names, confidence) if compared(p)],
        agreement=[GreedyAgreement.model_validate(g) for g in greedy_agreement(answers, names) if compared(g)],
        nll=[NllPoint.model_validate({k: r.get(k) for k in NllPoint.model_fields}) for r in loglik],
        nll_tolerance=tolerance if loglik else None,
        nll_findings=[NllFinding.model_validate(f) for f in findings],
        not_compared=[f"{p['a']} and {p['b']}: {p['text']}" for p in apart],
    )


def _same_weights_groups(names: list[str], apart: set[frozenset[str]]) -> list[list[str]]:
    """The engines in groups none of whose members served weights different from another's: the NLL
    findings hold an engine against the others of its group only."""
    groups: list[list[str]] = []
    for name in names:
        home = next((g for g in groups if all(frozenset((name, m)) not in apart for m in g)), None)
        if home is None:
            groups.append([name])
        else:
            home.append(name)
    return groups

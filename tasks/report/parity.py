"""summary.json's `parity`: the engines' answers compared item by item, their greedy agreement, and
their NLL by length with its findings, from the `quality` and `loglik` rows (tasks/quality/)."""

from __future__ import annotations

from tasks.config import RunConfig
from tasks.quality.agreement import greedy_agreement
from tasks.quality.loglik import nll_findings
from tasks.quality.parity import answer_parity
from tasks.report.schema.parity import FamilyParity, GreedyAgreement, NllFinding, NllPoint, Parity
from tasks.state.storage import RunDir


def build_parity(run_dir: RunDir, cfg: RunConfig, confidence: float) -> Parity | None:
    """None when no engine ran the quality step."""
    names = [e.name for e in cfg.engines]
    answers = [r for n in names for r in run_dir.read_rows("quality", n)]
    loglik = [r for n in names for r in run_dir.read_rows("loglik", n)]
    if not answers and not loglik:
        return None
    tolerance = cfg.scenarios.quality.nll_tolerance
    return Parity(
        answers=[FamilyParity.model_validate(p) for p in answer_parity(answers, names, confidence)],
        agreement=[GreedyAgreement.model_validate(g) for g in greedy_agreement(answers, names)],
        nll=[NllPoint.model_validate({k: r.get(k) for k in NllPoint.model_fields}) for r in loglik],
        nll_tolerance=tolerance if loglik else None,
        nll_findings=[NllFinding.model_validate(f) for f in nll_findings(loglik, tolerance)],
    )

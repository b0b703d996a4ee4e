"""summary.json's `speculative`: each off/on pair of the run, the greedy answers speculative decoding
made wrong (and changed, a diagnostic; those not checked) and the on engine's acceptance per level (tasks/quality/speculative.py)."""

from __future__ import annotations

from tasks.config import RunConfig
from tasks.quality.speculative import acceptance_by_level, answers_off_on, off_on_pairs, speculative_setting
from tasks.report.schema.speculative import Acceptance, OffOnPair, Speculative
from tasks.state.storage import RunDir


def build_speculative(run_dir: RunDir, cfg: RunConfig, confidence: float) -> Speculative | None:
    """None when no two engines of the run differ in speculative decoding alone."""
    pairs = off_on_pairs(cfg)
    if not pairs:
        return None
    out = []
    for off, on in pairs:
        answers = run_dir.read_rows("quality", off) + run_dir.read_rows("quality", on)
        judged = answers_off_on(answers, off, on)
        out.append(OffOnPair(off=off, on=on, on_setting=speculative_setting(cfg, on) or "", items=judged["items"],
                             wrong=judged["wrong"], changed=judged["changed"], not_checked=judged["not_checked"],
                             acceptance=[Acceptance.model_validate(a) for a in
                                         acceptance_by_level(run_dir.read_rows("engine_rounds", on), confidence)]))
    return Speculative(pairs=out)

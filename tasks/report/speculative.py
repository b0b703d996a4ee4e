"""summary.json's `speculative`: each off/on pair of the run, the greedy answers speculative decoding
changed and the on engine's acceptance per level (tasks/quality/speculative.py)."""

from __future__ import annotations

from tasks.config import RunConfig
from tasks.quality.speculative import acceptance_by_level, changed_answers, off_on_pairs, speculative_setting
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
        changed = changed_answers(answers, off, on)
        out.append(OffOnPair(off=off, on=on, on_setting=speculative_setting(cfg, on) or "", items=changed["items"],
                             changed=changed["changed"],
                             acceptance=[Acceptance.model_validate(a) for a in
                                         acceptance_by_level(run_dir.read_rows("engine_rounds", on), confidence)]))
    return Speculative(pairs=out)

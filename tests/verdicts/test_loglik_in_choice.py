"""Log-likelihood findings are answers (issue 43, item 4), against servers written for the test that score the
fixed text's prompt log-probabilities: an engine whose NLL lies above the other's (a gap) or rises with depth
where the other's does not is dropped on the answers criterion, its speed lead notwithstanding."""

from __future__ import annotations

import pytest
from answers_summary import throughput_comparison
from loglik_server import DriftsWithDepth, OffsetsLogprobs, ScoresPrompts
from plain_server import MODEL
from verdict_runs import PURPOSES

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.loglik import run_loglik
from tasks.quality.run import run_quality
from tasks.report import build_summary
from tasks.report.choice import choose
from tasks.state.storage import RunDir


@pytest.mark.parametrize(("faulty", "kind"), [(OffsetsLogprobs, "gap"), (DriftsWithDepth, "depth")])
def test_an_nll_finding_drops_the_faster_engine_on_answers(faulty, kind, tmp_path):
    config = parse_run_config({
        "run_id": "nll-choice", "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "sound", "dialect": "vllm"}, {"name": "fast", "dialect": "vllm"}],
        "scenarios": {"quality": {"enabled": True, "items_per_family": 2, "kv_context_tokens": [64],
                                  "nll_lengths_tokens": [64, 256, 1024], "nll_tolerance": 0.05},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30, "choice": {"purposes": PURPOSES},
    })
    run_dir = RunDir("nll-choice", root=tmp_path)
    for name, server_cls in (("sound", ScoresPrompts), ("fast", faulty)):
        with server_cls() as server:
            ctx = EngineContext(config, endpoint_for(config, name, server.url, "sha256:" + "0" * 64), run_dir)
            run_quality(ctx)  # every item right on both: the log-likelihood alone tells them apart
            run_loglik(ctx)
    summary = build_summary(run_dir, config)
    for engine in summary.engines.values():
        engine.ready = True  # served from the start: readiness is not what these servers test
    assert {f.kind for f in summary.parity.nll_findings if f.engine == "fast"} >= {kind}
    assert not any(p.only_a_right or p.only_b_right for p in summary.parity.answers)
    summary.comparisons = [throughput_comparison("fast", "sound")]  # fast is faster, detectably
    choices = choose(summary, config.choice.orders())
    assert [c.picked for c in choices] == [["sound"], ["sound"]], choices
    against = [r for r in choices[0].reasons if r.engine == "fast"]
    assert {r.criterion for r in against} == {"answers"}, against
    assert any(f"NLL {kind} at" in r.text for r in against), [r.text for r in against]

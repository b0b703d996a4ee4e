"""The run's "not proved" list says what the answer checks covered (docs/PROTOCOL.md, "Answers"): the
generated families at their context lengths, at greedy decoding, and not the user's own prompts; or,
when the quality step did not run, that answers were not checked."""

from __future__ import annotations

from plain_server import MODEL
from quality_server import SolvesEverything

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.items import FAMILIES
from tasks.quality.run import run_quality
from tasks.report.limits import not_proved
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir


def _limits(tmp_path, quality_on: bool) -> list[str]:  # noqa: ANN001
    config = parse_run_config({
        "run_id": "limits-run",
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "plain", "dialect": "vllm"}],
        "scenarios": {"quality": {"enabled": quality_on, "items_per_family": 4, "kv_context_tokens": [64, 256],
                                  "seed": 5},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })
    run_dir = RunDir("limits-run", root=tmp_path)
    if quality_on:
        with SolvesEverything() as server:
            run_quality(EngineContext(config, endpoint_for(config, "plain", server.url, "sha256:" + "0" * 64),
                                      run_dir))
    summary = build_summary(run_dir, config)
    summary.engines["plain"].ready = True  # the limits are of engines that served; readiness is not this test's
    return not_proved(config, summary)


def test_a_run_that_checked_answers_says_what_they_covered_and_what_not(tmp_path):
    (line,) = [t for t in _limits(tmp_path, True) if t.startswith("Answers")]
    assert line.startswith("Answers were checked for plain on a generated task set (" + ", ".join(sorted(FAMILIES))
                           + "; key-value retrieval at 64, 256 tokens; 4 items per family, seed 5) at greedy "
                           "decoding"), line
    assert "not the user's own prompts" in line and "not open-ended quality" in line


def test_a_run_without_the_quality_step_says_answers_were_not_checked(tmp_path):
    (line,) = [t for t in _limits(tmp_path, False) if t.startswith("Answers")]
    assert line.startswith("Answers were not checked (scenarios.quality is off)"), line

"""The choice by purpose (docs/PROTOCOL.md, "The choice by purpose"): answers measured from plain servers
(one answers everything right, one corrupts half the arithmetic), the other evidence set as the summary
states it. Answers and failed requests outrank speed for every purpose; functional checks outrank speed
for a production API and not for throughput research."""

from __future__ import annotations

from answers_summary import answers_summary, throughput_comparison
from quality_server import CorruptsHalfTheArithmetic, SolvesEverything

from tasks.report.choice import choose
from tasks.report.html import render_html
from tasks.report.schema.perf import PerfLevel, ScenarioResults

PURPOSES = {"production_api": ("answers", "failed_requests", "functional_checks", "stability", "latency",
                               "throughput", "capacity"),
            "throughput_research": ("answers", "failed_requests", "throughput", "capacity", "latency", "stability",
                                    "functional_checks")}


def _summary(tmp_path, servers, purposes=None):  # noqa: ANN001 (engine name -> server class)
    summary, config = answers_summary(tmp_path, servers, "choice-run", purposes)
    for engine in summary.engines.values():
        engine.ready = True  # served from the start: readiness is not what these servers test
    return summary, config


def _measured(ok: int, failed: int) -> dict[str, ScenarioResults]:
    level = PerfLevel(label="c=4", concurrency=4, rate_rps=None, rounds=[1, 2], round_status=["ok", "ok"],
                      first_encounter_rounds=[], figures={}, first_encounter=None, rounds_failed=0,
                      requests_failed=failed, requests_ok=ok, length_deviations=0)
    return {"short": ScenarioResults(input_tokens=64, output_tokens=16, levels=[level])}


def _picked(summary, config) -> dict[str, list[str]]:  # noqa: ANN001
    return {c.purpose: c.picked for c in choose(summary, config.choice.orders())}


def test_the_faster_engine_with_worse_answers_is_picked_for_no_purpose(tmp_path):
    summary, config = _summary(tmp_path, {"right": SolvesEverything, "fast": CorruptsHalfTheArithmetic})
    summary.comparisons = [throughput_comparison("fast", "right")]
    choices = choose(summary, config.choice.orders())
    assert {c.purpose: c.picked for c in choices} == {"production_api": ["right"], "throughput_research": ["right"]}
    research = choices[1]
    assert research.text == "For throughput research: right."
    assert [r.criterion for r in research.reasons if r.stance == "for"] == ["answers"]
    against = next(r for r in research.reasons if r.engine == "right" and r.stance == "against")
    assert against.criterion == "throughput" and "outranked: fast was dropped on answers" in against.text
    assert against.section == "comparison" and research.reasons[0].section == "quality"
    html = render_html(summary.model_copy(update={"choices": choices}))
    assert "Choice by purpose" in html and "href='#quality'" in html and "For production api: right." in html


def test_engines_that_answer_alike_are_told_apart_by_speed(tmp_path):
    summary, config = _summary(tmp_path, {"right": SolvesEverything, "also-right": SolvesEverything})
    summary.comparisons = [throughput_comparison("also-right", "right")]
    assert _picked(summary, config) == {"production_api": ["also-right"], "throughput_research": ["also-right"]}
    summary.comparisons = []  # nothing detected: the evidence does not tell them apart
    choices = choose(summary, config.choice.orders())
    assert choices[0].picked == ["right", "also-right"] and "no engine stands out" in choices[0].text


def test_functional_checks_outrank_speed_for_a_production_api_and_not_for_throughput_research(tmp_path):
    # The Day-1 report's choice: the engine whose reasoning split failed is faster; a production API takes
    # the other, throughput research keeps tracking the faster one.
    summary, config = _summary(tmp_path, {"sglang": SolvesEverything, "vllm": SolvesEverything})
    summary.comparisons = [throughput_comparison("vllm", "sglang")]
    summary.engines["sglang"].checks = {"reasoning_split": "pass", "streaming": "pass"}
    summary.engines["vllm"].checks = {"reasoning_split": "fail", "streaming": "pass"}
    assert _picked(summary, config) == {"production_api": ["sglang"], "throughput_research": ["vllm"]}


def test_failed_requests_outrank_speed_for_every_purpose_own_included(tmp_path):
    own = [{"name": "batch_jobs", "order": ["throughput"]}]
    summary, config = _summary(tmp_path, {"steady": SolvesEverything, "flaky": SolvesEverything},
                               ["throughput_research", *own])
    summary.comparisons = [throughput_comparison("flaky", "steady")]
    summary.engines["steady"].perf, summary.engines["flaky"].perf = _measured(200, 0), _measured(150, 50)
    assert _picked(summary, config) == {"throughput_research": ["steady"], "batch_jobs": ["steady"]}
    # A few failures the interval cannot tell from none do not outrank a detected speed lead.
    summary.engines["flaky"].perf = _measured(199, 1)
    assert _picked(summary, config) == {"throughput_research": ["flaky"], "batch_jobs": ["flaky"]}


def test_restarts_outrank_speed_for_a_production_api_and_rounds_that_spread_drop_no_engine(tmp_path):
    from tasks.report.schema.perf import Figure

    summary, config = _summary(tmp_path, {"calm": SolvesEverything, "restarts": SolvesEverything})
    summary.comparisons = [throughput_comparison("restarts", "calm")]
    summary.engines["restarts"].restarts = summary.engines["restarts"].restarts.model_copy(update={"total": 2})
    assert _picked(summary, config) == {"production_api": ["calm"], "throughput_research": ["restarts"]}
    summary.engines["restarts"].restarts = summary.engines["calm"].restarts
    summary.engines["restarts"].perf = _measured(200, 0)
    level = summary.engines["restarts"].perf["short"].levels[0]
    level.figures["output_tps"] = Figure(median=100.0, rounds=[60.0, 140.0], spread=True)
    choices = choose(summary, config.choice.orders())
    assert [c.picked for c in choices] == [["restarts"], ["restarts"]]
    caveat = next(r for r in choices[0].reasons if r.engine == "restarts" and r.criterion == "stability")
    assert caveat.stance == "against" and "never a reason to drop" in caveat.text and "spread" in caveat.text


def test_speed_that_went_both_ways_picks_neither_and_names_the_mixed_intervals(tmp_path):
    summary, config = _summary(tmp_path, {"sglang": SolvesEverything, "vllm": SolvesEverything})
    faster_at_4 = throughput_comparison("vllm", "sglang")
    slower_at_16 = throughput_comparison("vllm", "sglang", "worse").model_copy(update={"level": "c=16"})
    summary.comparisons = [faster_at_4, slower_at_16]
    choices = choose(summary, config.choice.orders())
    assert [c.picked for c in choices] == [["sglang", "vllm"], ["sglang", "vllm"]]
    mixed = [r for r in choices[1].reasons if r.stance == "mixed"]
    assert [(r.engine, r.criterion) for r in mixed] == [("vllm", "throughput")]
    assert "at c=4 better 1.50×" in mixed[0].text and "at c=16 worse 0.60×" in mixed[0].text, mixed[0].text
    page = render_html(summary.model_copy(update={"choices": choices}))
    assert "mixed vllm" in page and "went both ways" in page

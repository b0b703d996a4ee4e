"""Maturity in the choice by purpose (docs/PROTOCOL.md, "The choice by purpose"): the Day-1 report's production
pick. Two engines pass the same checks and the faster one runs a preview image: production takes the release
engine and says why, throughput research may take the faster one, and a run that overrides maturity says so.
The summary is built from a run directory like any run's; what the engines measured is set as the summary
states it."""

from __future__ import annotations

from tasks.config import parse_run_config
from tasks.config.maturity import engine_maturity, read_version
from tasks.report.choice import choose
from tasks.report.html import render_html
from tasks.report.schema.comparison import Comparison
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir

UPSTREAM = "https://github.com/vllm-project/vllm/pull/99999"


def _summary(tmp_path, engines, **choice):  # noqa: ANN001
    config = parse_run_config({"run_id": "maturity-run", "model": {"name": "m"},
                               "engines": engines, **({"choice": choice} if choice else {})})
    summary = build_summary(RunDir("maturity-run", root=tmp_path), config)
    for e in summary.engines.values():
        e.ready = True
        e.checks = {"chat": "pass", "streaming": "pass", "tool_call": "pass"}
    # the preview engine detectably faster than the release one
    summary.comparisons = [Comparison(scenario="decode", level="c=8", figure="output_tps", base="sglang",
                                      engine="vllm", ratio=1.4, low=1.25, high=1.55, confidence=0.95,
                                      verdict="better", detectable=0.1, rounds_needed_for_5pct=12)]
    return summary, config


ENGINES = [{"name": "sglang", "dialect": "sglang", "image": "lmsysorg/sglang:v0.5.4"},
           {"name": "vllm", "dialect": "vllm", "image": "vllm/vllm-openai:glm53-preview", "upstream": UPSTREAM}]


def test_production_takes_the_release_engine_over_a_faster_preview_and_research_takes_the_faster(tmp_path):
    summary, config = _summary(tmp_path, ENGINES)
    assert summary.engines["vllm"].maturity.maturity == "preview"  # read from the tag's word
    assert summary.engines["sglang"].maturity.maturity == "release"  # a plain version tag
    production, research = choose(summary, config.choice.orders())
    assert production.picked == ["sglang"] and research.picked == ["vllm"]
    assert production.text == "For production api: sglang."
    against = next(r for r in production.reasons if r.engine == "vllm" and r.criterion == "maturity")
    assert against.stance == "against" and against.section == "engines"
    assert against.text.startswith("maturity: vllm is a preview (read from its image tag `glm53-preview`")
    assert UPSTREAM in against.text and "whatever the preview's speed" in against.text, against.text
    # the speed lead is still shown, as evidence the maturity outranked
    outranked = next(r for r in production.reasons if r.engine == "sglang" and r.criterion == "throughput")
    assert "outranked: vllm was dropped on maturity" in outranked.text
    assert not [r for r in research.reasons if r.criterion == "maturity"]  # experiments: unchanged
    page = render_html(summary.model_copy(update={"choices": [production, research]}))
    assert "whatever the preview&#39;s speed" in page and f"href='{UPSTREAM}'" in page


def test_a_preview_that_passed_a_check_the_release_failed_is_not_dropped_on_maturity(tmp_path):
    summary, config = _summary(tmp_path, ENGINES, purposes=[{"name": "maturity_only", "order": ["maturity"]}])
    summary.engines["sglang"].checks = {**summary.engines["sglang"].checks, "tool_call": "not_applicable"}
    (choice,) = choose(summary, config.choice.orders())
    assert choice.picked == ["sglang", "vllm"]  # the release does not pass the same checks


def test_a_declared_maturity_wins_over_the_image_and_the_disagreement_is_shown(tmp_path):
    engines = [ENGINES[0], {**ENGINES[1], "maturity": "release"}]
    summary, config = _summary(tmp_path, engines)
    vllm = summary.engines["vllm"].maturity
    assert (vllm.maturity, vllm.source, vllm.image) == ("release", "declared in the config", "preview")
    assert "its image tag `glm53-preview` says preview" in vllm.disagreement
    assert [c.picked for c in choose(summary, config.choice.orders())] == [["vllm"], ["vllm"]]
    assert "the sources disagree" in render_html(summary)


def test_an_override_for_one_run_keeps_the_faster_preview_and_the_report_names_it(tmp_path):
    summary, config = _summary(tmp_path, ENGINES, maturity_override="the team accepts the preview for a pilot")
    production, _ = choose(summary, config.choice.orders())
    assert production.picked == ["vllm"]
    named = next(r for r in production.reasons if r.criterion == "maturity")
    assert named.engine == "vllm" and named.stance == "for"
    assert "overridden (the team accepts the preview for a pilot)" in named.text
    page = render_html(summary.model_copy(update={"choices": [production]}))
    assert "overridden" in page and "the team accepts the preview for a pilot" in page


def test_tag_words_and_version_labels():
    assert read_version("v0.11.0rc1") == ("preview", "rc")
    assert read_version("nightly-20260101") == ("nightly", "nightly")
    assert read_version("0.6.0.dev12+g1a2b") == ("dev", "dev")
    assert read_version("v0.5.4-cu128") == ("release", "v0.5.4-cu128")
    assert read_version("latest") is None and read_version("cuda12-devel") is None
    # a tag and a label that disagree: the less mature is taken, and the disagreement named
    found = engine_maturity(None, "glm-preview", "0.11.0")
    assert found["maturity"] == "preview" and "label org.opencontainers.image.version=`0.11.0` says release" in \
        found["disagreement"]
    assert engine_maturity(None, "latest", None)["maturity"] is None

"""Answer parity, greedy agreement and log-likelihood parity against servers written for the test
(docs/PROTOCOL.md, "Answer parity", "Log-likelihood parity"): the verdicts find exactly the planted
differences, and none on the clean pair."""

from __future__ import annotations

import pytest
from loglik_server import DriftsWithDepth, OffsetsLogprobs, ScoresPrompts, sound_logprob, tokens_of
from plain_server import MODEL
from quality_server import MissesProducts, MissesProductsAndThreeSums, SolvesEverything

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.agreement import first_divergence
from tasks.quality.loglik import fixed_text, run_loglik
from tasks.quality.run import run_quality
from tasks.report.decision import decide
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir
from tasks.stats.intervals import newcombe
from tasks.state.tables import to_frame
from tasks.publish.validate import validate_frames

ITEMS_PER_FAMILY = 12  # 4 products among the arithmetic items: enough shared misses for pairing to matter
NLL_LENGTHS = [64, 256, 1024]


def _config(engines: dict[str, str]):  # noqa: ANN202 (engine name -> dialect)
    return parse_run_config({
        "run_id": "parity-run",
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": name, "dialect": dialect} for name, dialect in engines.items()],
        "scenarios": {"quality": {"enabled": True, "items_per_family": ITEMS_PER_FAMILY, "kv_context_tokens": [64],
                                  "nll_lengths_tokens": NLL_LENGTHS, "nll_tolerance": 0.05},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })


def _run(tmp_path, servers, dialects=None):  # noqa: ANN001 (engine name -> server class)
    config = _config({name: (dialects or {}).get(name, "vllm") for name in servers})
    run_dir = RunDir("parity-run", root=tmp_path)
    running = {}
    for name, server_cls in servers.items():
        with server_cls() as server:
            ctx = EngineContext(config, endpoint_for(config, name, server.url, "sha256:" + "0" * 64), run_dir)
            run_quality(ctx)
            run_loglik(ctx)
            running[name] = server
    return running, build_summary(run_dir, config), run_dir


def test_a_clean_pair_has_no_detectable_difference_and_agrees_on_every_answer(tmp_path):
    _, summary, _ = _run(tmp_path, {"a": SolvesEverything, "b": SolvesEverything})
    parity = summary.parity
    assert parity.answers and {p.verdict for p in parity.answers} == {"no detectable difference"}
    assert all(p.worse is None and not p.only_a_right and not p.only_b_right for p in parity.answers)
    [agreement] = parity.agreement
    assert agreement.identical_share == 1.0 and agreement.first_divergence_chars == {}
    assert not any("Answers differ" in d.text for d in decide(summary))


def test_a_planted_share_is_found_by_the_paired_verdict_where_the_unpaired_rule_misses_it(tmp_path):
    servers, summary, _ = _run(tmp_path, {"sound": MissesProducts, "fast": MissesProductsAndThreeSums})
    differ = [p for p in summary.parity.answers if p.verdict == "answers differ"]
    assert [(p.family, p.worse) for p in differ] == [("arithmetic", "fast")]
    [arithmetic] = differ
    planted = servers["fast"].sums_corrupted
    assert len(arithmetic.only_a_right) == len(planted) == 3 and arithmetic.only_b_right == []
    assert arithmetic.neither_right == 4  # the shared misses: what pairing uses and the unpaired rule cannot
    right_fast = arithmetic.both_right
    right_sound = arithmetic.both_right + 3
    low, high = newcombe(right_fast, arithmetic.items, right_sound, arithmetic.items, arithmetic.confidence)
    assert low < 0 < high  # the unpaired interval of the same counts finds nothing
    assert arithmetic.low > 0  # the paired one excludes 0
    leads = [d.text for d in decide(summary) if d.topic == "leads"]
    assert leads[0].startswith("Answers differ: fast answered worse in arithmetic"), leads
    assert all(item in leads[0] for item in arithmetic.only_a_right), leads[0]
    [agreement] = summary.parity.agreement
    assert sorted(agreement.first_divergence_chars) == sorted(arithmetic.only_a_right)
    assert agreement.identical == agreement.items - 3


def test_first_divergence_is_the_first_differing_character():
    assert first_divergence("1234", "1234") is None
    assert first_divergence("1234", "1244") == 2
    assert first_divergence("12", "123") == 2


def test_nll_is_the_mean_of_the_prompt_logprobs_in_both_dialects_and_an_offset_is_found_on_its_engine(tmp_path):
    _, summary, run_dir = _run(tmp_path, {"sound": ScoresPrompts, "offset": OffsetsLogprobs},
                               dialects={"offset": "sglang"})
    points = {(p.engine, p.length_tokens): p for p in summary.parity.nll}
    for length in NLL_LENGTHS:
        tokens = tokens_of(fixed_text(0, length))
        truth = -sum(sound_logprob(t) for t in tokens[1:]) / (len(tokens) - 1)
        assert points[("sound", length)].mean_nll_nats == pytest.approx(truth, abs=1e-9)
        assert points[("offset", length)].mean_nll_nats == pytest.approx(truth + OffsetsLogprobs.offset_nats,
                                                                           abs=1e-9)
        assert points[("sound", length)].prompt_tokens == len(tokens)
    found = [(f.engine, f.kind, f.length_tokens) for f in summary.parity.nll_findings]
    assert found == [("offset", "gap", n) for n in NLL_LENGTHS], found
    frames = {"loglik": to_frame("loglik", [r for e in ("sound", "offset") for r in run_dir.read_rows("loglik", e)])}
    assert validate_frames(frames)["loglik"]["success"]


def test_a_rise_with_depth_on_one_engine_is_named_with_its_lengths_and_not_at_the_shortest(tmp_path):
    _, summary, _ = _run(tmp_path, {"sound": ScoresPrompts, "deep": DriftsWithDepth})
    found = {(f.engine, f.kind, f.length_tokens) for f in summary.parity.nll_findings}
    assert {f[0] for f in found} == {"deep"}
    assert ("deep", "depth", 1024) in found and ("deep", "depth", 256) in found
    assert not any(length == NLL_LENGTHS[0] for _, _, length in found)  # too shallow to part at 64 tokens


def test_a_dialect_without_prompt_logprobs_is_not_applicable_with_the_reason(tmp_path):
    _, summary, _ = _run(tmp_path, {"sound": ScoresPrompts, "llama": ScoresPrompts}, dialects={"llama": "llamacpp"})
    llama = [p for p in summary.parity.nll if p.engine == "llama"]
    assert [p.status for p in llama] == ["not_applicable"] * len(NLL_LENGTHS)
    assert "refuses echo" in llama[0].reason and summary.parity.nll_findings == []


def test_nll_and_the_paired_rows_fail_validation_when_broken(tmp_path):
    _, _, run_dir = _run(tmp_path, {"sound": ScoresPrompts})
    rows = run_dir.read_rows("loglik", "sound")
    broken = [*rows[1:], {**rows[0], "status": "maybe", "mean_nll_nats": -1.0}]
    failed = {f["expectation"] for f in validate_frames({"loglik": to_frame("loglik", broken)})["loglik"]["failed"]}
    assert {"expect_column_values_to_be_in_set", "expect_column_values_to_be_between"} <= failed, failed


def test_the_report_lists_the_differing_items_the_agreement_and_the_nll_finding(tmp_path):
    from tasks.report.html import render_html

    servers, summary, _ = _run(tmp_path, {"sound": MissesProducts, "fast": MissesProductsAndThreeSums})
    page = render_html(summary, charts={})
    assert "<h2 id='parity'>Answer and log-likelihood parity</h2>" in page
    [arithmetic] = [p for p in summary.parity.answers if p.worse]
    assert f"right on sound only: {', '.join(arithmetic.only_a_right)}" in page
    assert "legitimately part after some tokens" in page
    _, offset, _ = _run(tmp_path / "nll", {"sound": ScoresPrompts, "offset": OffsetsLogprobs})
    page = render_html(offset, charts={})
    assert "<span class='badge fail'>NLL gap</span> offset&#39;s NLL at 1,024 tokens" in page


def test_not_proved_says_which_engines_log_likelihood_covered_and_which_had_none(tmp_path):
    from tasks.report.limits import not_proved

    _, summary, _ = _run(tmp_path, {"sound": ScoresPrompts, "llama": ScoresPrompts}, dialects={"llama": "llamacpp"})
    for engine in summary.engines.values():
        engine.ready = True  # the limits are of engines that served; readiness is not this test's
    line = next(t for t in not_proved(_config({"sound": "vllm", "llama": "llamacpp"}), summary)
                if t.startswith("Answers were checked"))
    assert "Log-likelihood parity compared sound on one generated text at 64, 256, 1,024 tokens; not for llama " \
           "(llama.cpp's server scores generated tokens only" in line, line

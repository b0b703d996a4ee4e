"""summary.json and the decision summary follow PROTOCOL.md section 5, checked against the run's own tables."""

from __future__ import annotations

import json

import pytest

from tasks.stats import figures as stats


@pytest.fixture(scope="module")
def summary(sim_run):
    from tasks.report import build_summary

    return build_summary(sim_run.run_dir(), sim_run.cfg())


def test_every_figure_is_the_median_of_its_round_values_with_a_spread_flag(sim_run, summary):
    rounds = sim_run.run_dir().read_rows("rounds")
    checked = 0
    for engine in ("sim-sglang", "sim-vllm"):
        for scenario, perf in summary.engines[engine].perf.items():
            for level in perf.levels:
                mine = sorted((r for r in rounds if r["engine"] == engine and r["scenario"] == scenario
                               and r["concurrency"] == level.concurrency and not r.get("warmup")),
                              key=lambda r: r["round"])
                assert len(mine) == sim_run.config["scenarios"][scenario]["rounds"] == len(level.rounds)
                for figure, f in level.figures.items():
                    values = [r[figure] for r in mine]
                    assert f.rounds == pytest.approx(values)
                    assert f.median == pytest.approx(stats.median(values))
                    assert f.spread == stats.spread_flag(values)
                    checked += 1
    assert checked > 50



def test_a_levels_figures_are_kept_once_from_the_rounds_table(sim_run, summary):
    """The performance step keeps how it measured (design, launches, restarts), not figures of its own:
    summary.json's levels are computed once, from the rounds table archived beside it."""
    from tasks.state import documents as run_documents

    kept = 0
    for engine, e in summary.engines.items():
        for scenario, perf in e.perf.items():
            doc = sim_run.run_dir().read_json(run_documents.perf_summary_doc(engine, scenario))
            assert doc is not None and {"design", "launches", "engine_restarted"} <= set(doc)
            assert "levels" not in doc, f"{engine} {scenario}: the step kept figures beside summary.json's"
            assert perf.levels
            kept += 1
    assert kept >= 4

def test_first_encounter_tail_sits_beside_the_headline(sim_run, summary):
    rounds = sim_run.run_dir().read_rows("rounds", "sim-sglang")
    for level in summary.engines["sim-sglang"].levels("short"):
        first = [r for r in rounds if r["scenario"] == "short" and r["concurrency"] == level.concurrency
                 and r["first_encounter"]]
        assert first, "the first round of a new shape is flagged"
        assert level.first_encounter.round == first[0]["round"]
        assert level.first_encounter.ttft_p95_s == pytest.approx(first[0]["ttft_p95_s"])
        assert level.first_encounter.ttft_p99_s == pytest.approx(first[0]["ttft_p99_s"])


def test_unreliable_ttft_is_not_published_only_e2e_with_the_reason(summary):
    vllm, sglang = summary.engines["sim-vllm"], summary.engines["sim-sglang"]
    assert vllm.ttft.reliable is False and "echo=false" in vllm.ttft.reason
    assert sglang.ttft.reliable is True
    for perf in vllm.perf.values():
        for level in perf.levels:
            assert not [k for k in level.figures if k.startswith(("ttft_", "tpot_", "itl_"))]
            assert level.figures["e2e_p95_s"].median is not None
            assert level.first_encounter is not None
            assert level.first_encounter.ttft_p95_s is None  # not published
            assert level.first_encounter.e2e_p95_s is not None
    assert all(r.ttft_s is None for r in vllm.long_context)
    assert all(t.ttft_s is None for t in vllm.cache_trials)
    assert not [k for k, v in vllm.prefix_cache.model_dump().items() if "ttft" in k and v is not None]
    assert any(r.ttft_s is not None for r in sglang.long_context)
    reliability = [d.text for d in summary.decision if d.topic == "reliability"]
    assert any(t.startswith("sim-vllm: TTFT not published") for t in reliability)


def test_not_tested_names_disabled_scenarios_not_applicable_checks_and_failed_steps(summary):
    items = {(i.engine, i.what): i.why for i in summary.not_tested}
    assert items[("all", "boundary scenario")] == "disabled in the run config"
    assert items[("all", "rate scenario")] == "disabled in the run config"
    assert "functional.skip" in items[("sim-sglang", "check image_input")]
    assert "never became ready" in items[("sim-down", "every scenario")]
    assert items[("sim-down", "step wait_ready")].startswith("failed: DeployError")
    assert summary.engines["sim-down"].steps["short"].status == "not_attempted"
    not_tested = [d.text for d in summary.decision if d.topic == "not_tested"]
    assert any("boundary scenario" in t for t in not_tested)
    assert summary.validation.ran is False  # the fixture skips validation: the page must say so
    assert any(d.text.startswith("Validation did not run") for d in summary.decision)


def test_needles_and_cache_come_from_their_tables(sim_run, summary):
    needles = [r for r in sim_run.run_dir().read_rows("needles", "sim-vllm") if r["scenario"] == "long_context"]
    vllm = summary.engines["sim-vllm"]
    assert vllm.needles.model_dump() == {"passed": sum(r["passed"] for r in needles), "total": len(needles)}
    assert 0 < vllm.needles.passed < vllm.needles.total, "the profile loses needles past 1,500 tokens"
    verdict = sim_run.run_dir().read_json("verdicts/sim-sglang/prefix_cache.json")
    assert summary.engines["sim-sglang"].prefix_cache.hit_rate == pytest.approx(verdict["hit_rate"])
    # sim-vllm's TTFT is unreliable (echo ignored): its trial alone says effective, but half of that rests on TTFT
    assert sim_run.run_dir().read_json("verdicts/sim-vllm/prefix_cache.json")["verdict"] == "effective"
    pc = vllm.prefix_cache
    assert pc.verdict == "unconfirmed" and "echo=false" in pc.withheld, pc
    assert pc.ttft_decrease is None and pc.hit_rate is not None
    assert vllm.cache_trials and all(t.ttft_s is None for t in vllm.cache_trials)
    lead = next(d.text for d in summary.decision if d.text.startswith("Long-context needles"))
    assert f"sim-vllm {vllm.needles.passed}/{vllm.needles.total}" in lead


def test_leads_come_from_the_comparisons_with_intervals_never_from_a_gap(summary):
    from tasks.stats.effects import effect
    from tasks.report.decision import comparison_words

    assert summary.confidence == 0.95
    compared = {(c.scenario, c.level, c.figure, c.engine) for c in summary.comparisons}
    # sim-sglang is the config's first engine: the base; sim-down measured nothing; sim-vllm's TTFT is withheld
    assert {c.base for c in summary.comparisons} == {"sim-sglang"}
    assert {c.engine for c in summary.comparisons} == {"sim-vllm"}
    assert ("short", "c=1", "output_tps", "sim-vllm") in compared
    assert not [key for key in compared if key[2].startswith(("ttft_", "tpot_"))]
    leads = " ".join(d.text for d in summary.decision if d.topic == "leads")
    for c in summary.comparisons:
        base = next(lv for lv in summary.engines["sim-sglang"].levels(c.scenario) if lv.label == c.level)
        mine = next(lv for lv in summary.engines["sim-vllm"].levels(c.scenario) if lv.label == c.level)
        # no warmup in this run: round 1 met each shape first, and an effect reads the steady rounds
        e = effect(_steady(base, c.figure), _steady(mine, c.figure), 0.95)
        assert (c.ratio, c.low, c.high, c.detectable) == pytest.approx((e.ratio, e.low, e.high, e.detectable))
        assert c.rounds_needed_for_5pct == e.rounds_needed(0.05)
        assert comparison_words(c) in leads
    assert "leads at" not in leads and "on par" not in leads and "uncertain" not in leads


def _steady(level, figure: str) -> list[float | None]:
    return [v for r, v in zip(level.rounds, level.figures[figure].rounds) if r not in level.first_encounter_rounds]


def _plant(run, engine: str, scenario: str, figure: str, values: list[float]) -> None:
    """Replace `figure` of the measured rounds of every level of `scenario` with `values`, round by round."""
    path = run.run_dir().path / "tables" / "rounds" / engine / f"{scenario}.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        if not row.get("warmup"):
            row[figure] = values[row["round"] - 1]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _short_throughput(summary, label: str):
    return next(c for c in summary.comparisons
                if (c.scenario, c.level, c.figure) == ("short", label, "output_tps"))


def test_a_planted_20_percent_throughput_gain_is_better_with_an_interval_covering_it(sim_run, tmp_path):
    from tasks.report import build_summary

    run = sim_run.copy(tmp_path)
    # round 1 is each level's first encounter (no warmup): its values stay out of the effect
    _plant(run, "sim-sglang", "short", "output_tps", [150.0, 100.0, 104.0, 97.0])
    _plant(run, "sim-vllm", "short", "output_tps", [40.0, 121.0, 118.0, 123.0])
    summary = build_summary(run.run_dir(), run.cfg())
    c = _short_throughput(summary, "c=4")
    assert (c.base, c.engine, c.verdict) == ("sim-sglang", "sim-vllm", "better")
    assert c.low < 1.2 < c.high and c.low > 1
    lead = next(d.text for d in summary.decision if d.text.startswith("short output throughput, sim-vllm vs sim-sglang"))
    assert f"at c=4 {c.ratio:.2f}× (95% CI {c.low:.2f}–{c.high:.2f}, covering {c.covers}), better" in lead


def test_rounds_that_overlap_give_no_detectable_difference_and_name_no_leader(sim_run, tmp_path):
    """Two `make demo` runs of one A/B named opposite leaders from rounds like these: noise, not a finding."""
    from tasks.report import build_summary

    run = sim_run.copy(tmp_path)
    _plant(run, "sim-sglang", "short", "output_tps", [20.0, 27.7, 33.0, 30.1])
    _plant(run, "sim-vllm", "short", "output_tps", [40.0, 24.9, 27.2, 26.0])
    summary = build_summary(run.run_dir(), run.cfg())
    c = _short_throughput(summary, "c=4")
    assert c.verdict == "no detectable difference" and c.low < 1 < c.high
    assert c.ratio < 0.95  # the medians differ by more than the 5% that used to name a leader
    lead = next(d.text for d in summary.decision if d.text.startswith("short output throughput, sim-vllm vs sim-sglang"))
    assert c.covers == "round-to-round noise within one deployment of each engine"  # and the line says so
    assert (f"no detectable difference at c=4 ({c.ratio:.2f}×, 95% CI {c.low:.2f}–{c.high:.2f}, covering {c.covers}; "
            f"this run could detect ±{c.detectable:.0%}; {c.rounds_needed_for_5pct} rounds a side would detect 5%)") in lead
    assert "better" not in lead and "worse" not in lead and "leads" not in lead


def test_regressions_table_is_rendered_when_the_run_has_rows(sim_run, tmp_path):
    from tasks.report import build_summary, render_html

    run = sim_run.copy(tmp_path)
    assert "id='regressions'" not in render_html(build_summary(run.run_dir(), run.cfg()), charts={})
    with run.run_dir().rows("regressions", "sim-sglang", "nightly") as out:
        common = {"run_id": run.run_id, "engine": "sim-sglang", "image_digest": None, "scenario": "short",
                  "round": 0, "concurrency": 4, "baseline_run_id": "scheduled__2026-11-29T00-00-00-00-00"}
        out.write({**common, "metric": "output_tps", "baseline_value": 900.0, "value": 700.0, "change": -0.222,
                   "threshold": -0.10, "regressed": True, "ratio": 0.78, "ci_low": 0.74, "ci_high": 0.82,
                   "verdict": "lower", "covers": "rounds of one launch and 6 past runs"})
        out.write({**common, "metric": "ttft_p95_s", "baseline_value": 0.03, "value": 0.031, "change": 0.033,
                   "threshold": 0.20, "regressed": False})
    summary = build_summary(run.run_dir(), run.cfg())
    assert [r.metric for r in summary.regressions] == ["output_tps", "ttft_p95_s"]
    page = render_html(summary, charts={})
    section = page[page.index("id='regressions'"):]
    assert "regressed" in section and "-22.2%" in section and "scheduled__2026-11-29T00-00-00-00-00" in section
    text = next(d.text for d in summary.decision if d.topic == "regressions")
    assert text.startswith("1 regression(s)")
    assert "output_tps -22.2% (0.78×, CI 0.74–0.82, covering rounds of one launch and 6 past runs)" in text
    assert "0.78× (0.74–0.82)" in section  # the interval the verdict rests on, beside the median change
    assert "covering rounds of one launch and 6 past runs" in section  # and what it covers


def test_planted_secrets_never_reach_the_summary_or_the_page_and_markup_stays_text(sim_run, tmp_path):
    from tasks.report import build_summary, render_html

    run = sim_run.copy(tmp_path)
    planted = ("sk-PLANTEDsecret0123456789abcdef", "10.42.7.19", "gpu-node-3.cluster.internal", "hunter2pass")
    with run.run_dir().rows("startup_findings", "sim-sglang", "planted") as out:
        out.write({"run_id": run.run_id, "engine": "sim-sglang", "image_digest": None, "scenario": "startup",
                   "round": 0, "finding": "planted", "severity": "warning",
                   "line": f"WARNING token {planted[0]} from http://{planted[1]}:8000 on {planted[2]} "
                           f"password={planted[3]} <script>alert(1)</script>"})
    summary = build_summary(run.run_dir(), run.cfg())
    published = json.dumps(summary.model_dump(mode="json")) + render_html(summary, charts={})
    assert "planted" in published  # the finding itself is shown ...
    for secret in planted:
        assert secret not in published  # ... without what it leaked
    assert "<script" not in render_html(summary, charts={}) and "&lt;script&gt;" in published  # shown as text


def test_a_run_that_measured_nothing_still_renders_and_says_why(tmp_path):
    from tasks.config import parse_run_config
    from tasks.report import write_report
    from tasks.report.schema.run import NotTested
    from tasks.state.storage import RunDir

    cfg = parse_run_config({"run_id": "dry-run-1", "dry_run": True})
    built = write_report(RunDir("dry-run-1", root=tmp_path), cfg)
    assert built["charts"] == {}
    texts = [d.text for d in built["summary"].decision]
    assert texts[0].startswith("Dry run: ") and "never became ready" in texts[1]
    assert NotTested(engine="sim-sglang", what="every scenario",
                     why="engine never became ready: not deployed") in built["summary"].not_tested
    assert "<img" not in built["page"] and "id='not-tested'" in built["page"]


def test_the_standing_limits_are_said_in_the_summary_and_the_report(summary):
    from tasks.report.html import render_html

    limits = " ".join(summary.limits)
    assert "random token IDs" in limits and "not the quality" in limits
    assert "minimum correctness threshold" in limits
    assert "this hardware, this image digest and this configuration only" in limits
    from markupsafe import escape  # the page's own escaping (Jinja2 autoescape)

    page = render_html(summary, {})
    assert all(escape(text) in page for text in summary.limits)

"""The quality step against servers written for the test (docs/PROTOCOL.md, "Answers"): one answers every
item right, one corrupts a known share of one family; accuracy per family must find exactly that family."""

from __future__ import annotations

import json

from plain_server import MODEL
from quality_server import CorruptsHalfTheArithmetic, SolvesEverything

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.items import FAMILIES, generate
from tasks.quality.run import run_quality
from tasks.quality.score import accuracy_by_family, is_correct
from tasks.state.storage import RunDir
from tasks.state.tables import to_frame
from tasks.publish.validate import validate_frames

ITEMS_PER_FAMILY = 8
KV_LENGTHS = [64, 256]


def _run(server_cls, tmp_path):  # noqa: ANN001 (a server class)
    config = parse_run_config({
        "run_id": "quality-run",
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "plain", "dialect": "vllm"}],
        "scenarios": {"quality": {"enabled": True, "items_per_family": ITEMS_PER_FAMILY,
                                  "kv_context_tokens": KV_LENGTHS},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })
    run_dir = RunDir("quality-run", root=tmp_path)
    with server_cls() as server:
        rows = run_quality(EngineContext(config, endpoint_for(config, "plain", server.url, "sha256:" + "0" * 64),
                                       run_dir))
    return server, rows, run_dir, config


def test_a_server_that_answers_right_scores_every_family_with_an_interval_holding_one(tmp_path):
    server, rows, run_dir, _ = _run(SolvesEverything, tmp_path)
    assert server.temperatures == [0.0] * len(rows)  # greedy: a verdict is not a draw of the sampler
    assert len(rows) == ITEMS_PER_FAMILY * (len(FAMILIES) - 1 + len(KV_LENGTHS))
    assert all(r["correct"] and r["status"] == "ok" for r in rows), [r for r in rows if not r["correct"]]
    assert run_dir.read_rows("quality", "plain") == rows  # kept in the run state, one row per item
    accuracy = accuracy_by_family(rows)["plain"]
    assert set(accuracy) == set(FAMILIES)
    assert all(a["accuracy"] == 1.0 and a["high"] == 1.0 and a["low"] < 1.0 for a in accuracy.values()), accuracy


def test_a_corrupted_family_is_found_and_no_other(tmp_path):
    server, rows, _, _ = _run(CorruptsHalfTheArithmetic, tmp_path)
    accuracy = accuracy_by_family(rows)["plain"]
    planted = server.arithmetic_corrupted / server.arithmetic_seen
    assert planted == 0.5 and accuracy["arithmetic"]["accuracy"] == 1 - planted
    assert accuracy["arithmetic"]["high"] < 1.0  # the interval excludes a perfect engine
    assert [f for f, a in accuracy.items() if a["high"] < 1.0] == ["arithmetic"]
    wrong = [r for r in rows if not r["correct"]]
    # every wrong row names its item, what was expected and what came back, off by the planted one
    assert {r["family"] for r in wrong} == {"arithmetic"} and len(wrong) == server.arithmetic_corrupted
    assert all(int(r["answer"]) == json.loads(r["expected"]) + 1 for r in wrong), wrong


def test_the_quality_suite_passes_the_rows_and_fails_a_broken_one(tmp_path):
    _, rows, _, _ = _run(SolvesEverything, tmp_path)
    good = validate_frames({"quality": to_frame("quality", rows)})
    assert good["quality"]["success"], good
    # an unknown family, a row without its verdict, an item twice
    broken = [*rows[1:], {**rows[0], "family": "trivia", "correct": None}, rows[1]]
    bad = validate_frames({"quality": to_frame("quality", broken)})
    failed = {f["expectation"] for f in bad["quality"]["failed"]}
    assert not bad["quality"]["success"]
    assert {"expect_column_values_to_be_in_set", "expect_column_values_to_not_be_null",
            "expect_compound_columns_to_be_unique"} <= failed, failed


def test_summary_and_report_give_accuracy_per_family_and_name_the_wrong_items(tmp_path):
    from tasks.report.html import render_html
    from tasks.report.summary import build_summary

    server, rows, run_dir, config = _run(CorruptsHalfTheArithmetic, tmp_path)
    quality = build_summary(run_dir, config).engines["plain"].quality
    arithmetic = quality.families["arithmetic"]
    assert (arithmetic.correct, arithmetic.items) == (ITEMS_PER_FAMILY // 2, ITEMS_PER_FAMILY)
    assert arithmetic.high < 1.0 == quality.families["sorting"].high
    assert sorted(w.item_id for w in quality.wrong) == sorted(r["item_id"] for r in rows if not r["correct"])
    page = render_html(build_summary(run_dir, config), charts={})
    assert "<h2 id='quality'>Answers</h2>" in page
    low, high = f"{arithmetic.low * 100:.0f}%", f"{arithmetic.high * 100:.0f}%"
    assert f"4/8 50% <span class='rounds'>({low}–{high})</span>" in page, page[page.find("id='quality'"):][:2000]
    assert quality.wrong[0].item_id in page


def test_the_task_set_is_the_seeds():
    first, again, other = generate(3, 4, [128]), generate(3, 4, [128]), generate(4, 4, [128])
    assert first == again and first != other
    assert [i.id for i in first] == [i.id for i in other]  # same items by id, other values


def test_each_match_rule_takes_the_right_answer_and_no_near_miss():
    items = {i.family: i for i in generate(0, 1, [64])}
    assert is_correct(items["arithmetic"], f" {items['arithmetic'].expected}\n")
    assert not is_correct(items["arithmetic"], f"{items['arithmetic'].expected + 1}")
    assert not is_correct(items["arithmetic"], "about that")
    assert is_correct(items["sorting"], "```json\n" + json.dumps(items["sorting"].expected) + "\n```")
    assert not is_correct(items["sorting"], json.dumps(items["sorting"].expected[::-1]))
    schema_item = items["json_schema"]
    assert is_correct(schema_item, json.dumps(schema_item.expected))
    count_as_text = {**schema_item.expected, "count": str(schema_item.expected["count"])}  # the schema says integer
    assert not is_correct(schema_item, json.dumps(count_as_text))
    assert is_correct(items["copy_reverse"], items["copy_reverse"].expected + "  ")
    assert not is_correct(items["copy_reverse"], items["copy_reverse"].expected.upper())
    assert is_correct(items["tool_call"], json.dumps(items["tool_call"].expected))
    assert not is_correct(items["tool_call"], json.dumps({**items["tool_call"].expected, "minute": -1}))


def test_a_kv_length_over_the_model_limit_is_named_with_its_fix():
    import pytest

    from tasks.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_run_config({"model": {"name": MODEL, "context_limit_tokens": 4096},
                          "engines": [{"name": "plain", "dialect": "vllm"}],
                          "scenarios": {"quality": {"enabled": True, "kv_context_tokens": [256, 8192]},
                                        "long_context": {"enabled": False}, "boundary": {"enabled": False}}})
    assert "scenarios.quality.kv_context_tokens[1]" in str(err.value) and "Fix:" in str(err.value), str(err.value)

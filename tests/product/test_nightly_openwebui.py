"""The nightly compares the openwebui step's verdicts like the functional checks (tasks/compare/nightly.py): a
verdict that passed in the last good run and fails now regresses, by name."""

from __future__ import annotations

from typing import Any

from product_fixtures import small_config

from tasks.compare.nightly import compare_engine
from tasks.compare.sides import Side
from tasks.config import parse_run_config
from tasks.openwebui.checks import CHAT, MODEL_LIST, REASONING, SCENARIO
from tasks.state.tables import to_frame

ENGINE = "sim-a"


def _side(run_id: str, outcomes: dict[str, str]) -> Side:
    rows: list[dict[str, Any]] = [
        {"run_id": run_id, "engine": ENGINE, "image_digest": "sha256:" + "0" * 64, "scenario": SCENARIO, "round": 0,
         "check": check, "outcome": outcome, "evidence": {"reason": "test"}} for check, outcome in outcomes.items()]
    return Side(run_id, to_frame("rounds", []), to_frame("checks", rows), to_frame("needles", []), None, True)


def test_an_openwebui_verdict_that_passed_and_fails_now_regresses_by_name():
    cfg = parse_run_config({**small_config("unused"), "run_id": "now"})
    base = _side("base", {MODEL_LIST: "pass", CHAT: "pass", REASONING: "pass"})
    now = _side("now", {MODEL_LIST: "pass", CHAT: "pass", REASONING: "fail"})
    rows = {r["metric"]: r for r in compare_engine(cfg, ENGINE, None, now, {"functional": base})}
    assert rows[f"check:{REASONING}"]["regressed"] and rows[f"check:{REASONING}"]["verdict"] == "pass -> fail"
    assert not rows[f"check:{CHAT}"]["regressed"] and not rows[f"check:{MODEL_LIST}"]["regressed"]

"""Speculative decoding off against on is judged on correctness first (issue 43, item 5), against plain servers
written for the test: an answer worded otherwise and still right is no fault (a diagnostic), an item whose off
answer is empty (a reasoning model that spent its max_tokens thinking) is not checked, never "identical", and an
answer made wrong is still the fault that drops the on engine."""

from __future__ import annotations

import json
import re
from typing import Any

from answers_summary import throughput_comparison
from plain_server import MODEL
from quality_server import SolvesEverything
from verdict_runs import PURPOSES

from tasks.config import parse_run_config
from tasks.config.presets import preset_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.run import run_quality
from tasks.report import build_summary
from tasks.report.choice import choose
from tasks.report.decision import decide
from tasks.state.storage import RunDir


class WordsSortingOtherwise(SolvesEverything):
    """Answers every item right, the sorted lists without spaces ("[1,2,3]" where the off engine says "[1, 2, 3]")."""

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        if re.search(r"ascending order", question):
            return json.dumps(json.loads(content), separators=(",", ":")), tool
        return content, tool


class ReversesWrong(SolvesEverything):
    """Answers every reversal with the string as given: wrong."""

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        m = re.search(r'Reverse the string "(\w+)"', question)
        return (m.group(1), tool) if m else (content, tool)


class ThinksPastItsBudget(SolvesEverything):
    """A reasoning model whose max_tokens ran out while it thought: every answer's content is empty."""

    def corrupt(self, question: str, content: str, tool: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        return "", None


def _pair(tmp_path, off_server, on_server):  # noqa: ANN001, ANN202
    config = parse_run_config({
        "run_id": "spec-run", "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "off", "dialect": "vllm"},
                    {"name": "on", "dialect": "vllm", "sim_profile": {"speculative": {"draft_tokens": 3}}}],
        "scenarios": {"quality": {"enabled": True, "items_per_family": 8, "kv_context_tokens": [64]},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30, "choice": {"purposes": PURPOSES}})
    run_dir = RunDir("spec-run", root=tmp_path)
    for name, server_cls in (("off", off_server), ("on", on_server)):
        with server_cls() as server:
            run_quality(EngineContext(config, endpoint_for(config, name, server.url, "sha256:" + "0" * 64), run_dir))
    summary = build_summary(run_dir, config)
    for engine in summary.engines.values():
        engine.ready = True  # served from the start: readiness is not what these servers test
    summary.comparisons = [throughput_comparison("on", "off")]  # speculative decoding is faster, detectably
    [pair] = summary.speculative.pairs
    return summary, config, pair


def test_an_answer_worded_otherwise_and_still_right_is_no_fault(tmp_path):
    summary, config, pair = _pair(tmp_path, SolvesEverything, WordsSortingOtherwise)
    assert [c.picked for c in choose(summary, config.choice.orders())] == [["on"], ["on"]]
    assert pair.changed and all(i.startswith("sorting-") for i in pair.changed)  # the diagnostic names them
    assert pair.wrong == [], pair
    leads = [d.text for d in decide(summary) if d.topic == "leads"]
    assert not any(line.startswith("Speculative decoding changed answers") for line in leads), leads
    [line] = [x for x in leads if x.startswith("Speculative decoding, on")]
    assert f"no greedy answer made wrong on {pair.items} items ({len(pair.changed)} worded otherwise" in line, line


def test_an_empty_off_answer_is_not_checked_never_identical(tmp_path):
    summary, _, pair = _pair(tmp_path, ThinksPastItsBudget, ThinksPastItsBudget)
    assert pair.items == 0 and pair.not_checked and not pair.changed and not pair.wrong, pair
    [line] = [d.text for d in decide(summary) if d.text.startswith("Speculative decoding, on")]
    assert "identical" not in line and f"{len(pair.not_checked)} items not checked" in line, line


def test_an_answer_made_wrong_drops_the_on_engine(tmp_path):
    summary, config, pair = _pair(tmp_path, SolvesEverything, ReversesWrong)
    assert pair.wrong and all(i.startswith("copy_reverse-") for i in pair.wrong), pair
    assert [c.picked for c in choose(summary, config.choice.orders())] == [["off"], ["off"]]
    leads = [d.text for d in decide(summary) if d.topic == "leads"]
    assert any(line.startswith(f"Speculative decoding changed answers: on answered {len(pair.wrong)} of") for line
               in leads), leads


def test_the_presets_give_a_reasoning_model_room_to_answer():
    for name in ("spec-decoding-sglang", "spec-decoding-vllm"):
        assert preset_config(name)["scenarios"]["quality"]["max_tokens"] >= 1024, name

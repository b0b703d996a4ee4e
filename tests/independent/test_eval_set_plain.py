"""Your own eval set (docs/PROTOCOL.md, "Your own eval set"): a JSONL file from S3 or a path, checked at plan
with every bad row named by its line before anything deploys, and scored as the family eval_set against a
server written for the test."""

from __future__ import annotations

import json
import time

import pytest
from plain_server import MODEL
from quality_server import SolvesEverything

from tasks.config import ConfigError, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.quality.eval_set import parse_eval_set
from tasks.quality.run import run_quality
from tasks.quality.score import accuracy_by_family, is_correct
from tasks.steps.context import RunContext
from tasks.state.documents import EVAL_SET, MANIFEST
from tasks.state.storage import RunDir
from tasks.steps.registry import plan
from tasks.state.tables import to_frame
from tasks.publish.validate import validate_frames

GOOD = [
    {"id": "capital", "prompt": "What is the capital of France? One word.", "expected": "Paris"},
    {"id": "greeting", "messages": [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Greet the user by name: Ada."}],
     "expected": r"\bAda\b", "match": "regex"},
    {"id": "total", "prompt": "Bought 3 boxes of 411.5 kg. Total kg?", "expected": 1234.5, "match": "numeric",
     "tolerance": 0.01},
    {"id": "year", "prompt": "In which year did the Apollo 11 landing happen?", "expected": "1969", "match": "numeric"},
]
# What the test's server says to each prompt: right but for the last (a year off)
REPLIES = {"What is the capital of France? One word.": " Paris\n", "Greet the user by name: Ada.": "Hello, Ada!",
           "Bought 3 boxes of 411.5 kg. Total kg?": "3 x 411.5 = 1,234.5 kg, so the total is 1,234.50",
           "In which year did the Apollo 11 landing happen?": "It was 1968."}


class AnswersTheEvalSet(SolvesEverything):
    def corrupt(self, question: str, content: str, tool):  # noqa: ANN001, ANN201
        return REPLIES.get(question, content), tool


def _jsonl(rows) -> str:  # noqa: ANN001
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"


def _config(source: str, run_id: str = "own-set"):  # noqa: ANN202
    return parse_run_config({
        "run_id": run_id, "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "plain", "dialect": "vllm"}],
        "scenarios": {"quality": {"enabled": True, "items_per_family": 2, "kv_context_tokens": [64],
                                  "nll_lengths_tokens": [], "eval_set": source},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })


def test_every_bad_row_is_named_by_its_line_with_the_fix():
    text = _jsonl([GOOD[0], "{not json", {"prompt": "q"}, {"prompt": "q", "messages": [], "expected": "a"},
                   {"prompt": "q", "expected": "a", "match": "fuzzy"}, {"prompt": "q", "expected": "x", "match": "numeric"},
                   {"prompt": "q", "expected": "(", "match": "regex"}, {"id": "capital", "prompt": "q", "expected": "a"},
                   {"prompt": "q", "expected": 3, "match": "numeric", "tolerance": -1}])
    with pytest.raises(ConfigError) as err:
        parse_eval_set(text, "own.jsonl")
    message = str(err.value)
    assert message.startswith("scenarios.quality.eval_set: own.jsonl: line 2: not JSON"), message
    for line, words in ((3, 'no "expected"'), (4, 'either "prompt" or "messages"'), (5, "'fuzzy' is not one of"),
                        (6, "is not a number"), (7, "not a valid regular expression"), (8, "also on line 1"),
                        (9, "-1 is not a number >= 0")):
        assert f"line {line}: " in message and words in message.split(f"line {line}: ")[1], (line, message)
    assert "line 1:" not in message and "Fix: make each line a JSON object" in message


def test_each_rule_takes_the_right_answer_and_no_near_miss():
    capital, greeting, total, year = parse_eval_set(_jsonl(GOOD))
    assert is_correct(capital, " Paris\n") and not is_correct(capital, "paris")
    assert is_correct(greeting, "Hello, Ada!") and not is_correct(greeting, "Hello, Adam!")
    assert is_correct(total, "so 1,234.50") and not is_correct(total, "so 1,234.6")
    assert is_correct(year, "1969.") and not is_correct(year, "1969 or 1970")  # the last number counts


def test_a_bad_eval_set_fails_the_plan_before_anything_is_deployed(tmp_path):
    source = tmp_path / "own.jsonl"
    source.write_text(_jsonl([GOOD[0], {"prompt": "no answer"}]), encoding="utf-8")
    ctx = RunContext(_config(str(source)), RunDir("own-set", root=tmp_path))
    with pytest.raises(ConfigError, match=r"line 2: no \"expected\" answer"):
        plan(ctx)
    assert ctx.run_dir.read_json(MANIFEST) is None  # not planned: nothing deploys


def test_an_eval_set_on_s3_is_kept_at_plan_and_scored_as_its_own_family(s3_server, tmp_path):
    s3 = s3_server.client()
    bucket = f"own-{time.time_ns()}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="sets/own.jsonl", Body=_jsonl(GOOD).encode())
    config = _config(f"s3://{bucket}/sets/own.jsonl")
    ctx = RunContext(config, RunDir("own-set", root=tmp_path), archive_client=s3_server.client)
    plan(ctx)
    assert [r["id"] for r in ctx.run_dir.read_json(EVAL_SET)] == [f"eval_set-{r['id']}" for r in GOOD]
    with AnswersTheEvalSet() as server:
        rows = run_quality(EngineContext(config, endpoint_for(config, "plain", server.url, "sha256:" + "0" * 64),
                                         ctx.run_dir))
    own = accuracy_by_family(rows)["plain"]["eval_set"]
    assert (own["correct"], own["items"]) == (3, 4)
    assert [r["item_id"] for r in rows if not r["correct"]] == ["eval_set-year"]
    assert validate_frames({"quality": to_frame("quality", rows)})["quality"]["success"]
    from tasks.report.summary import build_summary

    from tasks.report.limits import not_proved

    summary = build_summary(ctx.run_dir, config)
    assert summary.engines["plain"].quality.families["eval_set"].correct == 3
    summary.engines["plain"].ready = True  # the limits are of engines that served; readiness is not this test's
    line = next(t for t in not_proved(config, summary) if t.startswith("Answers were checked"))
    assert f"the user's eval set s3://{bucket}/sets/own.jsonl as the family eval_set" in line, line
    assert "not prompts outside the eval set" in line


def test_an_unreadable_source_is_named(tmp_path):
    ctx = RunContext(_config(str(tmp_path / "missing.jsonl")), RunDir("own-set", root=tmp_path))
    with pytest.raises(ConfigError, match="missing.jsonl is not a file"):
        plan(ctx)

"""Trace readers (PROTOCOL.md section 4, "trace"): each format's columns read as the protocol names them, a bad
row refused by its line number with the fix, the window cut from a stream, and the plan refusing a trace it
cannot read before anything deploys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.traffic.trace_formats import TraceError, TraceRow, read_trace, window
from tasks.traffic.trace_source import check_trace
from tasks.traffic.trace_synth import synthetic_lines

MOONCAKE = [  # the first rows of Mooncake's FAST25-release/traces/conversation_trace.jsonl, shortened
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}',
    '{"timestamp": 3000, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}',
    '{"timestamp": 5999, "input_length": 1053, "output_length": 26, "hash_ids": [0, 773, 774]}',
]
AZURE = [  # the header and rows as Azure's AzureLLMInferenceTrace_conv.csv writes them (100 ns ticks)
    "TIMESTAMP,ContextTokens,GeneratedTokens",
    "2023-11-16 18:15:46.6805900,374,44",
    "2023-11-16 18:15:50.9951690,396,109",
    "2023-11-16 18:15:51.0000000,879,30",
]


def _rows(lines, fmt, block=512):
    return list(read_trace(lines, fmt, block))


def test_mooncake_rows_read_in_milliseconds_with_their_blocks():
    rows = _rows([line.encode() for line in MOONCAKE], "mooncake")
    assert rows[0] == TraceRow(1, 0.0, 6758, 500, tuple(range(14)))
    assert [r.arrival_s for r in rows] == [0.0, 3.0, 5.999]
    assert rows[2].block_ids == (0, 773, 774) and rows[2].line == 3


def test_azure_rows_read_relative_to_the_first_timestamp_to_the_tick():
    rows = _rows(AZURE, "azure")
    assert [(r.line, r.input_tokens, r.output_tokens, r.block_ids) for r in rows] == [
        (2, 374, 44, ()), (3, 396, 109, ()), (4, 879, 30, ())]
    assert rows[1].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert rows[2].arrival_s == pytest.approx(4.31941, abs=1e-6)


def test_dayone_rows_read_in_seconds_blocks_optional():
    lines = [json.dumps({"arrival_s": 1.5, "input_tokens": 40, "output_tokens": 8, "block_ids": [3, 4]}),
             json.dumps({"arrival_s": 2.0, "input_tokens": 9, "output_tokens": 1})]
    assert _rows(lines, "dayone", 16) == [TraceRow(1, 0.0, 40, 8, (3, 4)), TraceRow(2, 0.5, 9, 1, ())]


@pytest.mark.parametrize(("fmt", "lines", "line", "words"), [
    ("mooncake", [MOONCAKE[0], '{"timestamp": 10, "input_length": 0, "output_length": 5}'], 2, "input_length"),
    ("mooncake", [MOONCAKE[0], "", '{"timestamp": 10, "input_length": 5}'], 3, "output_length missing"),
    ("mooncake", [MOONCAKE[0], MOONCAKE[1], "{not json"], 3, "not a JSON object"),
    ("mooncake", [MOONCAKE[1], MOONCAKE[0]], 2, "sort the trace"),
    ("mooncake", ['{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}'], 1,
     "block_tokens"),
    ("mooncake", ['{"timestamp": 0, "input_length": 6, "output_length": 5, "hash_ids": ["a"]}'], 1, "hash_ids"),
    ("azure", [AZURE[0], AZURE[1], "2023-11-16 18:15:47,12,x"], 3, "GeneratedTokens"),
    ("azure", [AZURE[0], "yesterday,12,3"], 2, "TIMESTAMP"),
    ("azure", ["time,ContextTokens,GeneratedTokens", AZURE[1]], 1, "lacks TIMESTAMP"),
    ("dayone", ['{"arrival_s": -1, "input_tokens": 5, "output_tokens": 5}'], 1, "arrival_s"),
])
def test_a_bad_row_is_named_by_its_line_with_the_fix(fmt, lines, line, words):
    with pytest.raises(TraceError) as info:
        _rows(lines, fmt)
    assert info.value.line == line and words in str(info.value) and "Fix:" in str(info.value)


def test_the_window_is_cut_from_the_stream_and_rebased_on_its_first_row():
    rows = read_trace(iter(synthetic_lines(5, 1000, rate_rps=10.0)), "mooncake", 512)
    got = list(window(rows, start_s=20.0, length_s=5.0))
    assert got and got[0].arrival_s == 0.0 and all(r.arrival_s < 5.0 for r in got)
    capped = list(window(read_trace(iter(synthetic_lines(5, 1000, rate_rps=10.0)), "mooncake", 512), 20.0, None, 7))
    assert [r.line for r in capped] == [r.line for r in got[:7]]

    def endless():  # a window that ends must stop reading: the trace may be far longer than memory
        yield from synthetic_lines(5, 1000, rate_rps=10.0)
        raise AssertionError("read past the window")

    assert len(list(window(read_trace(endless(), "mooncake", 512), 0.0, 1.0))) > 0


def test_the_synthetic_trace_is_the_same_for_the_same_seed_and_shares_prefixes():
    a, b = list(synthetic_lines(11, 300)), list(synthetic_lines(11, 300))
    assert a == b and a != list(synthetic_lines(12, 300))
    rows = _rows(a, "mooncake")
    firsts = [r.block_ids[0] for r in rows]
    assert len(set(firsts)) < len(rows) / 4  # most rows open with a shared system prompt's block
    assert all(len(r.block_ids) == -(-r.input_tokens // 512) for r in rows)  # Mooncake's blocks cover the prompt


def _config(tmp_path: Path, **trace) -> object:
    return parse_run_config({"run_id": "plan-trace", "model": {"name": "m", "context_limit_tokens": 8192},
                             "engines": [{"name": "sim-a", "dialect": "sglang", "launcher": "sim"}],
                             "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                           "trace": {"enabled": True, **trace}}})


def test_the_plan_refuses_a_missing_trace_and_a_bad_row_before_any_deploy(tmp_path: Path):
    from tasks.steps.context import RunContext
    from tasks.steps.registry import plan

    from tasks.state.storage import RunDir

    ctx = RunContext(_config(tmp_path, path=str(tmp_path / "absent.jsonl")), RunDir("plan-trace", root=tmp_path))
    with pytest.raises(ConfigError) as info:
        plan(ctx)
    assert "scenarios.trace.path" in str(info.value) and "ship the file" in str(info.value)
    assert not (tmp_path / "plan-trace" / "manifest.json").exists()

    bad = tmp_path / "bad.jsonl"
    bad.write_text(MOONCAKE[0] + "\n" + '{"timestamp": 5, "input_length": 9000, "output_length": 5}\n')
    with pytest.raises(ConfigError) as info:
        check_trace(_config(tmp_path, path=str(bad)), None)
    assert "line 2" in str(info.value) and "context_limit_tokens" in str(info.value)

    with pytest.raises(ConfigError) as info:
        check_trace(_config(tmp_path, path=str(bad), window_start_s=60.0), None)
    assert "holds no request" in str(info.value)


def test_a_trace_section_names_exactly_one_source():
    with pytest.raises(ConfigError) as info:
        _config(Path("."))
    assert "scenarios.trace" in str(info.value) and "exactly one of path" in str(info.value)
    with pytest.raises(ConfigError) as info:
        _config(Path("."), path="t.csv", s3_key="t.csv")
    assert "path and s3_key" in str(info.value)


def test_the_plan_records_the_window_and_its_expected_reuse(tmp_path: Path):
    good = tmp_path / "good.jsonl"
    good.write_text("".join(synthetic_lines(3, 50, rate_rps=25.0)))
    got = check_trace(_config(tmp_path, path=str(good), speed=2.0), None)
    assert got["rows"] == 50 and got["replay_s"] == pytest.approx(got["span_s"] / 2)
    assert 0.0 < got["expected_reuse"] < 1.0


def test_a_replayed_rounds_percentiles_are_the_protocols():
    """The replay's figures from compact arrays equal tasks/stats/figures.py's (linear interpolation) on the same values."""
    import random
    from array import array

    from tasks.stats.figures import summarize
    from tasks.traffic.trace_figures import summarize_array

    rng = random.Random(3)
    for n in (1, 2, 7, 1000):
        xs = [rng.expovariate(20.0) for _ in range(n)]
        got, want = summarize_array(array("d", xs)), summarize(xs)
        assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], rel=1e-12) for k in want)
    assert summarize_array(array("d")) == summarize([])

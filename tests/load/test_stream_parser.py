"""The client's timing rules (PROTOCOL.md section 3) on hand-made SSE streams, no network."""

import json

import pytest

from tasks.engines import adapter_for
from tasks.load.client import RequestSpec, StreamError, StreamParser, build_result, length_deviation


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chat(delta, usage=None):
    doc = {"choices": [{"index": 0, "delta": delta}]}
    if usage is not None:
        doc["usage"] = usage
    return sse(doc)


USAGE = sse({"choices": [], "usage": {"prompt_tokens": 128, "completion_tokens": 3}})
SPEC = RequestSpec("r1", "/v1/chat/completions", b"{}", expected_prompt_tokens=128, expected_completion_tokens=3)


def feed_timed(parser, pieces):
    for t, data in pieces:
        parser.feed(data, t)
    parser.finish()


def test_a_role_only_first_chunk_is_an_event_but_not_output():
    p = StreamParser(adapter_for("vllm"))
    feed_timed(p, [
        (10.01, chat({"role": "assistant"})),
        (10.02, chat({"content": ""})),
        (10.10, chat({"content": "a"})),
        (10.15, chat({"content": "b"})),
        (10.25, chat({"content": "c"})),
        (10.30, USAGE + b"data: [DONE]\n\n"),
    ])
    r = build_result(SPEC, 1000.0, 10.0, p)
    assert r.first_event_s == pytest.approx(0.01)
    assert r.ttft_s == pytest.approx(0.10)
    assert r.e2e_s == pytest.approx(0.25)  # the usage event is not output
    assert r.itl_s == pytest.approx([0.05, 0.10])
    assert r.tpot_s == pytest.approx((0.25 - 0.10) / 2)
    assert r.tokens_per_event == [1, 1, 1]
    assert r.completion_tokens == 3 and r.prompt_tokens == 128
    assert r.length_deviation is False and r.status == "ok"


@pytest.mark.parametrize("dialect,field", [("vllm", "reasoning"), ("sglang", "reasoning_content"), ("vllm", "reasoning_content")])
def test_reasoning_text_counts_as_first_output(dialect, field):
    p = StreamParser(adapter_for(dialect))
    feed_timed(p, [(1.0, chat({"role": "assistant"})), (1.2, chat({field: "hmm"})), (1.3, chat({"content": "x"})), (1.4, b"data: [DONE]\n\n")])
    assert p.output_t == [1.2, 1.3]


def test_a_tool_call_delta_counts_as_output():
    p = StreamParser(adapter_for("sglang"))
    call = {"tool_calls": [{"index": 0, "function": {"arguments": "{\""}}]}
    feed_timed(p, [(1.0, chat({"content": None})), (1.5, chat(call)), (1.6, b"data: [DONE]\n\n")])
    assert p.output_t == [1.5]


def test_completions_text_events_and_split_reads_and_crlf():
    p = StreamParser(adapter_for("sglang"))
    stream = (sse({"choices": [{"text": "ab"}]}) + sse({"choices": [{"text": "c"}]})).replace(b"\n", b"\r\n")
    # the second event completes only in the second read: it is stamped with that read's time
    p.feed(stream[:-7], 2.0)
    p.feed(stream[-7:] + b"data: [DONE]\n\n", 2.5)
    p.finish()
    assert p.output_t == [2.0, 2.5]


def test_malformed_json_is_a_stream_error():
    p = StreamParser(adapter_for("vllm"))
    with pytest.raises(StreamError, match="malformed JSON"):
        p.feed(b'data: {"choices": [\n\n', 1.0)


def test_a_stream_cut_before_done_is_an_error():
    p = StreamParser(adapter_for("vllm"))
    p.feed(chat({"content": "a"}), 1.0)
    with pytest.raises(StreamError, match="before \\[DONE\\]"):
        p.finish()


def test_an_error_object_in_the_stream_is_an_error():
    p = StreamParser(adapter_for("vllm"))
    with pytest.raises(StreamError, match="error event"):
        p.feed(sse({"error": {"message": "boom", "code": 500}}), 1.0)


def test_continuous_usage_gives_tokens_per_event():
    p = StreamParser(adapter_for("vllm"))
    feed_timed(p, [
        (1.0, chat({"content": "ab"}, {"completion_tokens": 2})),
        (1.1, chat({"content": "cde"}, {"completion_tokens": 5})),
        (1.2, b"data: [DONE]\n\n"),
    ])
    assert p.tokens_per_event(5) == [2, 3]


def test_batched_events_without_counts_leave_tokens_per_event_unknown():
    p = StreamParser(adapter_for("vllm"))
    feed_timed(p, [(1.0, chat({"content": "ab"})), (1.1, chat({"content": "cd"})), (1.2, b"data: [DONE]\n\n")])
    assert p.tokens_per_event(4) is None  # never guessed


def test_missing_usage_records_none_and_no_tpot():
    p = StreamParser(adapter_for("vllm"))
    feed_timed(p, [(1.0, chat({"content": "a"})), (1.1, chat({"content": "b"})), (1.2, b"data: [DONE]\n\n")])
    r = build_result(SPEC, 0.0, 0.9, p)
    assert r.completion_tokens is None and r.usage_present is False
    assert r.tpot_s is None
    assert r.length_deviation is None  # unknown, not "no deviation"


def test_length_deviation_is_flagged_when_usage_differs():
    assert length_deviation(128, 128, 64, 63) is True
    assert length_deviation(128, 129, 64, 64) is True
    assert length_deviation(128, 128, 64, 64) is False
    assert length_deviation(128, None, 64, 64) is None

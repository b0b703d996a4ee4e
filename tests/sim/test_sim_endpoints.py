"""Every endpoint of every dialect, held against the ground truth at /sim/requests."""

from __future__ import annotations

import base64
import json
import uuid

import httpx
import pytest
from sim_helpers import chat, stream
from test_sim_units import png

from tasks.sim.process import start_sim
from tasks.sim.tokenizer import count_tokens

FAST = {"itl_s": 0.001, "ttft_base_s": 0.002}
DIALECTS = ("sglang", "vllm", "openai")


@pytest.fixture(scope="module", params=DIALECTS)
def sim(request):
    with start_sim(request.param, FAST) as s:
        yield s


def rid() -> str:
    return "t-" + uuid.uuid4().hex[:12]


def post(sim, path, body, request_id=None):
    headers = {"X-Request-Id": request_id} if request_id else {}
    return httpx.post(sim.url + path, json=body, headers=headers, timeout=30)


def test_model_list_and_health(sim):
    models = httpx.get(sim.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["dayone-sim-model"]
    health = {"sglang": ["/health", "/health_generate", "/ping"], "vllm": ["/health", "/ping"], "openai": ["/health"]}
    for path in health[sim.dialect]:
        assert httpx.get(sim.url + path).status_code == 200, path
    assert httpx.get(sim.url + "/sim/state").json()["restarts"] == 0


def test_chat_not_streamed_counts_prompt_exactly_and_keys_ground_truth_by_request_id(sim):
    request_id = rid()
    text = "Hello there, how are you today?"
    r = post(sim, "/v1/chat/completions", chat(text, max_tokens=8), request_id)
    body = r.json()
    assert r.status_code == 200 and r.headers["X-Request-Id"] == request_id
    # template: "<|user|> TEXT <|end|> <|assistant|>" = 2 + text + 2 + 4 tokens
    assert body["usage"]["prompt_tokens"] == count_tokens(text) + 8
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"]
    [truth] = sim.requests(request_id)
    assert truth["prompt_tokens"] == body["usage"]["prompt_tokens"]
    assert truth["completion_tokens"] == body["usage"]["completion_tokens"] == count_tokens(message["content"])
    assert truth["status"] == 200 and truth["ttft_s"] > 0 and truth["e2e_s"] >= truth["ttft_s"]


def test_chat_stream_role_first_then_output_usage_and_done_as_ground_truth_says(sim):
    request_id = rid()
    s = stream(sim.url, "/v1/chat/completions",
               chat("stream please", max_tokens=12, ignore_eos=True, stream_options={"include_usage": True}), request_id)
    assert s.status == 200 and s.done
    first = s.deltas()[0]
    assert first.get("role") == "assistant" and not first.get("content")
    text = s.field("content")
    assert count_tokens(text) == 12 and s.usage()["completion_tokens"] == 12
    [truth] = sim.requests(request_id)
    finish = ["finish"] if sim.dialect == "sglang" else []  # SGLang finishes in an event of its own, even on length
    assert truth["event_kinds"] == ["role"] + ["output"] * 12 + finish + ["usage", "done"]
    assert len(truth["event_ts"]) == len(s.events)
    assert sum(truth["event_tokens"]) == 12
    assert truth["first_output_ts"] == truth["event_ts"][1]
    assert truth["ttft_s"] == pytest.approx(truth["first_output_ts"] - truth["arrival_ts"], abs=1e-6)
    # the client cannot see an event before the server sent it
    assert all(c >= t - 0.001 for c, t in zip(s.times, truth["event_ts"]))


def test_stream_without_include_usage_has_no_usage(sim):
    s = stream(sim.url, "/v1/chat/completions", chat("no usage", max_tokens=3))
    assert s.done and s.usage() is None


def test_completions_echo_and_token_id_prompts(sim):
    r = post(sim, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": True, "echo": True})
    assert r.json()["choices"][0]["text"].startswith("Once upon a time")
    r = post(sim, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": True})
    text = r.json()["choices"][0]["text"]
    assert "Once" not in text and count_tokens(text) == 4
    ids = list(range(1000, 1128))
    r = post(sim, "/v1/completions", {"prompt": ids, "max_tokens": 64, "ignore_eos": True})
    usage = r.json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (128, 64)
    s = stream(sim.url, "/v1/completions", {"prompt": ids, "max_tokens": 5, "ignore_eos": True,
                                             "stream_options": {"include_usage": True}})
    assert s.done and count_tokens("".join(s.texts())) == 5 and s.usage()["prompt_tokens"] == 128


def test_output_length_natural_min_tokens_and_max_tokens(sim):
    def completion_tokens(**extra):
        return post(sim, "/v1/completions", {"prompt": "count me", **extra}).json()["usage"]["completion_tokens"]

    assert completion_tokens(max_tokens=100) == 16  # stops by itself
    assert completion_tokens(max_tokens=100, min_tokens=40) == 40
    assert completion_tokens(max_tokens=7) == 7
    assert completion_tokens(max_tokens=50, ignore_eos=True) == 50


def test_over_the_context_limit_as_vllm_0_32_answers():
    """A prompt over the window is a 400 (param input_tokens, counted to limit + 1); one that fits with max_tokens
    over the room left is served, cut to that room (tests/fixtures/wire/vllm-0.32.0/context_overflow_*.json)."""
    with start_sim("vllm", {**FAST, "context_limit": 100}) as small:
        r = post(small, "/v1/completions", {"prompt": "word " * 90, "max_tokens": 20})
        assert r.status_code == 200
        assert r.json()["usage"]["completion_tokens"] == 10 and r.json()["choices"][0]["finish_reason"] == "length"
        r = post(small, "/v1/completions", {"prompt": "word " * 120, "max_tokens": 20})
        assert r.status_code == 400
        error = r.json()["error"]
        assert "maximum context length is 100 tokens" in error["message"] and "at least 101 input tokens" in error[
            "message"]
        assert error["param"] == "input_tokens"
        truth = small.requests()
        assert [t["status"] for t in truth] == [200, 400]


def test_needle_answer_is_exactly_the_code(sim):
    prompt = "filler text. " * 200 + "The secret code is KQZT-4821. " + "more filler. " * 200 + "What is the secret code?"
    r = post(sim, "/v1/chat/completions", chat(prompt, max_tokens=128, ignore_eos=True))
    assert r.json()["choices"][0]["message"]["content"] == "KQZT-4821"
    s = stream(sim.url, "/v1/chat/completions", chat(prompt, max_tokens=128))
    assert s.field("content") == "KQZT-4821"


def test_image_is_read_and_described(sim):
    url = "data:image/png;base64," + base64.b64encode(png(64, 32)).decode()
    msg = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                        {"type": "image_url", "image_url": {"url": url}}]}]
    r = post(sim, "/v1/chat/completions", {"messages": msg, "max_tokens": 32})
    assert "image/png 64x32" in r.json()["choices"][0]["message"]["content"]
    if sim.dialect != "openai":  # the image's patch tokens count the same in /tokenize and usage
        assert post(sim, "/tokenize", {"messages": msg}).json()["count"] == r.json()["usage"]["prompt_tokens"]
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    assert post(sim, "/v1/chat/completions", {"messages": bad}).status_code == 400


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "required": ["city", "unit"],
                   "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}]


def test_tool_call_not_streamed_and_streamed_in_fragments(sim):
    r = post(sim, "/v1/chat/completions", chat("weather in Paris?", tools=TOOLS))
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "get_weather" and args["unit"] in ("celsius", "fahrenheit") and isinstance(args["city"], str)

    s = stream(sim.url, "/v1/chat/completions",
               chat("time?", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}))
    calls = [d["tool_calls"][0] for d in s.deltas() if d.get("tool_calls")]
    assert calls[0]["function"]["name"] == "get_time"
    fragments = [c["function"]["arguments"] for c in calls[1:]]
    assert len(fragments) >= 2 and json.loads("".join(fragments)) == {"zone": "example zone"}
    finals = [e["choices"][0]["finish_reason"] for e in s.events if isinstance(e, dict) and e.get("choices")]
    assert finals[-1] == "tool_calls"
    r = post(sim, "/v1/chat/completions", chat("no tools", tools=TOOLS, tool_choice="none", max_tokens=3))
    assert r.json()["choices"][0]["message"]["content"] and not r.json()["choices"][0]["message"].get("tool_calls")


def test_a_tools_result_is_answered_in_words(sim):
    """OpenWebUI offers its built-in tools on every chat: once it hands back the tool's result, the
    model answers; a simulator that called the tool again would loop until OpenWebUI gave up."""
    body = chat("weather in Paris?", tools=TOOLS)
    call = post(sim, "/v1/chat/completions", body).json()["choices"][0]["message"]["tool_calls"][0]
    body["messages"] += [{"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": call["id"], "content": '{"celsius": 21}'}]
    choice = post(sim, "/v1/chat/completions", {**body, "max_tokens": 4}).json()["choices"][0]
    assert choice["finish_reason"] != "tool_calls" and choice["message"]["content"]
    assert not choice["message"].get("tool_calls")


def test_tokenize_where_the_engine_has_it(sim):
    r = post(sim, "/tokenize", {"prompt": "Hello, world!"})
    if sim.dialect == "openai":
        assert r.status_code == 404
        return
    assert r.json()["count"] == 4 and len(r.json()["tokens"]) == 4
    text = "tokenize this chat"
    counted = post(sim, "/tokenize", {"messages": [{"role": "user", "content": text}]}).json()["count"]
    used = post(sim, "/v1/chat/completions", chat(text, max_tokens=1)).json()["usage"]["prompt_tokens"]
    assert counted == used


def test_metrics_carry_the_dialect_counter_names(sim):
    r = httpx.get(sim.url + "/metrics")
    if sim.dialect == "openai":
        assert r.status_code == 404
        return
    names = {"sglang": ("sglang:prompt_tokens_total", "sglang:cached_tokens_total", "sglang:time_to_first_token_seconds_bucket"),
             "vllm": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_bucket")}
    for name in names[sim.dialect]:
        assert name in r.text, name


def test_dialect_extras_detokenize_model_info_version(sim):
    if sim.dialect == "openai":
        assert httpx.post(sim.url + "/detokenize", json={"tokens": [1, 2]}).status_code == 404
        return
    text = post(sim, "/detokenize", {"tokens": [0, 1, 2]}).json()[{"sglang": "text", "vllm": "prompt"}[sim.dialect]]
    assert count_tokens(text) == 3 and post(sim, "/tokenize", {"prompt": text}).json()["tokens"] == [0, 1, 2]
    if sim.dialect == "sglang":
        assert httpx.get(sim.url + "/get_model_info").json()["model_path"] == "dayone-sim-model"
    else:
        assert "version" in httpx.get(sim.url + "/version").json()


def test_ground_truth_can_be_cleared():
    with start_sim("sglang", FAST) as s:
        post(s, "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert len(s.requests()) == 1
        assert s.clear_requests() == 1 and s.requests() == []
        post(s, "/v1/completions", {"prompt": "x", "max_tokens": 2}, "after")
        assert [r["request_id"] for r in s.requests()] == ["after"]

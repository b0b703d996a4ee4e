"""The simulator's vLLM and SGLang dialects held to the real servers' wire (tests/fixtures/wire/<engine>-<version>).

The recordings come from vLLM 0.32.0's CPU build and SGLang 0.5.18's CPU backend (docs/engine-facts-*.md). For
each recorded stream the simulator answers the same request, its cache in the same state, and the two event
sequences must have the same shape: each event's top-level, choice and delta fields in order, tool-call fields, the
finish reason and where it comes, the usage's fields, [DONE] (runs of output events alike count as one). The
context 400s and the unknown-model 404 must match field for field, their messages with the numbers taken out, and
every metric the simulator exposes must be a family of the recorded exposition, of the same type. The text differs
(the simulator is no language model); the fields do not. An engine upgrade re-records the fixtures, and this test
then says what the simulator must copy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks.sim.dialects import DIALECTS
from tasks.sim.process import start_sim

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "wire"
VERSIONS = {"vllm": "vllm-0.32.0", "sglang": "sglang-0.5.18"}
MODEL = "SmolLM2-135M-Instruct"
EXPOSITIONS = {"vllm": "metrics_after_traffic.txt", "sglang": "metrics.txt"}
# The recorded streams held here, per dialect (SGLang's tool-call streams hold no call: the model wrote text).
STREAMS = {
    "vllm": ["chat_stream.json", "chat_stream_usage.json", "completions_stream_usage.json",
             "completions_stream_stop_request_id.json", "prefix_cache_cold.json", "tool_auto_few_shot_stream.json"],
    "sglang": ["chat_stream_no_usage.json", "chat_stream_usage.json", "completions_stream.json",
               "prefix_cache_cold_stream.json", "prefix_cache_hot_stream.json"],
}


def recording(dialect: str, name: str) -> dict[str, Any]:
    doc = json.loads((WIRE / VERSIONS[dialect] / name).read_text(encoding="utf-8"))
    request = doc["request"]
    return {"path": request["path"], "body": request.get("json") or request.get("body") or {},
            "status": doc["status"], "events": doc.get("sse_data_lines") or doc.get("sse") or [],
            "json": doc.get("body")}


def keys(value: Any) -> Any:
    """The fields of a JSON value in order, nested; values left out (a None stays None: it is a shape)."""
    if isinstance(value, dict):
        return [[k, keys(v)] for k, v in value.items()]
    if isinstance(value, list):
        return [keys(value[0])] if value else []
    return None if value is None else type(value).__name__


def event_shape(line: str) -> str:
    if line.strip() == "data: [DONE]":
        return "[DONE]"
    event = json.loads(line.removeprefix("data: "))
    choices = event.get("choices") or []
    finish = choices[0].get("finish_reason") if choices else None
    return json.dumps({"fields": keys({k: v for k, v in event.items() if k not in ("id", "created", "model")}),
                       "finish": finish})


def stream_shape(lines: list[str]) -> list[str]:
    shapes: list[str] = []
    for line in lines:
        shape = event_shape(line)
        if not shapes or shapes[-1] != shape:  # a run of output events alike counts as one
            shapes.append(shape)
    return shapes


def finish_of(lines: list[str]) -> str | None:
    for line in lines:
        if line.strip() != "data: [DONE]":
            for choice in json.loads(line.removeprefix("data: ")).get("choices") or []:
                if choice.get("finish_reason"):
                    return choice["finish_reason"]
    return None


def cached(lines: list[str]) -> bool:
    """Whether the recorded usage says prompt tokens came from the cache."""
    for line in lines:
        if '"usage":{' in line:
            details = (json.loads(line.removeprefix("data: "))["usage"].get("prompt_tokens_details") or {})
            return bool(details.get("cached_tokens"))
    return False


def sim_lines(sim: Any, path: str, body: dict[str, Any]) -> list[str]:
    with httpx.stream("POST", sim.url + path, json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return [line for line in r.iter_lines() if line.startswith("data: ")]


def same_request(body: dict[str, Any], finish: str | None) -> dict[str, Any]:
    """The recorded request for the simulator, asking for the recorded finish: `length` cuts its output short,
    `stop` lets it end by itself (natural_output_tokens), `tool_calls` is its answer to a tool."""
    out = {**body, "model": MODEL}
    if finish == "length":
        out.update(max_tokens=4, ignore_eos=True)
    elif finish == "stop":
        out.update(max_tokens=64)
        out.pop("ignore_eos", None), out.pop("min_tokens", None)
    return out


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def sim(request):
    context = 2048 if request.param == "vllm" else 8192
    with start_sim(request.param, {"model": MODEL, "context_limit": context, "dev_mode": True,
                                   "itl_s": 0.0005, "ttft_base_s": 0.001}) as s:
        yield s


def clear_cache(sim: Any) -> None:
    method, path = DIALECTS[sim.dialect].cache_clear
    assert httpx.request(method, sim.url + path, timeout=10).status_code == 200


def test_every_recorded_stream_has_the_simulators_shape(sim):
    for name in STREAMS[sim.dialect]:
        real = recording(sim.dialect, name)
        body = same_request(real["body"], finish_of(real["events"]))
        clear_cache(sim)
        if cached(real["events"]):
            sim_lines(sim, real["path"], body)  # the prompt in the cache, as it was when recorded
        mine = sim_lines(sim, real["path"], body)
        assert stream_shape(mine) == stream_shape(real["events"]), name


def error_shape(body: Any) -> Any:
    """An error body with its message's numbers taken out."""
    if isinstance(body, dict):
        return {k: error_shape(v) for k, v in body.items()}
    return re.sub(r"\d[\d,]*", "N", body) if isinstance(body, str) else body


# (fixture, path, what the simulator is sent: its prompt in tokens of a 64-token window, max_tokens, stream)
VLLM_ERRORS = [
    ("context_overflow_completions.json", "/v1/completions", 65, 8, False),
    ("context_overflow_chat.json", "/v1/chat/completions", 65, 8, False),
    ("context_overflow_stream.json", "/v1/chat/completions", 65, 8, True),
    ("context_prompt_exactly_limit.json", "/v1/completions", 64, 8, False),
    ("context_overflow_max_tokens_over_limit.json", "/v1/completions", 2, 65, False),
]
SGLANG_ERRORS = [
    ("context_400_completions.json", "/v1/completions", 65, 8, False),
    ("context_400_chat.json", "/v1/chat/completions", 65, 8, False),
    ("context_400_chat_stream.json", "/v1/chat/completions", 65, 8, True),
    ("context_400_completions_total.json", "/v1/completions", 40, 30, False),
]
WINDOW = 64


def request_of(path: str, tokens: int, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "stream": stream}
    if path == "/v1/completions":
        return {**body, "prompt": [7] * tokens}  # token ids: exactly this many prompt tokens
    return {**body, "messages": [{"role": "user", "content": "word " * (tokens * 2)}]}


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_context_errors_as_the_real_engines_write_them(dialect):
    with start_sim(dialect, {"model": MODEL, "context_limit": WINDOW}) as small:
        for name, path, tokens, max_tokens, stream in (VLLM_ERRORS if dialect == "vllm" else SGLANG_ERRORS):
            real = recording(dialect, name)
            r = httpx.post(small.url + path, json=request_of(path, tokens, max_tokens, stream), timeout=10)
            assert r.status_code == real["status"] == 400, name
            assert error_shape(r.json()) == error_shape(real["json"]), name


def test_vllm_serves_a_prompt_that_fits_cut_to_the_room_left():
    """context_overflow_max_tokens.json: 2009 prompt tokens and max_tokens 100 in a 2048 window: 200, 39 tokens,
    finish length (the simulator before answered a 400)."""
    real = recording("vllm", "context_overflow_max_tokens.json")["json"]
    assert real["usage"]["prompt_tokens"] + real["usage"]["completion_tokens"] == 2048
    with start_sim("vllm", {"model": MODEL, "context_limit": WINDOW, "itl_s": 0.0005}) as small:
        r = httpx.post(small.url + "/v1/completions", json=request_of("/v1/completions", 60, 20, False), timeout=10)
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == WINDOW - 60
    assert r.json()["choices"][0]["finish_reason"] == real["choices"][0]["finish_reason"] == "length"


def test_vllm_unknown_model_404():
    real = recording("vllm", "unknown_model.json")
    with start_sim("vllm", {"model": MODEL}) as s:
        r = httpx.post(s.url + "/v1/completions", json=real["body"], timeout=10)
    assert r.status_code == real["status"] == 404
    assert r.json() == real["json"]


def families(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)", text, re.MULTILINE))


def test_every_simulated_metric_is_a_family_of_the_real_exposition(sim):
    real = families((WIRE / VERSIONS[sim.dialect] / EXPOSITIONS[sim.dialect]).read_text(encoding="utf-8"))
    httpx.post(sim.url + "/v1/completions", json={"model": MODEL, "prompt": "a b c", "max_tokens": 2}, timeout=10)
    mine = families(httpx.get(sim.url + "/metrics", timeout=10).text)
    mine.pop("process_start_time_seconds", None)  # prometheus_client's own, not the engine's
    # A counter's family is named without _total in the exposition's TYPE line by prometheus_client.
    missing = {name: kind for name, kind in mine.items()
               if real.get(name, real.get(name.removesuffix("_total"))) != kind}
    assert not missing, f"the simulator exposes families the real {sim.dialect} has not (or of another type): {missing}"


def test_a_fresh_simulated_sglang_exposes_no_family_a_fresh_real_one_lacks():
    """SGLang 0.5.18's labelled metrics appear with their first observation: before any traffic, no cache hits, no
    retractions and no ITL histogram (its warm-up generates one token), which a reader must take as zero."""
    real = families((WIRE / VERSIONS["sglang"] / "metrics_before_traffic.txt").read_text(encoding="utf-8"))
    with start_sim("sglang", {"model": MODEL, "context_limit": 8192, "itl_s": 0.0005, "ttft_base_s": 0.001}) as s:
        fresh = families(httpx.get(s.url + "/metrics", timeout=10).text)
        sim_lines(s, "/v1/completions", {"model": MODEL, "prompt": "a b c", "max_tokens": 4, "stream": True})
        after = families(httpx.get(s.url + "/metrics", timeout=10).text)
    extra = {name: kind for name, kind in fresh.items() if real.get(name, real.get(name.removesuffix("_total"))) != kind}
    assert not extra, f"a fresh simulated SGLang exposes families a fresh real one has not: {extra}"
    assert "sglang:inter_token_latency_seconds" in after  # a request's second token makes it


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_detokenize_answers_in_the_real_engines_field(dialect):
    recorded = json.loads((WIRE / VERSIONS[dialect] / {"vllm": "detokenize.json", "sglang": "detokenize_tokens.json"}[
        dialect]).read_text(encoding="utf-8"))
    with start_sim(dialect, {"startup_delay_s": 0, "itl_s": 0.001}) as sim:
        answer = httpx.post(sim.url + "/detokenize", json={"tokens": [0, 1, 2]}).json()
    assert list(answer) == list(recorded["body"])  # {"prompt"} in vLLM, {"text"} in SGLang


def test_sglang_flush_bodies_are_the_real_ones_idle_and_busy():
    def body(name: str) -> str:
        doc = json.loads((WIRE / VERSIONS["sglang"] / name).read_text(encoding="utf-8"))
        return (doc.get("flush") or doc)["body"]

    with start_sim("sglang", {"startup_delay_s": 0, "itl_s": 0.02}) as sim:
        idle = httpx.post(sim.url + "/flush_cache")
        request = {"prompt": "long running", "max_tokens": 100, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", sim.url + "/v1/completions", json=request, timeout=30) as stream:
            lines = stream.iter_lines()  # held: a dropped generator closes the stream
            next(lines)  # the stream's first output: the request is running
            busy = httpx.post(sim.url + "/flush_cache")
    assert (idle.status_code, idle.text) == (200, body("flush_cache_idle_post.json"))
    assert (busy.status_code, busy.text) == (400, body("flush_cache_during_stream.json"))

"""The llamacpp adapter against the real server: each dialect fact it states is checked here, so a
new llama.cpp that changes one fails a test instead of skewing a run."""

from __future__ import annotations

import os
import socket

import httpx
import pytest

from tasks.engines import adapter_for
from tasks.telemetry.metrics import scrape
from tasks.core.processes import alive as _alive

from llamacpp_helpers import SERVED_MODEL, RunningEngine

ADAPTER = adapter_for("llamacpp")
PROMPT = "The lighthouse keeper counted the ships in the harbor and wrote their names in a book."


@pytest.fixture()
def client() -> httpx.Client:
    with httpx.Client(timeout=120) as c:
        yield c


def _complete(client: httpx.Client, base_url: str, prompt: str, max_tokens: int = 2, **extra) -> dict:
    r = client.post(base_url + "/v1/completions",
                    json={"model": SERVED_MODEL, "prompt": prompt, "max_tokens": max_tokens, **extra})
    assert r.status_code == 200, r.text[:300]
    return r.json()


def test_ready_means_health_model_list_and_a_generation(smollm2: RunningEngine, client: httpx.Client):
    assert client.get(smollm2.base_url + ADAPTER.liveness_path).json() == {"status": "ok"}
    ids = [m["id"] for m in client.get(smollm2.base_url + ADAPTER.models_path).json()["data"]]
    assert ids == [SERVED_MODEL]
    assert smollm2.target.restart_count(smollm2.deployment) == 0


def test_launcher_settings_reach_the_server(smollm2: RunningEngine, client: httpx.Client):
    props = client.get(smollm2.base_url + "/props").json()
    assert props["total_slots"] == 2
    assert props["default_generation_settings"]["params"]["temperature"] == 0
    assert props["model_alias"] == SERVED_MODEL


def test_the_startup_log_is_captured_for_the_findings_scan(smollm2: RunningEngine):
    log = smollm2.target.startup_log(smollm2.deployment)
    assert "dayone llamacpp_server: listening on http://127.0.0.1:" in log
    assert "load_model: loading model" in log  # llama.cpp's own log, from stderr
    findings = ADAPTER.scan_startup_log(log)
    assert all(f["severity"] != "error" for f in findings), findings


def test_tokenize_counts_the_content_field(smollm2: RunningEngine, client: httpx.Client):
    url = smollm2.base_url + ADAPTER.tokenize_path
    tokens = client.post(url, json=ADAPTER.tokenize_body(PROMPT)).json()["tokens"]
    assert len(tokens) > 10
    # The quirk the adapter exists for: the other dialects' field is silently answered with nothing.
    assert client.post(url, json={"prompt": PROMPT}).json()["tokens"] == []
    usage = _complete(client, smollm2.base_url, PROMPT)["usage"]
    assert usage["prompt_tokens"] == len(tokens)


def test_cache_counters_are_exposed_and_give_the_hit_rate(smollm2: RunningEngine, client: httpx.Client):
    ok, detail = ADAPTER.clear_cache(client, smollm2.base_url)
    assert ok, detail
    prompt = PROMPT * 6
    before = scrape(client, smollm2.base_url, ADAPTER)
    cold = _complete(client, smollm2.base_url, prompt)["usage"]
    hot = _complete(client, smollm2.base_url, prompt)["usage"]
    after = scrape(client, smollm2.base_url, ADAPTER)
    assert ADAPTER.cached_tokens(cold) == 0
    assert ADAPTER.cached_tokens(hot) >= cold["prompt_tokens"] - 2  # all but the last token or two
    rate = ADAPTER.hit_rate(before, after)
    assert rate.queries_delta == cold["prompt_tokens"] + hot["prompt_tokens"]
    assert rate.hits_delta == ADAPTER.cached_tokens(hot)
    assert 0.45 < rate.rate < 0.5


def test_clearing_the_cache_erases_every_slot(smollm2: RunningEngine, client: httpx.Client):
    prompt = PROMPT * 4
    _complete(client, smollm2.base_url, prompt)
    assert ADAPTER.cached_tokens(_complete(client, smollm2.base_url, prompt)["usage"]) > 0
    ok, detail = ADAPTER.clear_cache(client, smollm2.base_url)
    assert ok and "erased 2 slot(s)" in detail, detail
    assert ADAPTER.cached_tokens(_complete(client, smollm2.base_url, prompt)["usage"]) == 0
    # llama.cpp has no flush-all: the id-less form the docs suggest does not exist.
    assert client.post(smollm2.base_url + "/slots?action=erase").status_code == 404


def test_exact_output_fields_give_exactly_that_many_tokens(smollm2: RunningEngine, client: httpx.Client):
    body = _complete(client, smollm2.base_url, "Hello", **ADAPTER.exact_output_fields(24))
    assert body["usage"]["completion_tokens"] == 24
    assert body["choices"][0]["finish_reason"] == "length"


def test_echo_is_ignored(smollm2: RunningEngine, client: httpx.Client):
    text = _complete(client, smollm2.base_url, PROMPT, max_tokens=4, echo=True)["choices"][0]["text"]
    assert PROMPT not in text


def test_the_server_closes_the_connection_after_a_streamed_response(smollm2: RunningEngine):
    assert ADAPTER.keeps_alive_after_stream is False
    host, port = smollm2.base_url.removeprefix("http://").split(":")
    body = ('{"model": "%s", "prompt": "Hi", "max_tokens": 2, "stream": true}' % SERVED_MODEL).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Connection: keep-alive\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):  # returns b"" only when the server closes the socket
            received += chunk
    assert b"data: [DONE]" in received
    assert b"keep-alive: timeout=" in received.lower()  # although it said it would keep it open


def test_teardown_stops_the_process_group(tmp_path_factory: pytest.TempPathFactory):
    from llamacpp_helpers import llamacpp_config, running_engine

    config = llamacpp_config({"model": "smollm2", "ctx_size": 512}, name="llamacpp-stop")
    with running_engine(tmp_path_factory.mktemp("stop"), config) as engine:
        pid = int(engine.deployment.handle["pid"])
        assert _alive(pid)
    assert not _alive(pid)
    log = engine.target.startup_log(engine.deployment)
    assert "dayone llamacpp_server: stopping on signal" in log and "main loop exited" in log
    with pytest.raises(OSError):
        os.kill(pid, 0)

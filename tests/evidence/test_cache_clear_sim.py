"""A prefix-cache clear counts only when the engine says it cleared (PROTOCOL section 2, vLLM row).

Against the simulator playing current vLLM: /reset_prefix_cache answers 200 {"success": false}
while a request runs, so the clear is retried until the engine is idle, and the retries are named.
"""

from __future__ import annotations

import threading
import time

import httpx

from tasks.engines import adapter_for
from tasks.sim.process import start_sim


def test_vllm_clear_is_retried_through_success_false_until_the_running_request_ends():
    with start_sim("vllm", {"dev_mode": True, "itl_s": 0.02}) as sim:
        body = {"prompt": "long running", "max_tokens": 40, "ignore_eos": True}  # about 0.8 s
        t = threading.Thread(target=lambda: httpx.post(sim.url + "/v1/completions", json=body, timeout=30))
        t.start()
        deadline = time.monotonic() + 10
        while not httpx.get(sim.url + "/sim/state").json()["running"] and time.monotonic() < deadline:
            time.sleep(0.01)
        with httpx.Client(timeout=10) as client:
            cleared, detail = adapter_for("vllm").clear_cache_when_idle(client, sim.url, interval_s=0.1)
        still_running = httpx.get(sim.url + "/sim/state").json()["running"]
        t.join()
    assert cleared is True, detail
    assert still_running == 0  # done only once the request had ended
    tries = int(detail.rsplit("after ", 1)[1].split()[0])
    assert tries >= 2 and detail.startswith('POST /reset_prefix_cache -> 200 {"success": true}'), detail


def test_vllm_clear_that_never_clears_says_how_often_it_tried():
    with start_sim("vllm", {"dev_mode": True, "itl_s": 0.05}) as sim:
        body = {"prompt": "long running", "max_tokens": 60, "ignore_eos": True}  # about 3 s
        t = threading.Thread(target=lambda: httpx.post(sim.url + "/v1/completions", json=body, timeout=30))
        t.start()
        deadline = time.monotonic() + 10
        while not httpx.get(sim.url + "/sim/state").json()["running"] and time.monotonic() < deadline:
            time.sleep(0.01)
        with httpx.Client(timeout=10) as client:
            cleared, detail = adapter_for("vllm").clear_cache_when_idle(client, sim.url, timeout_s=0.5, interval_s=0.1)
        t.join()
    assert cleared is False
    assert '-> 200 {"success": false} on all' in detail and "never cleared" in detail, detail

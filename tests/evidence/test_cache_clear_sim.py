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
        # 10 s of stream, closed once the clear has been refused: a stall of a second cannot end the
        # request before the clear's first try, and the test does not wait the 10 s out
        body = {"prompt": "long running", "max_tokens": 500, "ignore_eos": True, "stream": True}
        refused = threading.Event()

        def seen(response: httpx.Response) -> None:
            if response.request.url.path == "/reset_prefix_cache":
                refused.set()  # the first answer: the request still runs, so {"success": false}

        outcome: list[tuple[bool, str]] = []
        with httpx.Client(timeout=10, event_hooks={"response": [seen]}) as client:
            with httpx.stream("POST", sim.url + "/v1/completions", json=body, timeout=30):
                deadline = time.monotonic() + 10
                while not httpx.get(sim.url + "/sim/state").json()["running"] and time.monotonic() < deadline:
                    time.sleep(0.01)
                clearing = threading.Thread(target=lambda: outcome.append(
                    adapter_for("vllm").clear_cache_when_idle(client, sim.url, interval_s=0.1)))
                clearing.start()
                assert refused.wait(20), "the clear never tried"
            clearing.join(30)  # the stream closed: the simulator ends the request at its next event
        still_running = httpx.get(sim.url + "/sim/state").json()["running"]
    [(cleared, detail)] = outcome
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

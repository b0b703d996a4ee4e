"""The send stamp and the shard count, measured from outside the client.

The write is bracketed: against a raw server that logs when each request arrived, a client whose write
call is held up (a test hook sleeps inside `Connection.send` after the bytes went, as a preemption
would) has its bracket flagged wide and its send stamp taken before the write, so the stamp never
comes after the server had the request. And `auto` leaves a core to a server on this host (the
reference server, or a busy process listening on the endpoint's port), within this process's affinity.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from raw_server import RawServer

from tasks.config.load import LoadSettings
from tasks.engines import adapter_for
from tasks.load import http as load_http
from tasks.load import shards as shards_module
from tasks.load.client import RequestSpec, new_session, run_async, run_closed_loop
from tasks.load.plan import Shape

ROOT = Path(__file__).resolve().parents[2]
HELD_S = 0.005  # the hold inside the write call: wider than the 3.99 ms seen against a real server


def _specs(n: int) -> list[RequestSpec]:
    body = json.dumps({"model": "raw-model", "prompt": "a b", "max_tokens": 4, "stream": True}).encode()
    return [RequestSpec(f"req-{i}", "/v1/completions", body) for i in range(n)]


def _measure(url: str, n: int, concurrency: int):
    async def main():
        async with new_session() as session:
            return await run_closed_loop(session, url, _specs(n), concurrency, adapter_for("vllm"), 10.0)

    return run_async(main())


def test_a_write_held_inside_the_call_is_flagged_and_stamped_before_the_server_had_it(monkeypatch):
    sent = load_http.Connection.send

    def held(self, data, on_body):
        exchange = sent(self, data, on_body)  # the bytes are with the kernel, and the server, now
        time.sleep(HELD_S)  # the client is preempted before the call returns
        return exchange

    monkeypatch.setattr(load_http.Connection, "send", held)
    with RawServer() as server:
        results = _measure(server.url, 8, 2)
        arrived = {a["head"].split("X-Request-Id: ")[1].split("\r\n")[0]: a["arrived"]
                   for a in server.arrivals}
    assert [r.status for r in results] == ["ok"] * 8
    for r in results:
        assert r.send_wide and r.send_bracket_s >= HELD_S, (r.request_id, r.send_bracket_s)
        # the after-stamp would be HELD_S past the arrival; the before-stamp is not after it
        assert r.send_ts <= arrived[r.request_id] + 0.0005, (r.request_id, arrived[r.request_id] - r.send_ts)


def test_an_unheld_write_has_a_narrow_bracket_and_keeps_its_stamp():
    with RawServer() as server:
        results = _measure(server.url, 64, 4)
    widths = sorted(r.send_bracket_s for r in results)
    assert all(w is not None and w >= 0 for w in widths)
    assert widths[len(widths) // 2] < 0.001  # the median write call takes microseconds, even on a busy machine
    assert all(r.send_wide == (r.send_bracket_s > 0.001) for r in results)


# ---- how many client processes ------------------------------------------------------------------------

BUSY_SERVER = """
import socket, sys, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
sys.stdin.read()
"""


@pytest.fixture
def busy_server():
    """A process on this host listening on a port and keeping a core busy, as a local engine under load does."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())  # type: ignore[union-attr]
        yield proc.pid, f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def test_auto_leaves_a_core_to_a_server_on_this_host(monkeypatch, busy_server):
    pid, url = busy_server
    # /proc/stat sees the busy server's core and no other load (this test's machine may be shared)
    monkeypatch.setattr(shards_module, "busy_cores", lambda cpus, sample_s: 1.0)
    cores = _cores()
    choice = shards_module.choose_shards(LoadSettings(), Shape(128, 64, 64 * cores), url)
    assert choice.processes == max(1, cores - 1), choice
    assert f"a server on this host (pid {pid}" in choice.reason and f"of the {cores} cores" in choice.reason


def test_auto_on_one_core_of_affinity_runs_one_process_and_says_why(busy_server):
    _, url = busy_server
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from tasks.config.load import LoadSettings; from tasks.load.plan import Shape; "
            "from tasks.load.shards import choose_shards; "
            f"c = choose_shards(LoadSettings(), Shape(128, 64, 256), {url!r}); print(c.processes); print(c.reason)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    processes, reason = out.splitlines()[:2]
    assert processes == "1" and "of the 1 cores this process may run on" in reason


def test_auto_counts_cores_other_processes_keep_busy(monkeypatch):
    monkeypatch.setattr(shards_module, "cores_available", lambda: 8)
    monkeypatch.setattr(shards_module, "busy_cores", lambda cpus, sample_s: 3.4)
    choice = shards_module.choose_shards(LoadSettings(), Shape(128, 64, 512), None)
    assert choice.processes == 5 and "other processes keep 3 busy" in choice.reason


def test_the_round_records_how_many_processes_auto_chose_and_why(ref_server, make_ctx, short, monkeypatch):
    """Through run_perf: the reference server listens on this host, so auto leaves it a core."""
    from tasks.scenarios.perf import run_perf

    monkeypatch.setattr(shards_module, "busy_cores", lambda cpus, sample_s: 0.0)
    ctx = make_ctx(ref_server.url, "vllm", scenarios=short([4], rounds=1, requests=8),
                   load={"client_processes": "auto", "streams_per_process": 2})
    run_perf(ctx, "short")
    rows = ctx.run_dir.read_rows("client_shards", "sim")
    expected = max(1, min(2, _cores() - 1))
    assert {r["shards"] for r in rows} == {expected}
    assert all("a server on this host" in r["shards_reason"] for r in rows), rows[0]["shards_reason"]


def test_a_local_listener_is_found_by_the_endpoint_port_and_a_remote_one_is_not():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        # this process's own listener is not a server competing with it: only other processes count
        assert shards_module.local_listener_pids(f"http://127.0.0.1:{port}") == []
        assert shards_module.local_listener_pids(f"http://192.0.2.1:{port}") == []  # TEST-NET: not this host
    finally:
        s.close()


def test_the_run_summary_counts_wide_sends_and_says_why_that_many_processes(tmp_path):
    from tasks.config import parse_run_config
    from tasks.report.summary import build_summary
    from tasks.state.storage import RunDir

    cfg = parse_run_config({"run_id": "rep", "engines": [{"name": "eng", "dialect": "sglang"}]})
    run_dir = RunDir("rep", root=tmp_path)
    keys = {"run_id": "rep", "engine": "eng", "image_digest": None, "scenario": "short", "rate_rps": None,
            "concurrency": 128, "input_tokens": 128, "output_tokens": 64, "warmup": False}
    why = "auto: 128 streams want 2 processes (64 each); 1 of the 2 cores this process may run on are free"
    with run_dir.rows("client_shards", "eng", "short") as out:
        out.write({**keys, "round": 1, "shards": 1, "shards_reason": why, "shard": 0, "offset_s": 0.0,
                   "uncertainty_s": 0.0, "wall_s": 10.0, "cpu_s": 4.0, "waited_s": 0.1, "waited_share": 0.01})
    with run_dir.rows("requests", "eng", "short") as out:
        for i, wide in enumerate((False, True, False, True)):
            out.write({**keys, "round": 1, "request_id": f"q{i}", "first_encounter": False, "send_ts": 1.0 + i,
                       "send_bracket_s": 0.004 if wide else 0.00002, "send_wide": wide, "status": "ok"})
    (load,) = build_summary(run_dir, cfg).engines["eng"].client_load
    assert load.wide_sends == 2 and load.processes_reasons == [why]

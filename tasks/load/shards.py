"""A round's requests spread over several client processes: past what one core can time.

Shard k of n takes requests k, k+n, k+2n, ... with its share of the concurrency (closed loop) or those
requests' own arrival times (open loop); all shards start at one moment of CLOCK_MONOTONIC and send each
completed RequestResult back to the parent (a PickleFeed), so the rows and the round's percentiles are
over the merged results exactly as for one process. `choose_shards` says how many (run config `load`).
Each shard's clock offset, CPU and wait for a core go to the `client_shards` table (PROTOCOL.md section
8, "The client's own CPU is on record"); what one core can time: bench/RESULTS.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING, Any

from tasks.engines.access import EndpointAccess
from tasks.engines.base import EngineAdapter
from tasks.load import client as load_client
from tasks.load.client import OnResult, RequestResult, RequestSpec
from tasks.core.pipes import FLUSH_EVERY_S, FRAME, PickleFeed, read_frames, spawn_python
from tasks.load.streamed import Due, replay as streamed_replay, timing_priority

if TYPE_CHECKING:
    from tasks.config.load import LoadSettings
    from tasks.load.plan import Shape

START_MARGIN_S = 0.2  # from the jobs' hand-over to the common start: every shard is waiting by then
PINGS = 5  # per shard; the offset is read from the one with the shortest round trip


@dataclass(frozen=True)
class ShardReport:
    shard: int
    offset_s: float  # the shard's time.time() minus the parent's, at the same moment
    uncertainty_s: float  # half the ping's round trip
    wall_s: float | None = None  # the shard's run, from the common start
    cpu_s: float | None = None  # CPU the shard's process used over its run
    waited_s: float | None = None  # its event loop's time runnable but without a core (Linux)
    requests: int | None = None  # requests the shard sent
    pod: int = 0  # the runner pod the process ran in (tasks/load/pod_shards.py); 0 off the cluster
    pods: int = 1  # runner pods that measured the round together
    pod_cores: int | None = None  # whole cores each of those pods had (kubernetes.runner.cpu)

    @property
    def waited_share(self) -> float | None:
        """The share of its run the shard's event loop waited for a core."""
        if self.waited_s is None or not self.wall_s:
            return None
        return min(1.0, self.waited_s / self.wall_s)


def cores_available() -> int:
    """Cores this process may run on (its affinity: taskset, a cgroup's cpuset), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call (macOS)
        return os.cpu_count() or 1


SAMPLE_S = 0.2  # how long the CPU use of this host's processes is sampled before an auto choice


@dataclass(frozen=True)
class ShardChoice:
    processes: int
    reason: str


@dataclass(frozen=True)
class FreeCores:
    count: int
    reason: str


def local_listener_pids(base_url: str | None) -> list[int]:
    """Processes on this host listening on the endpoint's port, when the endpoint is this host."""
    import ipaddress
    import socket
    from urllib.parse import urlsplit

    import psutil

    if not base_url:
        return []
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addrs = {ai[4][0] for ai in socket.getaddrinfo(parts.hostname or "", port, proto=socket.IPPROTO_TCP)}
        own = {a.address for nics in psutil.net_if_addrs().values() for a in nics}
    except OSError:
        return []
    if not any(ipaddress.ip_address(a.split("%")[0]).is_loopback or a in own for a in addrs):
        return []
    try:
        conns = psutil.net_connections("tcp")
    except (psutil.AccessDenied, OSError):
        return []
    return sorted({c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   and c.pid is not None and c.pid != os.getpid()})


def busy_cores(cpus: set[int], sample_s: float) -> float:
    """Cores' worth of time the CPUs `cpus` were busy over the next `sample_s` (/proc/stat via psutil)."""
    import psutil

    before = psutil.cpu_times(percpu=True)
    time.sleep(sample_s)
    after = psutil.cpu_times(percpu=True)
    busy = 0.0
    for cpu in cpus:
        if cpu < min(len(before), len(after)):
            a, b = before[cpu], after[cpu]
            total = sum(b) - sum(a)
            idle = (b.idle + getattr(b, "iowait", 0.0)) - (a.idle + getattr(a, "iowait", 0.0))
            busy += 0.0 if total <= 0 else max(0.0, 1.0 - idle / total)
    return busy


def free_cores(server_pids: Sequence[int] = (), sample_s: float = SAMPLE_S) -> FreeCores:
    """Cores a load client may take: this process's affinity, less a core or more per server process on
    this host that shares them, less the cores other processes keep busy over `sample_s`."""
    import psutil

    allowed = cores_available()
    try:
        mine = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        mine = set(range(allowed))
    servers = []
    for pid in server_pids:
        try:
            p = psutil.Process(pid)
            servers.append((p, len(mine & set(p.cpu_affinity() or mine)), p.cpu_times()))
        except (psutil.Error, AttributeError):
            continue
    t0 = time.monotonic()
    busy = busy_cores(mine, sample_s)
    elapsed = time.monotonic() - t0
    reserved, server_busy, notes = 0, 0.0, []
    for p, shared, cpu0 in servers:
        if not shared:
            continue
        try:
            cpu1 = p.cpu_times()
        except psutil.Error:
            continue
        used = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / elapsed
        server_busy += used
        take = min(shared, max(1, math.ceil(used - 0.05)))
        reserved += take
        notes.append(f"a server on this host (pid {p.pid}, using {used:.1f} cores now) keeps {take}")
    # this process sleeps through the sample: what is busy is other processes', the servers' counted once
    others = int(max(0.0, busy - server_busy))  # whole cores only: a half-busy core still takes a shard
    if others:
        notes.append(f"other processes keep {others} busy")
    count = max(1, allowed - reserved - others)
    why = f"{count} of the {allowed} cores this process may run on are free" + (f" ({'; '.join(notes)})" if notes else "")
    return FreeCores(count, why)


def choose_shards(settings: LoadSettings, shape: Shape, base_url: str | None = None,
                  requests: int | None = None) -> ShardChoice:
    """Client processes for a round of `shape` (and, open loop, its `requests`) against `base_url`, and
    why. The streams a round can have in flight: its concurrency (closed loop), or, open loop, its request
    count: in-flight there is rate x E2E, which is not known before the round, and the count bounds it."""
    if shape.concurrency is None and requests is None:
        raise ValueError(f"an open-loop round's streams are its request count: give requests for {shape.key}")
    streams = max(1, shape.streams(requests or 0))
    if settings.client_processes != "auto":
        n = max(1, min(int(settings.client_processes), streams))
        return ShardChoice(n, f"{n} as the run config asks (load.client_processes)")
    wanted = -(-streams // settings.streams_per_process)  # ceiling
    if wanted == 1:
        return ShardChoice(1, f"auto: {streams} streams fit one process ({settings.streams_per_process} each)")
    free = free_cores(local_listener_pids(base_url))
    n = max(1, min(wanted, free.count))
    return ShardChoice(n, f"auto: {streams} streams want {wanted} processes ({settings.streams_per_process} each); "
                          f"{free.reason}: {n}")


def shards_for(settings: LoadSettings, shape: Shape, base_url: str | None = None, requests: int | None = None) -> int:
    return choose_shards(settings, shape, base_url, requests).processes


def shard_plan(settings: LoadSettings, shape: Shape, base_url: str | None = None,
               requests: int | None = None) -> dict[str, Any]:
    """A RoundPlan's `shards` and `shards_reason`."""
    choice = choose_shards(settings, shape, base_url, requests)
    return {"shards": choice.processes, "shards_reason": choice.reason}


def runqueue_wait_s() -> float | None:
    """Time this thread has spent runnable but waiting for a core (Linux schedstat), or None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class UsageMeter:
    """A client's run from creation to stop(), measured on the timing loop's thread: its wall time, its
    process's CPU (every thread), and the time that thread was runnable but had no core."""

    def __init__(self) -> None:
        self._t0, self._cpu0, self._waited0 = time.monotonic(), time.process_time(), runqueue_wait_s()

    def stop(self) -> dict[str, float | None]:
        waited1 = runqueue_wait_s()
        return {"wall_s": time.monotonic() - self._t0, "cpu_s": time.process_time() - self._cpu0,
                "waited_s": None if self._waited0 is None or waited1 is None else waited1 - self._waited0}


def one_process(usage: dict[str, float | None], requests: int) -> ShardReport:
    """A round of one process, reported as shard 0 on the parent's own clock."""
    return ShardReport(0, 0.0, 0.0, requests=requests, **usage)


def client_rows(keys: dict[str, Any], reports: Sequence[ShardReport], reason: str | None = None) -> list[dict[str, Any]]:
    """The round's client_shards rows: `keys` (the round's columns) and one row per shard."""
    return [{**keys, "shards": len(reports), "shards_reason": reason, "shard": r.shard, "requests": r.requests, "offset_s": r.offset_s,
             "uncertainty_s": r.uncertainty_s, "wall_s": r.wall_s, "cpu_s": r.cpu_s, "waited_s": r.waited_s,
             "waited_share": r.waited_share, "pod": r.pod, "pods": r.pods, "pod_cores": r.pod_cores} for r in reports]


@dataclass(frozen=True)
class _Job:
    base_url: str
    specs: list[RequestSpec]
    adapter: EngineAdapter
    timeout_s: float
    keep_alive: bool
    access: EndpointAccess | None  # the engine's key and TLS trust (handed over the pipe, never stored)
    start_mono: float  # time.monotonic() of the start, the same clock in every process
    concurrency: int | None  # closed loop
    ramp_s: float
    arrivals_s: list[float] | None  # open loop: seconds after the start
    streamed: bool = False  # the requests follow the job down the pipe, each with its time (run_streamed)


def split(count: int, shards: int) -> list[list[int]]:
    """Request indexes per shard, dealt round-robin (a shard with none is left out)."""
    return [idx for k in range(shards) if (idx := list(range(k, count, shards)))]


async def run_sharded(
    base_url: str,
    specs: Sequence[RequestSpec],
    adapter: EngineAdapter,
    timeout_s: float,
    shards: int,
    *,
    concurrency: int | None = None,
    arrivals_s: Sequence[float] | None = None,
    on_result: OnResult | None = None,
    keep_alive: bool = True,
    ramp_s: float = 0.0,
    access: EndpointAccess | None = None,
    start_mono: float | None = None,
) -> tuple[list[RequestResult], list[ShardReport]]:
    """Closed loop (`concurrency` in flight in all) or open loop (`arrivals_s`), over `shards`
    processes; the results in the order of `specs`, and each shard's report. `start_mono`: the common
    start (time.monotonic()) when a caller set it (runner pods measuring together); default shortly."""
    if (concurrency is None) == (arrivals_s is None):
        raise ValueError("give either concurrency (closed loop) or arrivals_s (open loop)")
    if arrivals_s is not None and len(arrivals_s) != len(specs):
        raise ValueError("one arrival time per request is needed")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    shares = split(len(specs), min(shards, concurrency or shards))
    procs = [spawn_python("from tasks.load.shards import _shard_main; _shard_main()",
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in shares]
    try:
        clocks = [_ping(k, p) for k, p in enumerate(procs)]
        start = time.monotonic() + START_MARGIN_S if start_mono is None else start_mono
        n, total = len(shares), concurrency or 0
        for k, (proc, idx) in enumerate(zip(procs, shares)):
            share = None if concurrency is None else concurrency // n + (k < concurrency % n)
            # a ramp starts worker j of shard k when one process would start its worker j*n + k
            ramp_k = ramp_s * n * share / total if share and ramp_s else 0.0
            job = _Job(base_url, [specs[i] for i in idx], adapter, timeout_s, keep_alive, access,
                       start + (ramp_s * k / total if ramp_k else 0.0), share, ramp_k,
                       None if arrivals_s is None else [arrivals_s[i] for i in idx])
            _send(proc.stdin, job)
            proc.stdin.close()  # type: ignore[union-attr]
        loop = asyncio.get_running_loop()
        by_id: dict[str, RequestResult] = {}

        def deliver(r: RequestResult) -> None:
            by_id[r.request_id] = r
            if on_result is not None:
                on_result(r)

        usage: dict[int, dict[str, float | None]] = {}

        def collect(k: int, proc: subprocess.Popen) -> int:
            assert proc.stdout is not None
            for obj in read_frames(proc.stdout):
                if isinstance(obj, RequestResult):
                    loop.call_soon_threadsafe(deliver, obj)
                elif isinstance(obj, dict):  # the shard's own usage, last
                    usage[k] = obj
            return proc.wait()

        codes = await asyncio.gather(*(asyncio.to_thread(collect, k, p) for k, p in enumerate(procs)))
    finally:
        _reap(procs)
    _check_exits(codes)
    reports = [replace(c, requests=len(shares[c.shard]), **usage.get(c.shard, {})) for c in clocks]
    return [by_id[s.request_id] for s in specs if s.request_id in by_id], reports


def _reap(procs: Sequence[subprocess.Popen]) -> None:
    """Kill the client processes still running (a send raised, the round was cancelled)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _check_exits(codes: Sequence[int]) -> None:
    failed = [k for k, code in enumerate(codes) if code != 0]
    if failed:
        raise RuntimeError(f"load shard(s) {failed} exited with {[codes[k] for k in failed]}")


def _send(pipe: IO[bytes] | None, obj: Any) -> None:
    assert pipe is not None
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    pipe.write(FRAME.pack(len(data)) + data + FRAME.pack(0))
    pipe.flush()


def _ping(k: int, proc: subprocess.Popen) -> ShardReport:
    """The shard's clock offset from the ping with the shortest round trip: the first one also waits for
    the shard's start (Python and its imports, 0.1-1 s), the later ones only for the pipes."""
    assert proc.stdout is not None
    return ping(k, proc.stdin, read_frames(proc.stdout))


def ping(k: int, out: IO[bytes] | None, frames: Any) -> ShardReport:
    """Shard k's clock offset over a pipe that answers each "ping" with its time.time()."""

    def ask() -> float:
        _send(out, "ping")
        shard_t = next(frames)
        next(frames)  # the batch end
        return shard_t

    return clock_offset(k, ask)


def clock_offset(k: int, ask: Callable[[], float]) -> ShardReport:
    """Shard k's clock offset over a link whose `ask()` returns the other end's time.time() (a pipe, or a
    runner pod's connection): NTP's estimate from the exchange with the shortest round trip."""
    best: tuple[float, float, float] | None = None
    for _ in range(PINGS):
        t1 = time.time()
        shard_t = ask()
        t2 = time.time()
        if best is None or t2 - t1 < best[1] - best[0]:
            best = (t1, t2, shard_t)
    assert best is not None
    t1, t2, shard_t = best
    return ShardReport(k, shard_t - (t1 + t2) / 2, (t2 - t1) / 2)


def _shard_main() -> None:
    """A shard: answers each ping with its clock, then runs its job and feeds back each result."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # stray prints must not corrupt the frames
    frames = read_frames(sys.stdin.buffer)
    while (job := next(frames)) in ("ping", None):
        if job == "ping":
            data = pickle.dumps(time.time(), pickle.HIGHEST_PROTOCOL)
            out.write(FRAME.pack(len(data)) + data + FRAME.pack(0))
            out.flush()
    if not isinstance(job, _Job):
        raise SystemExit(f"load shard: expected a ping or a job, got {type(job).__name__}")
    # Before its threads start, so that each has it (one that held the GIL and waited for a core would hold up the
    # loop): a streamed job is a trace's replay, whose sends wait for nothing but their time.
    priority = timing_priority() if job.streamed else None
    feed = PickleFeed(out, FLUSH_EVERY_S, "dayone-shard-feed")
    try:
        usage = load_client.run_async(_run_job(job, feed.put, frames if job.streamed else None))
        feed.put(usage if priority is None else {**usage, "priority": priority})
    finally:
        feed.close()
    if feed.error is not None:
        raise SystemExit(f"load shard: the results could not be handed back: {feed.error!r}")


async def _run_job(job: _Job, on_result: OnResult, streamed: Iterator[Any] | None = None) -> dict[str, float | None]:
    """Run the job from the common start; the shard's wall time, CPU and wait for a core. `streamed`: where a
    streamed job's requests come from (batches of Due, then the end of the input)."""
    schedule = None if streamed is None else _queue_streamed(streamed)
    async with load_client.new_session(job.keep_alive, job.access) as session:
        # The client's opening collection (client.timing_window) would run after the common start and delay this
        # shard's first sends (8-14 ms here): collected now, and what exists now frozen out of later ones.
        gc.collect()
        gc.freeze()
        if schedule is not None:  # its replay waits for each request's own time, the first included, precisely
            meter = UsageMeter()
            _, peak = await streamed_replay(session, job.base_url, schedule, job.start_mono, job.adapter,
                                            job.timeout_s, on_result)
            return {**meter.stop(), "peak_in_flight": peak}
        delay = job.start_mono - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        meter = UsageMeter()
        if job.arrivals_s is None:
            assert job.concurrency is not None
            await load_client.run_closed_loop(session, job.base_url, job.specs, job.concurrency, job.adapter,
                                              job.timeout_s, on_result, job.ramp_s)
        else:
            await load_client.run_open_loop(session, job.base_url, job.specs, job.arrivals_s, job.adapter,
                                            job.timeout_s, on_result)
        return meter.stop()


def _queue_streamed(frames: Iterator[Any]) -> asyncio.Queue[Due | None]:
    """The streamed requests as the loop takes them: a thread reads the pipe (its reads release the GIL; an
    unpickled batch is the requests' bytes copied) and queues each batch on the loop; None at the input's end."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Due | None] = asyncio.Queue()

    def read() -> None:
        try:
            for batch in frames:
                if batch:
                    loop.call_soon_threadsafe(_put_all, queue, batch)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, name="dayone-shard-schedule", daemon=True).start()
    return queue


def _put_all(queue: asyncio.Queue[Due | None], batch: list[Due]) -> None:
    for item in batch:
        queue.put_nowait(item)


LEAD_S = 1.0  # a streamed schedule reaches its shards this far ahead of its times (memory: rate x this)
# Requests per frame at most; a frame whose first request is due within LEAD_S / 2 goes at once (where the
# schedule itself arrives late, from runner pod 0, or at the start).
STREAM_BATCH = 64


async def run_streamed(
    base_url: str,
    schedule: Iterable[Due],
    adapter: EngineAdapter,
    timeout_s: float,
    shards: int,
    *,
    on_result: Callable[[RequestResult, float], object],
    keep_alive: bool = True,
    access: EndpointAccess | None = None,
    start_mono: float | Callable[[], float] | None = None,
) -> StreamedRun:
    """Open loop over a schedule too long to list (a request trace), over `shards` client processes: request i
    goes to shard i mod n, each shard sends its own at their times on its own clock from the common start. This
    process only reads the schedule (building each request: `schedule` is iterated on a thread of its own) and
    hands each shard its requests LEAD_S ahead; the shards' loops wait, stamp and send, nothing else.
    `on_result(result, due_ts)` takes each completed request with its due time, both on this process's clock
    (a shard's send stamp less its measured offset). Returns what was sent, and each shard's report.
    `start_mono`: the common start (time.monotonic()) when a caller set it, or what sets it once this process's
    shards are up and their clocks read (runner pods agreeing on one start); default shortly."""
    items = iter(schedule)
    head: list[Due] = []
    for item in items if start_mono is None else ():  # what is due first is built before the start is set
        head.append(item)
        if item.offset_s > LEAD_S:
            break
    procs = [spawn_python("from tasks.load.shards import _shard_main; _shard_main()",
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(max(1, shards))]
    n = len(procs)
    feeder: threading.Thread | None = None
    fed: list[BaseException] = []
    try:
        clocks = [_ping(k, p) for k, p in enumerate(procs)]
        if start_mono is None:
            start = time.monotonic() + START_MARGIN_S
        else:
            start = start_mono() if callable(start_mono) else start_mono
        start_wall = time.time() + (start - time.monotonic())
        due_of: dict[str, float] = {}  # request id -> its offset, from when it is handed over to its answer
        for proc in procs:
            _send(proc.stdin, _Job(base_url, [], adapter, timeout_s, keep_alive, access, start, None, 0.0, None,
                                   streamed=True))
        loop = asyncio.get_running_loop()
        offsets = {k: c.offset_s for k, c in enumerate(clocks)}
        sent = [0] * n

        def due_soon(item: Due) -> bool:
            return start + item.offset_s - time.monotonic() < LEAD_S / 2

        def feed() -> None:
            batches: list[list[Due]] = [[] for _ in procs]

            def flush(k: int) -> None:
                if batches[k]:
                    _send(procs[k].stdin, batches[k])
                    batches[k] = []

            try:
                for i, item in enumerate(_chain(head, items)):
                    k = i % n
                    ahead = start + item.offset_s - LEAD_S - time.monotonic()
                    if ahead > 0:  # everything due within LEAD_S is with its shard; the rest waits here
                        for j in range(n):
                            flush(j)
                        time.sleep(ahead)
                    due_of[item.spec.request_id] = item.offset_s
                    batches[k].append(item)
                    sent[k] += 1
                    if len(batches[k]) >= STREAM_BATCH or due_soon(batches[k][0]):
                        flush(k)
                for j in range(n):
                    flush(j)
            except BaseException as exc:  # noqa: BLE001  (a bad row of the schedule: raised after the shards end)
                fed.append(exc)
            finally:
                for proc in procs:
                    with contextlib.suppress(OSError):
                        proc.stdin.close()  # type: ignore[union-attr]

        feeder = threading.Thread(target=feed, name="dayone-schedule-feed", daemon=True)
        feeder.start()
        usage: dict[int, dict[str, float | None]] = {}

        def collect(k: int, proc: subprocess.Popen) -> int:
            assert proc.stdout is not None
            for obj in read_frames(proc.stdout):
                if isinstance(obj, RequestResult):
                    loop.call_soon_threadsafe(on_result, replace(obj, send_ts=obj.send_ts - offsets[k]),
                                              start_wall + due_of.pop(obj.request_id))
                elif isinstance(obj, dict):  # the shard's own usage, last
                    peaks[k] = int(obj.pop("peak_in_flight", 0) or 0)
                    priorities[k] = str(obj.pop("priority", "none"))
                    usage[k] = obj
            return proc.wait()

        peaks: dict[int, int] = {}
        priorities: dict[int, str] = {}
        codes = await asyncio.gather(*(asyncio.to_thread(collect, k, p) for k, p in enumerate(procs)))
        await asyncio.to_thread(feeder.join)
    finally:
        _reap(procs)
    _check_exits(codes)
    if fed:
        raise fed[0]
    reports = [replace(c, requests=sent[c.shard], **usage.get(c.shard, {})) for c in clocks]
    return StreamedRun(sum(sent), sum(peaks.values()), reports, sorted(set(priorities.values())))


@dataclass(frozen=True)
class StreamedRun:
    sent: int
    peak_in_flight: int  # the shards' own peaks summed: exact with one shard, at most that with several
    reports: list[ShardReport]
    priorities: list[str]  # what the shards' timing threads were granted (streamed.timing_priority)


def _chain(head: list[Due], rest: Iterator[Due]) -> Iterator[Due]:
    yield from head
    yield from rest

"""A round spread over runner pods (kubernetes.measure_from: cluster): past what one pod's cores carry.

Shard 0 (the step's own pod) listens, and names where and with which token in a rendezvous object of
the run's S3 staging; no round starts before every peer pod has joined. Per round it measures each
peer's clock offset (NTP's exchange over the link), sends each its share with the common start in the
peer's own clock, and merges the results as process shards do (tasks/load/shards.py). PROTOCOL.md
section 8, "Runner pods measuring one round together".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import socket
import time
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import IO, Any, Protocol

from tasks.engines.access import EndpointAccess
from tasks.engines.base import EngineAdapter
from tasks.load import client as load_client
from tasks.load.client import OnResult, RequestResult, RequestSpec
from tasks.load.shards import ShardReport, _Job, _run_job, _send, one_process, ping, run_sharded, split
from tasks.core.pipes import FLUSH_EVERY_S, PickleFeed, read_frames

POD_IP_ENV = "DAYONE_POD_IP"  # the downward API's status.podIP: where peers reach shard 0
# From the hand-over to the common start: a pod's share may first start its own client processes
# (Python and its imports, 0.1-1 s) and ping them.
POD_START_MARGIN_S = 1.5
JOIN_POLL_S = 0.2


class Staging(Protocol):
    """Where the pods meet: the run's storage (tasks/state/storage.py RunDir), passed in."""

    def read_json(self, name: str, default: Any = None) -> Any: ...

    def write_json(self, name: str, doc: Any) -> Any: ...


def pod_group(step: str, engines: Sequence[str]) -> str:
    """The name one step's pods share (its rendezvous, the peers' label)."""
    return "-".join([step, *engines])


def rendezvous_doc(group: str) -> str:
    return f"state/pod_shards/{group}.json"


def parse_shard(text: str) -> tuple[int, int]:
    """`--shard K/N`: this pod is shard K of N (0 <= K < N)."""
    k, _, n = text.partition("/")
    shard, pods = int(k), int(n)
    if not 0 <= shard < pods:
        raise ValueError(f"--shard {text}: K/N with 0 <= K < N")
    return shard, pods


@dataclass(frozen=True)
class PodJob:
    job: _Job  # its start_mono unused: each pod converts start_unix to its own monotonic clock
    start_unix: float  # the common start, in the receiving pod's own time.time()
    processes: int  # client processes the pod spreads its share over


class _KeepOpen:
    """A socket's file for one round's PickleFeed, which closes its pipe when done: the link stays."""

    def __init__(self, f: IO[bytes]):
        self._f = f

    def write(self, data: bytes) -> int:
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.flush()


async def measure_share(job: _Job, start_unix: float, processes: int, on_result: OnResult) -> list[ShardReport]:
    """One pod's share of a round from the common start (its own clock): its processes' reports, their
    offsets against this pod's own."""
    start_mono = time.monotonic() + (start_unix - time.time())
    if processes <= 1:
        usage = await _run_job(replace(job, start_mono=start_mono), on_result)
        return [one_process(usage, len(job.specs))]
    _, reports = await run_sharded(job.base_url, job.specs, job.adapter, job.timeout_s, processes,
                                   concurrency=job.concurrency, arrivals_s=job.arrivals_s, on_result=on_result,
                                   keep_alive=job.keep_alive, access=job.access, start_mono=start_mono)
    return reports


@dataclass
class _Peer:
    sock: socket.socket
    out: IO[bytes]
    frames: Iterator[Any]


class PodShards:
    """Shard 0's side: the peer pods of one step, joined once, measuring the rounds that need them."""

    def __init__(self, run_dir: Staging, group: str, pods: int, cores: int, streams_per_process: int,
                 join_timeout_s: float, host: str | None = None):
        self.run_dir, self.group, self.pods, self.cores = run_dir, group, pods, cores
        self.streams_per_process, self.join_timeout_s = streams_per_process, join_timeout_s
        self.host = host or os.environ.get(POD_IP_ENV) or socket.gethostbyname(socket.gethostname())
        self.peers: dict[int, _Peer] = {}

    # ---- the barrier ---------------------------------------------------------------------------
    def join(self) -> None:
        """Publish the rendezvous and wait for every peer (a fresh token each try: a peer of an earlier
        try cannot join)."""
        token = secrets.token_hex(16)
        listener = socket.create_server((self.host, 0))
        listener.settimeout(JOIN_POLL_S)
        port = listener.getsockname()[1]
        self.run_dir.write_json(rendezvous_doc(self.group), {"host": self.host, "port": port, "token": token,
                                                             "pods": self.pods})
        deadline = time.monotonic() + self.join_timeout_s
        try:
            while len(self.peers) < self.pods - 1:
                if time.monotonic() > deadline:
                    missing = sorted(set(range(1, self.pods)) - set(self.peers))
                    raise RuntimeError(f"runner pod shard(s) {missing} of {self.group} did not join within "
                                       f"{self.join_timeout_s:.0f} s (kubernetes.runner.startup_timeout_s)")
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    continue
                sock.settimeout(10)
                hello = sock.makefile("rb").readline().decode(errors="replace").split()
                if len(hello) != 2 or not secrets.compare_digest(hello[0], token) or not hello[1].isdigit() \
                        or not 0 < int(hello[1]) < self.pods:
                    sock.close()  # not a peer of this try: nothing of it is unpickled
                    continue
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.peers[int(hello[1])] = _Peer(sock, sock.makefile("wb"), read_frames(sock.makefile("rb")))
        finally:
            listener.close()

    def close(self) -> None:
        for peer in self.peers.values():
            with contextlib.suppress(OSError):
                _send(peer.out, "bye")
                peer.sock.close()
        self.peers.clear()

    # ---- a round -------------------------------------------------------------------------------
    def pods_for(self, streams: int) -> int:
        """Pods a round of `streams` streams takes: one per streams_per_process x cores, at most all."""
        return max(1, min(self.pods, math.ceil(streams / (self.streams_per_process * self.cores))))

    def reason(self, pods: int, streams: int) -> str:
        return (f"{streams} streams over {pods} runner pods of {self.cores} core{'s' if self.cores > 1 else ''} "
                f"({self.streams_per_process} streams per process)")

    def _processes(self, streams: int) -> int:
        return max(1, min(self.cores, math.ceil(streams / self.streams_per_process)))

    async def measure(self, pods: int, base_url: str, specs: Sequence[RequestSpec], adapter: EngineAdapter,
                      timeout_s: float, *, concurrency: int | None = None, arrivals_s: Sequence[float] | None = None,
                      on_result: OnResult | None = None, keep_alive: bool = True,
                      access: EndpointAccess | None = None) -> tuple[list[RequestResult], list[ShardReport]]:
        """The round over `pods` pods (this one and pods-1 peers): results in the order of `specs`, and a
        report per client process, its offset against this pod's parent process."""
        shares = split(len(specs), min(pods, concurrency or pods))
        n = len(shares)
        clocks = {k: await asyncio.to_thread(ping, k, self.peers[k].out, self.peers[k].frames) for k in range(1, n)}
        start_unix = time.time() + POD_START_MARGIN_S
        jobs = []
        for k, idx in enumerate(shares):
            share = None if concurrency is None else concurrency // n + (k < concurrency % n)
            job = _Job(base_url, [specs[i] for i in idx], adapter, timeout_s, keep_alive, access, 0.0, share, 0.0,
                       None if arrivals_s is None else [arrivals_s[i] for i in idx])
            jobs.append((job, self._processes(share or len(idx))))
        for k in range(1, n):  # the start in the peer's clock: ours plus its offset
            job, processes = jobs[k]
            await asyncio.to_thread(_send, self.peers[k].out, PodJob(job, start_unix + clocks[k].offset_s, processes))
        loop = asyncio.get_running_loop()
        by_id: dict[str, RequestResult] = {}

        def deliver(r: RequestResult) -> None:
            by_id[r.request_id] = r
            if on_result is not None:
                on_result(r)

        def collect(k: int) -> list[ShardReport]:
            for obj in self.peers[k].frames:
                if isinstance(obj, RequestResult):
                    loop.call_soon_threadsafe(deliver, obj)
                elif isinstance(obj, dict):  # its last object: then the end of that batch
                    next(self.peers[k].frames, None)
                    if "error" in obj:
                        raise RuntimeError(f"runner pod shard {k}: {obj['error']}")
                    return obj["reports"]
            raise RuntimeError(f"runner pod shard {k} left before its share was measured")

        own = measure_share(jobs[0][0], start_unix, jobs[0][1], deliver)
        per_pod = await asyncio.gather(own, *(asyncio.to_thread(collect, k) for k in range(1, n)))
        reports, first = [], 0
        for k, pod_reports in enumerate(per_pod):
            offset, uncertainty = (clocks[k].offset_s, clocks[k].uncertainty_s) if k else (0.0, 0.0)
            for r in pod_reports:
                reports.append(replace(r, shard=first + r.shard, offset_s=offset + r.offset_s,
                                       uncertainty_s=uncertainty + r.uncertainty_s, pod=k, pods=n,
                                       pod_cores=self.cores))
            first += len(pod_reports)
        return [by_id[s.request_id] for s in specs if s.request_id in by_id], reports


# The step's peers while shard 0 runs it (set by `dayone step --shard 0/N`): a round reads it to spread
# its load; a context variable, so nothing else of the step's signatures changes.
_ACTIVE: ContextVar[PodShards | None] = ContextVar("dayone_pod_shards", default=None)


def active() -> PodShards | None:
    return _ACTIVE.get()


@contextlib.contextmanager
def leading(shards: PodShards) -> Iterator[PodShards]:
    """Shard 0 over the step: the peers joined before, told to leave after."""
    shards.join()
    token = _ACTIVE.set(shards)
    try:
        yield shards
    finally:
        _ACTIVE.reset(token)
        shards.close()


def serve_peer(run_dir: Staging, group: str, shard: int, join_timeout_s: float) -> int:
    """A peer pod: join shard 0 through the rendezvous, then answer pings and measure each share it is
    sent, until shard 0 says bye (0) or leaves (1)."""
    deadline = time.monotonic() + join_timeout_s
    sock = None
    while sock is None:
        doc = run_dir.read_json(rendezvous_doc(group))
        if doc:
            try:
                sock = socket.create_connection((doc["host"], doc["port"]), timeout=5)
                sock.sendall(f"{doc['token']} {shard}\n".encode())
            except OSError:
                sock = None  # an earlier try's rendezvous, or shard 0 not listening yet
        if sock is None:
            if time.monotonic() > deadline:
                print(f"runner pod shard {shard} of {group}: shard 0 never published where to join", flush=True)
                return 1
            time.sleep(JOIN_POLL_S)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = sock.makefile("wb")
    print(f"runner pod shard {shard} of {group}: joined", flush=True)
    for obj in read_frames(sock.makefile("rb")):
        if obj == "ping":
            _send(out, time.time())
        elif obj == "bye":
            return 0
        elif isinstance(obj, PodJob):
            feed = PickleFeed(_KeepOpen(out), FLUSH_EVERY_S, "dayone-pod-shard-feed")  # type: ignore[arg-type]
            try:
                reports = load_client.run_async(measure_share(obj.job, obj.start_unix, obj.processes, feed.put))
                feed.put({"reports": reports})
            except Exception as exc:  # shard 0 names it in the round's error
                feed.put({"error": repr(exc)})
            finally:
                feed.close()
            print(f"runner pod shard {shard} of {group}: measured {len(obj.job.specs)} requests", flush=True)
    return 1

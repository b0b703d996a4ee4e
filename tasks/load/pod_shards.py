"""A round spread over runner pods (kubernetes.measure_from: cluster): past what one pod's cores carry.

Shard 0 (the step's own pod) listens, and names where and with which secret in a rendezvous object of
the run's S3 staging; no round starts before every peer pod has joined. Per round it measures each
peer's clock offset (NTP's exchange over the link), sends each its share with the common start in the
peer's own clock, and merges the results as process shards do (tasks/load/shards.py), each peer's send
times first put on shard 0's clock. The link is signed (tasks/core/signed_link.py) and its messages are
typed (msgspec): a pod acts on no byte the other end did not sign, and decodes no object a message names.
The engine's API key never crosses it: a peer reads it where the step's pod does, from its own
environment. PROTOCOL.md section 8, "Runner pods measuring one round together".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, Protocol

import msgspec

from tasks.core.pipes import FLUSH_EVERY_S, Feed
from tasks.core.signed_link import LinkRefused, SignedLink, accept_link, open_link
from tasks.engines import adapter_for
from tasks.engines.access import EndpointAccess, api_key_env
from tasks.engines.base import EngineAdapter
from tasks.load import client as load_client
from tasks.load.client import OnResult, RequestResult, RequestSpec
from tasks.load.shards import (LEAD_S, STREAM_BATCH, ShardReport, StreamedRun, _Job, _run_job, clock_offset,
                               one_process, run_sharded, run_streamed, split)
from tasks.load.streamed import Due

POD_IP_ENV = "DAYONE_POD_IP"  # the downward API's status.podIP: where peers reach shard 0
# From the hand-over to the common start: a pod's share may first start its own client processes
# (Python and its imports, 0.1-1 s) and ping them.
POD_START_MARGIN_S = 1.5
# A streamed round's start, once every pod's processes are up (they say so): the link's round trip and the rows
# due first dealt, with room.
STREAM_START_MARGIN_S = 0.3
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


# ---- what crosses the link: typed messages, nothing else decodes ------------------------------------
class Ping(msgspec.Struct, tag=True):
    pass


class Clock(msgspec.Struct, tag=True):
    t: float  # the peer's time.time()


class Bye(msgspec.Struct, tag=True):
    pass


class Share(msgspec.Struct, tag=True):
    """A peer's share of a round. The engine's key is not in it: the peer reads `engine`'s from its own
    environment (the kubelet filled it from the engine's Secret) when `keyed`."""

    base_url: str
    specs: list[RequestSpec]
    dialect: str
    timeout_s: float
    keep_alive: bool
    engine: str | None
    keyed: bool
    ca_bundle: str | None
    verify: bool
    concurrency: int | None
    arrivals_s: list[float] | None
    start_unix: float  # the common start, in the receiving pod's own time.time()
    processes: int  # client processes the pod spreads its share over


class StreamShare(msgspec.Struct, tag=True):
    """A peer's share of a streamed round (a trace): its requests follow as Rows, each with its time, until
    RowsEnd; sent LEAD_S ahead of their times (shards.run_streamed). The key as for a Share."""

    base_url: str
    dialect: str
    timeout_s: float
    keep_alive: bool
    engine: str | None
    keyed: bool
    ca_bundle: str | None
    verify: bool
    processes: int


class Ready(msgspec.Struct, tag=True):
    """A peer's client processes are up and their clocks read: the common start may be set."""


class Start(msgspec.Struct, tag=True):
    start_unix: float  # the common start, in the receiving pod's own time.time()


class Rows(msgspec.Struct, tag=True):
    items: list[Due]


class RowsEnd(msgspec.Struct, tag=True):
    pass


class Result(msgspec.Struct, tag=True):
    result: RequestResult


class Measured(msgspec.Struct, tag=True):
    reports: list[ShardReport]


class Failed(msgspec.Struct, tag=True):
    error: str


Message = Ping | Clock | Bye | Share | StreamShare | Ready | Start | Rows | RowsEnd | Result | Measured | Failed
_encode = msgspec.msgpack.Encoder().encode
_decoder = msgspec.msgpack.Decoder(Message)


def send(link: SignedLink, message: Message) -> None:
    link.send(_encode(message))


def receive(link: SignedLink) -> Message | None:
    """The next message, signed by the other end; None when it closed the link."""
    payload = link.recv()
    if payload is None:
        return None
    try:
        return _decoder.decode(payload)
    except msgspec.ValidationError as exc:  # signed, so a peer's bug, not an attack: named, never guessed at
        raise LinkRefused(f"an unknown message on the link: {exc}") from None


def share_access(share: Share | StreamShare) -> EndpointAccess:
    """How the peer reaches the engine: the key from its own environment, the TLS trust from the share."""
    key = os.environ.get(api_key_env(share.engine)) if share.keyed and share.engine else None
    if share.keyed and not key:
        raise RuntimeError(f"engine {share.engine}: no API key in {api_key_env(share.engine or '')} of this pod "
                           "(its spec reads it from the engine's api_key_secret)")
    return EndpointAccess(api_key=key, ca_bundle=share.ca_bundle, verify=share.verify)


def share_job(share: Share) -> _Job:
    """The peer's job from its share: its own adapter, and the key from its own environment."""
    access = share_access(share)
    # its start_mono unused: each pod converts start_unix to its own monotonic clock
    return _Job(share.base_url, share.specs, adapter_for(share.dialect), share.timeout_s, share.keep_alive, access,
                0.0, share.concurrency, 0.0, share.arrivals_s)


class _KeepOpen:
    """The link for one round's Feed, which closes its pipe when done: the link stays."""

    def __init__(self, link: SignedLink):
        self._link = link

    def write(self, data: bytes) -> int:
        return self._link.write(data)

    def flush(self) -> None:
        self._link.flush()

    def close(self) -> None:
        self._link.flush()


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


class PodShards:
    """Shard 0's side: the peer pods of one step, joined once, measuring the rounds that need them."""

    def __init__(self, run_dir: Staging, group: str, pods: int, cores: int, streams_per_process: int,
                 join_timeout_s: float, host: str | None = None):
        self.run_dir, self.group, self.pods, self.cores = run_dir, group, pods, cores
        self.streams_per_process, self.join_timeout_s = streams_per_process, join_timeout_s
        self.host = host or os.environ.get(POD_IP_ENV) or socket.gethostbyname(socket.gethostname())
        self.peers: dict[int, SignedLink] = {}

    # ---- the barrier ---------------------------------------------------------------------------
    def join(self) -> None:
        """Publish the rendezvous and wait for every peer (a fresh secret each try: a peer of an earlier
        try cannot join, nor anything that does not hold it)."""
        secret = secrets.token_hex(32)
        listener = socket.create_server((self.host, 0))
        listener.settimeout(JOIN_POLL_S)
        port = listener.getsockname()[1]
        self.run_dir.write_json(rendezvous_doc(self.group), {"host": self.host, "port": port, "secret": secret,
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
                try:
                    shard, link = accept_link(sock, secret, range(1, self.pods))
                except (LinkRefused, OSError) as exc:  # not a peer of this try: nothing of it is used
                    print(f"runner pod shards of {self.group}: a connection refused: {exc}", flush=True)
                    sock.close()
                    continue
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if shard in self.peers:  # the first of a shard's links stays; a second is not that peer's
                    link.close()
                    continue
                self.peers[shard] = link
        finally:
            listener.close()

    def close(self) -> None:
        for link in self.peers.values():
            with contextlib.suppress(OSError):
                send(link, Bye())
                link.close()
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
                      access: EndpointAccess | None = None,
                      engine: str | None = None) -> tuple[list[RequestResult], list[ShardReport]]:
        """The round over `pods` pods (this one and pods-1 peers): results in the order of `specs`, each
        send time on this pod's clock, and a report per client process, its offset against this pod's parent
        process. `engine`: whose API key the peers read from their own environment, where `access` has one."""
        shares = split(len(specs), min(pods, concurrency or pods))
        n = len(shares)
        clocks = {k: await asyncio.to_thread(clock_offset, k, lambda k=k: self._ask_clock(k)) for k in range(1, n)}
        start_unix = time.time() + POD_START_MARGIN_S
        jobs = []
        for k, idx in enumerate(shares):
            share = None if concurrency is None else concurrency // n + (k < concurrency % n)
            job = _Job(base_url, [specs[i] for i in idx], adapter, timeout_s, keep_alive, access, 0.0, share, 0.0,
                       None if arrivals_s is None else [arrivals_s[i] for i in idx])
            jobs.append((job, self._processes(share or len(idx))))
        for k in range(1, n):  # the start in the peer's clock: ours plus its offset
            job, processes = jobs[k]
            message = Share(job.base_url, job.specs, adapter.dialect, job.timeout_s, job.keep_alive, engine,
                            access is not None and access.api_key is not None,
                            None if access is None else access.ca_bundle, access is None or access.verify,
                            job.concurrency, job.arrivals_s, start_unix + clocks[k].offset_s, processes)
            await asyncio.to_thread(send, self.peers[k], message)
        loop = asyncio.get_running_loop()
        by_id: dict[str, RequestResult] = {}

        def deliver(r: RequestResult) -> None:
            by_id[r.request_id] = r
            if on_result is not None:
                on_result(r)

        def collect(k: int) -> list[ShardReport]:
            """Peer k's results, each send time put on this pod's clock (less its offset) before it is merged."""
            offset = clocks[k].offset_s
            while (message := receive(self.peers[k])) is not None:
                if isinstance(message, Result):
                    loop.call_soon_threadsafe(deliver, on_leader_clock(message.result, offset))
                elif isinstance(message, Measured):
                    return message.reports
                elif isinstance(message, Failed):
                    raise RuntimeError(f"runner pod shard {k}: {message.error}")
                else:
                    raise LinkRefused(f"runner pod shard {k} sent {type(message).__name__} while measuring")
            raise RuntimeError(f"runner pod shard {k} left before its share was measured")

        own = measure_share(jobs[0][0], start_unix, jobs[0][1], deliver)
        per_pod = await asyncio.gather(own, *(asyncio.to_thread(collect, k) for k in range(1, n)))
        reports = self._on_leader_clock(per_pod, clocks)
        return [by_id[s.request_id] for s in specs if s.request_id in by_id], reports

    async def measure_streamed(self, pods: int, base_url: str, schedule: Iterable[Due], adapter: EngineAdapter,
                               timeout_s: float, processes: int, *,
                               on_result: Callable[[RequestResult, float], object], keep_alive: bool = True,
                               access: EndpointAccess | None = None, engine: str | None = None) -> StreamedRun:
        """A streamed round (a trace) over `pods` pods, `processes` client processes each: request i goes to pod
        i mod n, the peers' over the link LEAD_S ahead of their times. `on_result(result, due_ts)` as for
        shards.run_streamed, a peer's send times put on this pod's clock. Reports per client process as measure's."""
        n = pods
        clocks = {k: await asyncio.to_thread(clock_offset, k, lambda k=k: self._ask_clock(k)) for k in range(1, n)}
        keyed = access is not None and access.api_key is not None
        for k in range(1, n):
            await asyncio.to_thread(send, self.peers[k], StreamShare(
                base_url, adapter.dialect, timeout_s, keep_alive, engine, keyed,
                None if access is None else access.ca_bundle, access is None or access.verify, processes))
        started = threading.Event()
        start: list[float] = []  # the common start, time.monotonic() and time.time(), once every pod is up

        def agree() -> float:
            """Once this pod's processes are up: every peer's too, then the start, in each peer's own clock."""
            try:
                for k in range(1, n):
                    if not isinstance(answer := receive(self.peers[k]), Ready):
                        raise RuntimeError(f"runner pod shard {k} answered its share with {type(answer).__name__}")
                start_mono = time.monotonic() + STREAM_START_MARGIN_S
                start.extend((start_mono, time.time() + (start_mono - time.monotonic())))
                for k in range(1, n):  # ours plus its offset
                    send(self.peers[k], Start(start[1] + clocks[k].offset_s))
            finally:
                started.set()  # also when it failed: the dealer and collectors then end
            return start_mono

        own: queue.Queue[Due | None] = queue.Queue()
        due_of: dict[str, float] = {}  # a peer's request id -> its offset, until its answer
        dealt: list[BaseException] = []

        def deal() -> None:
            """This pod's requests to its own processes, every other pod's over its link, LEAD_S ahead."""
            batches: dict[int, list[Due]] = {k: [] for k in range(1, n)}

            def flush(k: int) -> None:
                if batches[k]:
                    send(self.peers[k], Rows(batches[k]))
                    batches[k] = []

            try:
                started.wait()  # the start set, a peer's rows follow it on its link
                if not start:
                    raise RuntimeError("the runner pods never agreed on a start")
                for i, item in enumerate(schedule):
                    k = i % n
                    ahead = start[0] + item.offset_s - LEAD_S - time.monotonic()
                    if ahead > 0:
                        for j in batches:
                            flush(j)
                        time.sleep(ahead)
                    if k == 0:
                        own.put(item)
                        continue
                    due_of[item.spec.request_id] = item.offset_s
                    batches[k].append(item)
                    soon = start[0] + batches[k][0].offset_s - time.monotonic() < LEAD_S / 2
                    if len(batches[k]) >= STREAM_BATCH or soon:
                        flush(k)
                for j in batches:
                    flush(j)
            except BaseException as exc:  # noqa: BLE001  (raised once the round has ended)
                dealt.append(exc)
            finally:
                own.put(None)
                for j in batches:
                    with contextlib.suppress(OSError):
                        send(self.peers[j], RowsEnd())

        loop = asyncio.get_running_loop()

        def collect(k: int) -> list[ShardReport]:
            offset = clocks[k].offset_s
            started.wait()  # the peer's Ready was read by agree(); what follows is its results
            if not start:
                return []
            while (message := receive(self.peers[k])) is not None:
                if isinstance(message, Result):
                    r = on_leader_clock(message.result, offset)
                    loop.call_soon_threadsafe(on_result, r, start[1] + due_of.pop(r.request_id))
                elif isinstance(message, Measured):
                    return message.reports
                elif isinstance(message, Failed):
                    raise RuntimeError(f"runner pod shard {k}: {message.error}")
                else:
                    raise LinkRefused(f"runner pod shard {k} sent {type(message).__name__} while measuring")
            raise RuntimeError(f"runner pod shard {k} left before its share was measured")

        dealer = threading.Thread(target=deal, name="dayone-pod-deal", daemon=True)
        dealer.start()
        mine = run_streamed(base_url, iter(own.get, None), adapter, timeout_s, processes, on_result=on_result,
                            keep_alive=keep_alive, access=access, start_mono=agree)
        results = await asyncio.gather(mine, *(asyncio.to_thread(collect, k) for k in range(1, n)))
        await asyncio.to_thread(dealer.join)
        if dealt:
            raise dealt[0]
        run, per_pod = results[0], [results[0].reports, *results[1:]]
        reports = self._on_leader_clock(per_pod, clocks)
        return StreamedRun(run.sent + sum(r.requests or 0 for r in reports if r.pod), run.peak_in_flight,
                           reports, run.priorities)

    def _on_leader_clock(self, per_pod: Sequence[list[ShardReport]],
                         clocks: dict[int, ShardReport]) -> list[ShardReport]:
        """Every pod's client processes as one list of shards, numbered on, each clock offset taken to pod 0's."""
        reports: list[ShardReport] = []
        first = 0
        for k, pod_reports in enumerate(per_pod):
            offset, uncertainty = (clocks[k].offset_s, clocks[k].uncertainty_s) if k else (0.0, 0.0)
            for r in pod_reports:
                reports.append(replace(r, shard=first + r.shard, offset_s=offset + r.offset_s,
                                       uncertainty_s=uncertainty + r.uncertainty_s, pod=k, pods=len(per_pod),
                                       pod_cores=self.cores))
            first += len(pod_reports)
        return reports

    def _ask_clock(self, k: int) -> float:
        send(self.peers[k], Ping())
        answer = receive(self.peers[k])
        if not isinstance(answer, Clock):
            raise RuntimeError(f"runner pod shard {k} answered a ping with {type(answer).__name__}")
        return answer.t


def on_leader_clock(result: RequestResult, offset_s: float) -> RequestResult:
    """A peer's result with its send time on shard 0's clock: the peer's time.time() less its offset."""
    return replace(result, send_ts=result.send_ts - offset_s)


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
    sent, until shard 0 says bye (0) or leaves, or a frame is not signed by it (1)."""
    deadline = time.monotonic() + join_timeout_s
    link = None
    while link is None:
        doc = run_dir.read_json(rendezvous_doc(group))
        if doc:
            try:
                sock = socket.create_connection((doc["host"], doc["port"]), timeout=5)
            except OSError:
                sock = None  # an earlier try's rendezvous, or shard 0 not listening yet
            if sock is not None:
                try:
                    link = open_link(sock, doc["secret"], shard)
                except (LinkRefused, OSError) as exc:
                    sock.close()
                    print(f"runner pod shard {shard} of {group}: shard 0's address refused the link: {exc}",
                          flush=True)
                    return 1
        if link is None:
            if time.monotonic() > deadline:
                print(f"runner pod shard {shard} of {group}: shard 0 never published where to join", flush=True)
                return 1
            time.sleep(JOIN_POLL_S)
    link.sock.settimeout(None)
    link.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"runner pod shard {shard} of {group}: joined", flush=True)
    try:
        return _answer(link, group, shard)
    except LinkRefused as exc:
        print(f"runner pod shard {shard} of {group}: the link refused: {exc}", flush=True)
        return 1
    finally:
        link.close()


def _answer(link: SignedLink, group: str, shard: int) -> int:
    while (message := receive(link)) is not None:
        if isinstance(message, Ping):
            send(link, Clock(time.time()))
        elif isinstance(message, Bye):
            return 0
        elif isinstance(message, StreamShare):
            _measure_stream(link, message)
            print(f"runner pod shard {shard} of {group}: replayed its share of a streamed round", flush=True)
        elif isinstance(message, Share):
            feed = Feed(_KeepOpen(link), FLUSH_EVERY_S, "dayone-pod-shard-feed",  # type: ignore[arg-type]
                        lambda m: link.frame(_encode(m)))
            def on_result(r: RequestResult, feed: Feed = feed) -> None:
                feed.put(Result(r))

            try:
                job = share_job(message)
                feed.put(Measured(load_client.run_async(measure_share(job, message.start_unix, message.processes,
                                                                      on_result))))
            except Exception as exc:  # shard 0 names it in the round's error
                feed.put(Failed(repr(exc)))
            finally:
                feed.close()
            print(f"runner pod shard {shard} of {group}: measured {len(message.specs)} requests", flush=True)
        else:
            raise LinkRefused(f"{type(message).__name__} is not for a peer")
    return 1


def _measure_stream(link: SignedLink, share: StreamShare) -> None:
    """A peer's share of a streamed round: the rows read off the link as its client processes need them (on
    run_streamed's feeding thread), the results back over it, then its processes' reports."""
    feed = Feed(_KeepOpen(link), FLUSH_EVERY_S, "dayone-pod-shard-feed",  # type: ignore[arg-type]
                lambda m: link.frame(_encode(m)))

    def rows() -> Iterator[Due]:
        while (message := receive(link)) is not None:
            if isinstance(message, Rows):
                yield from message.items
            elif isinstance(message, RowsEnd):
                return
            else:
                raise LinkRefused(f"{type(message).__name__} inside a streamed share")
        raise RuntimeError("shard 0 left inside a streamed share")

    def agree() -> float:
        """This pod's processes are up: say so, and take the common start shard 0 sets."""
        send(link, Ready())
        if not isinstance(start := receive(link), Start):
            raise LinkRefused(f"{type(start).__name__} where the start was due")
        return time.monotonic() + (start.start_unix - time.time())

    try:
        run = load_client.run_async(run_streamed(
            share.base_url, rows(), adapter_for(share.dialect), share.timeout_s, share.processes,
            on_result=lambda r, _due: feed.put(Result(r)), keep_alive=share.keep_alive,
            access=share_access(share), start_mono=agree))
        feed.put(Measured(run.reports))
    except Exception as exc:  # shard 0 names it in the round's error
        feed.put(Failed(repr(exc)))
    finally:
        feed.close()

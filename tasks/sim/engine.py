"""The simulated engine's state: slots and queue, prefix cache, first-shape JIT, counters, and
the ground truth of every request. Shared by all HTTP handlers of one server process.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tasks.sim.cache import PrefixCache
from tasks.sim.dialects import Dialect
from tasks.sim.gpus import SimGpus
from tasks.config.sim_profile import Profile
from tasks.sim.timer import PreciseTimer

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
MAX_RECORDS = 200_000  # ground-truth rows kept (oldest dropped first)


def bucket(n: int) -> int:
    """Shape bucket: the next power of two >= n (as CUDA-graph and JIT shape buckets grow)."""
    return 1 << max(0, n - 1).bit_length()


class Histogram:
    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.n += 1
        for i, b in enumerate(self.bounds):
            if value <= b:
                self.counts[i] += 1
                return
        self.counts[-1] += 1


@dataclass(eq=False)
class Record:
    """Ground truth for one request; times are epoch seconds (time.time() scale)."""

    request_id: str
    endpoint: str
    stream: bool
    arrival_ts: float
    status: int = 200
    error: str | None = None
    admit_ts: float | None = None
    queue_wait_s: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    shape: tuple[int, int] | None = None
    first_encounter: bool = False
    jit_s: float = 0.0
    first_event_ts: float | None = None
    first_output_ts: float | None = None
    ttft_s: float | None = None
    last_event_ts: float | None = None
    e2e_s: float | None = None
    finish_reason: str | None = None
    # Kept on the monotonic clock while streaming (cheap); as_dict() turns them into epoch times.
    event_ts: list[float] = field(default_factory=list)
    event_scheduled_ts: list[float | None] = field(default_factory=list)
    event_kinds: list[str] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    quirks: list[str] = field(default_factory=list)
    clock_offset: float = 0.0  # epoch - monotonic

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        off = d.pop("clock_offset")
        d["shape"] = list(self.shape) if self.shape else None
        d["event_ts"] = [t + off for t in self.event_ts]
        d["event_scheduled_ts"] = [None if t is None else t + off for t in self.event_scheduled_ts]
        return d


def launch_slowdown(profile: Profile, launch: int) -> float:
    """This process start's slowdown factor: 1 without launch_speed_sd, else exp(N(0, sd)) drawn from the seed
    and the launch index, so launch n of a profile is the same speed in every run."""
    if profile.launch_speed_sd <= 0:
        return 1.0
    return math.exp(random.Random(f"{profile.seed}/launch/{launch}").gauss(0.0, profile.launch_speed_sd))


class Engine:
    def __init__(self, dialect: Dialect, profile: Profile, restarts: int = 0, launch: int = 0):
        self.dialect = dialect
        self.profile = profile
        self.restarts = restarts
        self.launch = launch
        self.launch_slowdown = launch_slowdown(profile, launch)  # this start's own speed (launch_speed_sd)
        self.loop = asyncio.get_running_loop()
        self.timer = PreciseTimer(self.loop)
        self.epoch_offset = time.time() - time.monotonic()
        self.started_ts = time.time()
        self.ready = False
        self.ready_ts: float | None = None
        self.cache = PrefixCache(profile.cache_block_tokens, profile.cache_capacity_tokens, profile.prefix_cache)
        self.seen_shapes: set[tuple[int, int]] = set()
        self.blocked_until = 0.0  # monotonic: the engine is compiling a new shape until then
        self.running = 0
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.arrivals = 0  # generation requests seen (numbers error bursts)
        self.streams = 0  # streaming requests admitted (numbers every-nth faults and quirks)
        self.finished = 0
        self.counters = {"prompt": 0, "hits": 0, "queries": 0, "generation": 0, "requests": 0,
                         "preemptions": 0, "spec_drafts": 0, "spec_draft_tokens": 0, "spec_accepted": 0}
        self.last_hit_rate = 0.0
        self.hist = {"ttft": Histogram(TTFT_BUCKETS), "e2e": Histogram(E2E_BUCKETS), "itl": Histogram(ITL_BUCKETS),
                     "queue": Histogram(TTFT_BUCKETS)}
        self.active: set[Record] = set()  # admitted and not finished: what holds the KV cache
        self.last_spec = (0.0, 0.0)  # (mean accepted length, acceptance rate) of the last finished request
        self.records: deque[Record] = deque(maxlen=MAX_RECORDS)
        self.crashing = False
        self.counter_base = profile.counter_base  # added to every counter in /metrics
        self.gpus = SimGpus(profile)  # what /dcgm/metrics reports; told of every change of `running`

    def restart_in_place(self) -> None:
        """What a restart leaves: a new process start, counters and cache empty, one more restart."""
        self.restarts += 1
        self.started_ts = time.time()
        self.counters = dict.fromkeys(self.counters, 0)
        self.hist = {role: Histogram(h.bounds) for role, h in self.hist.items()}
        self.counter_base = 0.0
        self.cache.clear()
        self.seen_shapes.clear()
        print(f"WARNING simulated engine restart in place after {self.finished} requests "
              f"(faults.restart_after_requests; restart {self.restarts})", flush=True)

    # ---- clocks ----------------------------------------------------------------------------
    def epoch(self, mono: float) -> float:
        return mono + self.epoch_offset

    # ---- slots -----------------------------------------------------------------------------
    def decode_slowdown(self) -> float:
        """How much slower a decode step is now: decode_knee_factor while more than decode_knee requests run."""
        knee = self.profile.decode_knee
        return self.profile.decode_knee_factor if knee is not None and self.running > knee else 1.0

    async def acquire_slot(self) -> None:
        if self.running < self.profile.slots and not self.waiting:
            self.running += 1
            self.gpus.set_running(self.running)
            return
        fut = self.loop.create_future()
        self.waiting.append(fut)
        try:
            await fut  # release_slot hands its slot over: `running` stays the same
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release_slot()
            else:
                try:
                    self.waiting.remove(fut)
                except ValueError:
                    pass
            raise

    def release_slot(self) -> None:
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.running -= 1
        self.gpus.set_running(self.running)

    # ---- prefill ---------------------------------------------------------------------------
    def admit(self, record: Record, cache_tokens: list[Any], admit_mono: float) -> float:
        """Cache lookup, first-shape JIT and prefill time: the monotonic time of the first token."""
        p = self.profile
        hits = self.cache.lookup_and_store(cache_tokens)
        record.cached_tokens = hits
        self.active.add(record)
        if p.speculative is not None:  # decoding steps report acceptance as soon as the request runs
            self.last_spec = (p.speculative.mean_accepted_length, p.speculative.acceptance_rate)
        if record.queue_wait_s is not None:
            self.hist["queue"].observe(record.queue_wait_s)
        self.counters["prompt"] += record.prompt_tokens
        self.counters["queries"] += record.prompt_tokens
        self.counters["hits"] += hits
        self.last_hit_rate = hits / record.prompt_tokens if record.prompt_tokens else 0.0
        shape = (bucket(record.prompt_tokens), bucket(self.running))
        record.shape = shape
        if shape not in self.seen_shapes:
            self.seen_shapes.add(shape)
            record.first_encounter = True
            if p.jit_delay_s > 0:
                # Compiling a kernel for a new shape pauses the whole engine, not just this request.
                self.blocked_until = max(self.blocked_until, admit_mono) + p.jit_delay_s
                record.jit_s = p.jit_delay_s
        first = admit_mono + (p.ttft_base_s + (record.prompt_tokens - hits) / p.prefill_tokens_per_s) * self.launch_slowdown
        return max(first, self.blocked_until)

    def record(self, record: Record) -> None:
        self.records.append(record)

    def kv_usage(self) -> float:
        """Share of the KV cache (cache_capacity_tokens) the running requests hold: prompt plus the
        tokens sent so far."""
        capacity = self.profile.cache_capacity_tokens
        if not capacity:
            return 0.0
        per_event = self.profile.tokens_per_event
        held = sum(r.prompt_tokens + per_event * len(r.event_ts) for r in self.active)
        return min(1.0, held / capacity)

    def count_speculation(self, completion_tokens: int) -> None:
        """Drafts and accepted tokens of a finished request under the speculative profile."""
        spec = self.profile.speculative
        if spec is None or completion_tokens <= 0:
            return
        # Fractional steps (a counter is a float): the round's ratios then equal the profile's exactly.
        drafts = completion_tokens / spec.mean_accepted_length
        accepted = completion_tokens - drafts
        self.counters["spec_drafts"] += drafts
        self.counters["spec_draft_tokens"] += drafts * spec.draft_tokens
        self.counters["spec_accepted"] += accepted
        self.last_spec = (1.0 + accepted / drafts, accepted / (drafts * spec.draft_tokens))

    def finish(self, record: Record) -> None:
        self.finished += 1
        self.active.discard(record)
        if record.status == 200:
            self.count_speculation(record.completion_tokens)
            self.counters["requests"] += 1
            self.counters["generation"] += record.completion_tokens
            if record.ttft_s is not None:
                self.hist["ttft"].observe(record.ttft_s)
            if record.e2e_s is not None:
                self.hist["e2e"].observe(record.e2e_s)
            outs = [t for t, k in zip(record.event_ts, record.event_kinds) if k == "output"]  # monotonic
            for a, b in zip(outs, outs[1:]):
                self.hist["itl"].observe(b - a)
        faults = self.profile.faults
        if faults.restart_after_requests and self.finished == faults.restart_after_requests:
            self.restart_in_place()
        if faults.counter_base_drop_after_requests and self.finished == faults.counter_base_drop_after_requests:
            self.counter_base = 0.0
        if self.profile.gpus.energy_reset_after_requests == self.finished:
            self.gpus.reset_energy()
        crash_after = self.profile.faults.crash_after_requests
        if crash_after and self.finished >= crash_after and not self.crashing:
            self.crashing = True
            record.faults.append("crash")
            print(
                f"ERROR simulated engine crash after {self.finished} requests "
                "(faults.crash_after_requests): RuntimeError: CUDA error: an illegal memory access was encountered",
                flush=True,
            )
            self.loop.call_later(0.05, os._exit, 70)

    def state(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect.name,
            "model": self.profile.model,
            "restarts": self.restarts,
            "launch": self.launch,
            "launch_slowdown": self.launch_slowdown,
            "ready": self.ready,
            "started_ts": self.started_ts,
            "ready_ts": self.ready_ts,
            "requests_total": self.arrivals,
            "finished_total": self.finished,
            "running": self.running,
            "waiting": len(self.waiting),
            "cache_blocks": len(self.cache),
            "seen_shapes": sorted(list(s) for s in self.seen_shapes),
            "counters": dict(self.counters),
            "gpus": self.gpus.state(),
            "precise_timer": self.timer.precise,
            "pid": os.getpid(),
            "profile": self.profile.model_dump(),
        }

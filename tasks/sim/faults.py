"""Which planted faults and quirks one generation request meets, decided from the profile before
it is served, as data; the server's handlers only follow the plan. The faults themselves are
listed in tasks/sim/README.md ("Faults and quirks")."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.config.sim_profile import Profile

NEVER = -1  # an output-event index no stream reaches


def error_burst_status(profile: Profile, arrival_number: int, now_ts: float, ready_ts: float | None) -> int | None:
    """The status `faults.error_burst` answers this arrival with (count form: by 1-based arrival
    number; window form: by seconds since ready), or None when the burst spares it."""
    burst = profile.faults.error_burst
    if burst is None:
        return None
    if burst.after_requests is not None and burst.count is not None:
        hit = burst.after_requests < arrival_number <= burst.after_requests + burst.count
    else:
        since_ready = now_ts - (ready_ts or now_ts)
        hit = burst.start_s <= since_ready < burst.start_s + burst.duration_s  # type: ignore[operator]
    return burst.status if hit else None


@dataclass(frozen=True)
class StreamPlan:
    """What one stream meets, as indices into its output events (NEVER: not in this stream)."""

    unstreamed: bool = False  # quirk: empty deltas, the whole text in the last event
    malformed_at: int = NEVER  # this event's JSON is cut in half
    cut_at: int = NEVER  # the connection closes before this event, no [DONE]
    stall_at: int = NEVER  # nothing is sent for stall_s before this event (0: before the first)
    stall_s: float = 0.0
    preempt_at: int = NEVER  # evicted for KV room before this event, recomputed for recompute_s
    recompute_s: float = 0.0

    @property
    def stalls(self) -> bool:
        return self.stall_at != NEVER

    @property
    def quirks(self) -> list[str]:
        return ["unstreamed"] if self.unstreamed else []

    @property
    def faults_from_start(self) -> list[str]:
        """The faults the ground truth names as soon as the stream is planned (a stall it never
        reaches is taken back when it ends: `stall_reached`)."""
        return ["malformed_sse"] * (self.malformed_at != NEVER) + ["stall"] * self.stalls

    def stall_reached(self, outputs_sent: int) -> bool:
        return self.stall_at == 0 or outputs_sent > self.stall_at


def plan_stream(profile: Profile, number: int, n_events: int) -> StreamPlan:
    """The plan of the `number`th stream admitted (1-based: "every nth" counts in admission order)
    with `n_events` output events."""
    faults, quirks, preemption = profile.faults, profile.quirks, profile.preemption

    def nth(every: int | None) -> bool:
        return bool(every) and number % every == 0  # type: ignore[operator]

    middle = max(1, n_events // 2)
    stall = faults.stall if faults.stall is not None and nth(faults.stall.every_nth) else None
    preempt = preemption if preemption is not None and nth(preemption.every_nth) else None
    return StreamPlan(
        unstreamed=nth(quirks.unstreamed_every_nth),
        malformed_at=n_events // 2 if n_events and nth(faults.malformed_sse_every_nth) else NEVER,
        cut_at=middle if nth(faults.cut_stream_every_nth) else NEVER,
        stall_at=stall.after_events if stall is not None else NEVER,
        stall_s=stall.seconds if stall is not None else 0.0,
        preempt_at=middle if preempt is not None else NEVER,
        recompute_s=preempt.recompute_s if preempt is not None else 0.0,
    )

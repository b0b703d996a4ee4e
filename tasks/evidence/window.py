"""The one rule for every delta DayOne computes from /metrics.

A window is a run of scrapes (at least before and after). Its deltas are published only when no
counter went down between two consecutive scrapes and no restart was seen: a Prometheus counter
only falls when its process started again (or its series were reset), and a delta across that
fall is a difference of two unrelated numbers. Restart evidence, any one suffices:
- the target's restart count (simulator, llama.cpp launcher, a pod's container restartCount) went up;
- `process_start_time_seconds` changed (prometheus_client's process collector; vLLM with one API
  server exposes it, SGLang's multiprocess registry does not, so counters must be watched too);
- a counter went down (any sample named like a counter, and every counter a figure uses).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tasks.engines import EngineAdapter, HitRate

START_TIME = "process_start_time_seconds"
# Sample names Prometheus reserves for monotonic values: a counter's samples and a histogram's count.
_COUNTER_SUFFIXES = ("_total", "_count")

Scrape = Mapping[str, float]


def _num(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def _fall(before: Scrape, after: Scrape, watched: Iterable[str], during: str) -> list[str]:
    """Why the pair (before, after) breaks a window: a new process start time, counters that fell."""
    reasons = []
    s0, s1 = before.get(START_TIME), after.get(START_TIME)
    if s0 is not None and s1 is not None and s1 != s0:
        reasons.append(f"{START_TIME} changed from {_num(s0)} to {_num(s1)} {during}: the engine restarted")
    names = sorted({n for n in before if n.endswith(_COUNTER_SUFFIXES)} | set(watched))
    for name in names:
        if name in before and name in after and after[name] < before[name]:
            reasons.append(f"{name} fell from {_num(before[name])} to {_num(after[name])} {during}: "
                           "engine restarted or counters reset")
    return reasons


def breach(
    scrapes: Sequence[Scrape | None],
    during: str,
    counters: Iterable[str] = (),
    restarts_before: int | None = None,
    restarts_after: int | None = None,
) -> str | None:
    """Why the deltas of a window of `scrapes` (in time order) must not be published; None when
    they may be. `counters` are the names a figure uses, always watched; an unreadable scrape is
    skipped (the next readable one is compared with the last)."""
    watched = tuple(counters)
    reasons: list[str] = []
    if restarts_before is not None and restarts_after is not None and restarts_after > restarts_before:
        reasons.append(f"the engine's restart count went from {restarts_before} to {restarts_after} {during}")
    readable = [s for s in scrapes if s is not None]
    for before, after in zip(readable, readable[1:]):
        for reason in _fall(before, after, watched, during):
            if reason not in reasons:
                reasons.append(reason)
    return "; ".join(reasons) or None


@dataclass(frozen=True)
class Window:
    """Scrapes in time order (first = before, last = after) and the restart counts around them."""

    scrapes: tuple[Scrape | None, ...]
    during: str = "during the window"
    counters: tuple[str, ...] = ()
    restarts_before: int | None = None
    restarts_after: int | None = None

    @property
    def before(self) -> Scrape | None:
        return self.scrapes[0] if self.scrapes else None

    @property
    def after(self) -> Scrape | None:
        return self.scrapes[-1] if self.scrapes else None

    @property
    def breach(self) -> str | None:
        return breach(self.scrapes, self.during, self.counters, self.restarts_before, self.restarts_after)

    def delta(self, name: str) -> float | None:
        """after - before for one counter; None where either scrape lacks it or the window broke."""
        if self.breach or self.before is None or self.after is None:
            return None
        if name not in self.before or name not in self.after:
            return None
        return self.after[name] - self.before[name]


def hit_rate_over(adapter: EngineAdapter, window: Window) -> HitRate:
    """The adapter's hit-rate arithmetic over a window, unpublished (deltas None, the reason
    kept) when the window broke."""
    counters = adapter.cache_counters
    names = () if counters is None else (counters.queries, counters.hits)
    reason = breach(window.scrapes, window.during, (*window.counters, *names),
                    window.restarts_before, window.restarts_after)
    if reason:
        return HitRate(None, None, reason)
    return adapter.hit_rate(dict(window.before or {}), dict(window.after or {}))

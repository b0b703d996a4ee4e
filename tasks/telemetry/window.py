"""The one rule for every delta DayOne computes from /metrics.

A window is a run of scrapes (at least before and after). Its deltas are published only when no
counter series went down between two consecutive scrapes, `process_start_time_seconds` did not change,
the target's restart count did not rise, and no scrape in it is a hole (unread, or missing counter
series the one before had): PROTOCOL.md section 8, "Deltas across a counter reset are not published".
A scrape is a mapping of series keys (metrics.series_key, `name{labels}`) or of bare names (sums over
labels) to values; deltas are taken over names (`by_name`).
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


def base_name(key: str) -> str:
    """The metric name of a series key (`name{labels}` or a bare name)."""
    return key.split("{", 1)[0]


def by_name(scrape: Scrape) -> dict[str, float]:
    """A scrape's values summed over label sets, by name: what deltas and hit rates are taken over."""
    out: dict[str, float] = {}
    for key, value in scrape.items():
        name = base_name(key)
        out[name] = out.get(name, 0.0) + value
    return out


def _is_counter(key: str, watched: frozenset[str]) -> bool:
    name = base_name(key)
    return name.endswith(_COUNTER_SUFFIXES) or name in watched


def _fall(before: Scrape, after: Scrape, watched: Iterable[str], during: str) -> list[str]:
    """Why the pair (before, after) breaks a window: a new process start time, counters that fell,
    each series on its own."""
    reasons = []
    for key in sorted(k for k in before if base_name(k) == START_TIME):
        s0, s1 = before[key], after.get(key)
        if s1 is not None and s1 != s0:
            reasons.append(f"{START_TIME} changed from {_num(s0)} to {_num(s1)} {during}{_series(key)}: "
                           "the engine restarted")
    names = frozenset(watched)
    for key in sorted(k for k in before if _is_counter(k, names)):
        if key in after and after[key] < before[key]:
            reasons.append(f"{base_name(key)} fell from {_num(before[key])} to {_num(after[key])} {during}"
                           f"{_series(key)}: engine restarted or counters reset")
    return reasons


def _series(key: str) -> str:
    """' (series {labels})' for a labelled series key, '' for a bare name."""
    return f" (series {key[len(base_name(key)):]})" if "{" in key else ""


def gaps(scrapes: Sequence[Scrape | None], during: str, counters: Iterable[str] = ()) -> str | None:
    """Why a window has a hole no fall check can see across: a scrape between two readable ones that
    could not be read, or one that lacked counter series the readable scrape before it had (an empty
    answer: every series gone). None when the window is whole. A window unreadable at an end has no
    deltas at all; its callers say so."""
    watched = frozenset(counters)
    reasons: list[str] = []
    n = len(scrapes)
    readable = [i for i, s in enumerate(scrapes) if s is not None]
    last: Scrape | None = None
    for i, scrape in enumerate(scrapes, 1):
        if scrape is None:
            if readable and readable[0] < i - 1 < readable[-1]:
                reasons.append(f"scrape {i} of {n} {during} could not be read: a counter reset across it "
                               "would not show")
            continue
        if last is not None:
            lost = sorted(k for k in last if _is_counter(k, watched) and k not in scrape)
            if lost and not any(_is_counter(k, watched) for k in scrape):
                reasons.append(f"scrape {i} of {n} {during} came back without counters (empty): "
                               "a counter reset across it would not show")
            elif lost:
                reasons.append(f"scrape {i} of {n} {during} lacked {', '.join(lost[:3])}"
                               f"{f' and {len(lost) - 3} more series' if len(lost) > 3 else ''} that the scrape "
                               "before it had: a counter reset across it would not show")
        last = scrape
    return "; ".join(reasons) or None


def breach(
    scrapes: Sequence[Scrape | None],
    during: str,
    counters: Iterable[str] = (),
    restarts_before: int | None = None,
    restarts_after: int | None = None,
) -> str | None:
    """The restart evidence in `scrapes` (in time order): a restart count that rose, a new process
    start time, a counter series that fell; None when there is none. `counters` are the names a
    figure uses, always watched; an unreadable scrape is skipped (the next readable one is compared
    with the last). A window's deltas obey `unpublishable`, which also voids a window with a hole."""
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


def unpublishable(
    scrapes: Sequence[Scrape | None],
    during: str,
    counters: Iterable[str] = (),
    restarts_before: int | None = None,
    restarts_after: int | None = None,
) -> str | None:
    """Why the deltas of a window of `scrapes` (in time order) must not be published: a hole in it
    (`gaps`) or restart evidence (`breach`); None when they may be."""
    watched = tuple(counters)
    reasons = [r for r in (gaps(scrapes, during, watched),
                           breach(scrapes, during, watched, restarts_before, restarts_after)) if r]
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
        """Why the window's deltas must not be published (a hole or restart evidence); None: they may."""
        return unpublishable(self.scrapes, self.during, self.counters, self.restarts_before, self.restarts_after)

    def delta(self, name: str) -> float | None:
        """after - before for one counter, summed over its label sets; None where either scrape lacks
        it or the window broke."""
        if self.breach or self.before is None or self.after is None:
            return None
        before, after = by_name(self.before), by_name(self.after)
        if name not in before or name not in after:
            return None
        return after[name] - before[name]


def hit_rate_over(adapter: EngineAdapter, window: Window) -> HitRate:
    """The adapter's hit-rate arithmetic over a window, unpublished (deltas None, the reason
    kept) when the window broke."""
    counters = adapter.cache_counters
    names = () if counters is None else (counters.queries, counters.hits)
    reason = unpublishable(window.scrapes, window.during, (*window.counters, *names),
                           window.restarts_before, window.restarts_after)
    if reason:
        return HitRate(None, None, reason)
    return adapter.hit_rate(by_name(window.before or {}), by_name(window.after or {}))

"""The one readiness wait: until the platform runs the engine and the engine itself serves.

Every target asks the same two questions on every poll: what does the platform say of the
engine's process or pods (`Platform`: failed for good, still coming, or up), and, once up, does
the engine pass its adapter's probe (liveness, model list, a 1-token generation)? The local
target, the Kubernetes target and the deferrable Airflow trigger each supply only the first
answer, as an async callable; the loop, the deadline and the messages live here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from tasks.engines.access import EndpointAccess
from tasks.engines import EngineAdapter, Readiness
from tasks.core.polling import TimedOut, poll_async


class DeployError(RuntimeError):
    """An engine could not be deployed or will never become ready; the message says why."""


@dataclass(frozen=True)
class Platform:
    """The platform's view of the engine: `failed` never heals by waiting; `waiting` says why not yet."""

    failed: str | None = None
    waiting: str | None = None


UP = Platform()
PlatformCheck = Callable[[], Awaitable[Platform]]


class NotReadyInTime(DeployError):
    """The deadline passed with the engine still coming up; the message says at which stage."""


async def always_up() -> Platform:
    """The platform check of an engine whose platform DayOne cannot see or need not ask."""
    return UP


async def poll_serving(adapter: EngineAdapter, base_url: str, model: str, http: httpx.AsyncClient, *,
                       timeout_s: float, interval_s: float, platform: PlatformCheck = always_up) -> Readiness:
    """The one poll: the platform, then the adapter's probe, until the engine serves. Returns the
    passing probe, or at the deadline what was seen last, not ready (stage "platform" while the
    platform was still waiting). Raises DeployError with the platform's reason when it never will."""
    last = Readiness(False, "platform", "not polled yet")

    async def attempt() -> Readiness | None:
        nonlocal last
        state = await platform()
        if state.failed:
            raise DeployError(state.failed)
        if state.waiting:
            last = Readiness(False, "platform", state.waiting)
            return None
        last = await adapter.probe_ready(http, base_url, model)
        return last if last.ready else None

    try:
        return await poll_async(attempt, timeout_s=timeout_s, interval_s=interval_s)
    except TimedOut:
        return last


async def wait_until_serving(engine: str, adapter: EngineAdapter, base_url: str, model: str, *,
                             platform: PlatformCheck, timeout_s: float, interval_s: float,
                             started_at: float | None = None, access: EndpointAccess | None = None) -> Readiness:
    """Poll until the engine serves. Raises DeployError (the platform's failure) or NotReadyInTime.

    `started_at` (epoch seconds) makes the deadline wall-clock from then: a wait resumed after a
    restart (the triggerer's) does not start its timeout over.
    """
    remaining = timeout_s if started_at is None else max(started_at + timeout_s - time.time(), 0.0)
    async with (access or EndpointAccess()).async_http_client(timeout=30) as http:
        try:
            probe = await poll_serving(adapter, base_url, model, http, timeout_s=remaining, interval_s=interval_s,
                                       platform=platform)
        except DeployError as exc:
            raise DeployError(f"engine {engine}: {exc}") from None
    if probe.ready:
        return probe
    last = probe.detail if probe.stage == "platform" else f"last stage {probe.stage}: {probe.detail}"
    raise NotReadyInTime(f"engine {engine}: not ready after {timeout_s:.0f} s ({last})")

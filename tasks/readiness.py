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

from tasks.endpoint_access import EndpointAccess
from tasks.engines import EngineAdapter, Readiness
from tasks.polling import TimedOut, poll_async
from tasks.targets.base import DeployError


@dataclass(frozen=True)
class Platform:
    """The platform's view of the engine: `failed` never heals by waiting; `waiting` says why not yet."""

    failed: str | None = None
    waiting: str | None = None


UP = Platform()
PlatformCheck = Callable[[], Awaitable[Platform]]


class NotReadyInTime(DeployError):
    """The deadline passed with the engine still coming up; the message says at which stage."""


async def wait_until_serving(engine: str, adapter: EngineAdapter, base_url: str, model: str, *,
                             platform: PlatformCheck, timeout_s: float, interval_s: float,
                             started_at: float | None = None, access: EndpointAccess | None = None) -> Readiness:
    """Poll until the engine serves. Raises DeployError (the platform's failure) or NotReadyInTime.

    `started_at` (epoch seconds) makes the deadline wall-clock from then: a wait resumed after a
    restart (the triggerer's) does not start its timeout over.
    """
    last = "not polled yet"
    remaining = timeout_s if started_at is None else max(started_at + timeout_s - time.time(), 0.0)

    async with (access or EndpointAccess()).async_http_client(timeout=30) as http:

        async def attempt() -> Readiness | None:
            nonlocal last
            state = await platform()
            if state.failed:
                raise DeployError(f"engine {engine}: {state.failed}")
            if state.waiting:
                last = state.waiting
                return None
            probe = await adapter.probe_ready(http, base_url, model)
            if probe.ready:
                return probe
            last = f"last stage {probe.stage}: {probe.detail}"
            return None

        try:
            return await poll_async(attempt, timeout_s=remaining, interval_s=interval_s)
        except TimedOut:
            raise NotReadyInTime(f"engine {engine}: not ready after {timeout_s:.0f} s ({last})") from None

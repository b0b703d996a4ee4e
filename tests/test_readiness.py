"""The one readiness poll (tasks/engines/readiness.py): the platform first, the engine's probe only once the
platform runs it; a platform failure ends the wait at once; the deadline says what was seen last."""

from __future__ import annotations

import asyncio

import pytest

from tasks.engines import Readiness
from tasks.engines.readiness import UP, NotReadyInTime, Platform, poll_serving, wait_until_serving
from tasks.engines.readiness import DeployError


class ScriptedAdapter:
    """An engine whose probes answer in the given order, then keep the last answer."""

    def __init__(self, *answers: Readiness):
        self.answers, self.probes = list(answers), 0

    async def probe_ready(self, http, base_url, model) -> Readiness:
        self.probes += 1
        return self.answers[min(self.probes, len(self.answers)) - 1]


def scripted_platform(*states: Platform):
    seen = []

    async def platform() -> Platform:
        seen.append(None)
        return states[min(len(seen), len(states)) - 1]

    return platform


LOADING = Readiness(False, "models", "/v1/models -> 503")
SERVING = Readiness(True, "ready", "health, model list and a 1-token generation passed")


def test_the_engine_is_probed_only_once_the_platform_runs_it():
    adapter = ScriptedAdapter(LOADING, SERVING)
    platform = scripted_platform(Platform(waiting="0/1 replicas ready"), Platform(waiting="0/1 replicas ready"), UP)
    probe = asyncio.run(poll_serving(adapter, "http://engine", "m", None, timeout_s=5, interval_s=0.01,
                                     platform=platform))
    assert probe == SERVING
    assert adapter.probes == 2  # two polls waited on the platform, then two probes


def test_a_platform_failure_ends_the_wait_at_once_naming_the_engine():
    adapter = ScriptedAdapter(SERVING)
    platform = scripted_platform(Platform(failed="pod p: ImagePullBackOff. Events: no events"))
    with pytest.raises(DeployError, match=r"^engine e: pod p: ImagePullBackOff") as err:
        asyncio.run(wait_until_serving("e", adapter, "http://engine", "m", platform=platform, timeout_s=600,
                                       interval_s=0.01))
    assert not isinstance(err.value, NotReadyInTime) and adapter.probes == 0


def test_the_deadline_says_what_was_seen_last():
    waiting = scripted_platform(Platform(waiting="0/1 replicas ready"))
    last = asyncio.run(poll_serving(ScriptedAdapter(SERVING), "http://engine", "m", None, timeout_s=0.1,
                                    interval_s=0.01, platform=waiting))
    assert last == Readiness(False, "platform", "0/1 replicas ready")
    with pytest.raises(NotReadyInTime, match=r"^engine e: not ready after 0 s \(0/1 replicas ready\)$"):
        asyncio.run(wait_until_serving("e", ScriptedAdapter(SERVING), "http://engine", "m", platform=waiting,
                                       timeout_s=0.1, interval_s=0.01))
    # no platform to ask (the boundary re-test's wait): the last probe's stage
    assert asyncio.run(poll_serving(ScriptedAdapter(LOADING), "http://engine", "m", None, timeout_s=0.1,
                                    interval_s=0.01)) == LOADING
    with pytest.raises(NotReadyInTime, match=r"\(last stage models: /v1/models -> 503\)$"):
        asyncio.run(wait_until_serving("e", ScriptedAdapter(LOADING), "http://engine", "m",
                                       platform=scripted_platform(UP), timeout_s=0.1, interval_s=0.01))

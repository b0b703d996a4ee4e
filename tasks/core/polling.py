"""One way to wait: call a check until it returns a value (not None) or a deadline passes.

Built on tenacity, so every wait in DayOne (an engine becoming ready, a process exiting, a server
coming up) has the same semantics: a check that raises stops the wait at once with its error, a
check that returns None is tried again after `interval_s`, and the deadline raises `TimedOut`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

T = TypeVar("T")


class TimedOut(TimeoutError):
    """The check never returned a value before the deadline."""


def _policy(timeout_s: float, interval_s: float) -> dict:
    return {
        "stop": stop_after_delay(max(timeout_s, 0.0)),
        "wait": wait_fixed(interval_s),
        "retry": retry_if_result(lambda value: value is None),
        "reraise": False,
    }


def poll(check: Callable[[], T | None], *, timeout_s: float, interval_s: float) -> T:
    """`check()` until it returns a value; raise what it raises, or TimedOut after `timeout_s`."""
    try:
        return Retrying(**_policy(timeout_s, interval_s))(check)
    except RetryError:
        raise TimedOut(f"no result after {timeout_s:.1f} s") from None


async def poll_async(check: Callable[[], Awaitable[T | None]], *, timeout_s: float, interval_s: float) -> T:
    """The asyncio form of `poll`: sleeps without blocking the event loop."""
    try:
        return await AsyncRetrying(**_policy(timeout_s, interval_s))(check)
    except RetryError:
        raise TimedOut(f"no result after {timeout_s:.1f} s") from None

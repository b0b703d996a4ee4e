"""The distributed stack (stack.py) for the tests of this directory: one per module, stopped with it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stack import DistributedAirflow  # noqa: E402
from stack_priority import BackgroundPriority  # noqa: E402


@pytest.fixture(scope="module")
def distributed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DistributedAirflow]:
    """PostgreSQL, Redis, S3, Airflow's control plane and two Celery workers with disks of their own."""
    with BackgroundPriority(), DistributedAirflow(tmp_path_factory.mktemp("distributed")) as stack:
        yield stack


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test shows the components' last log lines."""
    report = (yield).get_result()
    stack = getattr(item, "funcargs", {}).get("distributed_stack")
    if report.failed and isinstance(stack, DistributedAirflow):
        for component in stack.components:
            report.sections.append((f"{component.name} log tail", stack.log_tail(component)))

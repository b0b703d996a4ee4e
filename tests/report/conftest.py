"""A real run directory for the report tests.

`sim_run` runs the pipeline's own steps (through the Airflow glue, which records each step's
outcome) against DayOne's engine simulator with a tiny config, once per session: two engines that
serve (one whose completions API ignores echo=false, so its TTFT is unreliable, and which loses
needles past 3,000 tokens) and one that never becomes ready, so the report has failed steps,
not-applicable checks and disabled scenarios to show.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

AIRFLOW_RUN_ID = "manual__2026-11-30T08:00:00.123456+00:00"
BROKEN_ENGINE_READY_TIMEOUT_S = 2

SIM_CONFIG = {
    "model": {"name": "dayone-sim-model", "revision": "report-test", "context_limit_tokens": 16384},
    "engines": [
        {"name": "sim-sglang", "dialect": "sglang", "launcher": "sim",
         "sim_profile": {"jit_delay_s": 0.15, "reasoning": True}},
        {"name": "sim-vllm", "dialect": "vllm", "launcher": "sim",
         "sim_profile": {"jit_delay_s": 0.25, "dev_mode": True, "itl_s": 0.004, "needle_max_tokens": 1500,
                         "quirks": {"echo_ignored": True}}},
        {"name": "sim-down", "dialect": "openai", "launcher": "sim", "sim_profile": {"faults": {"never_ready": True}},
         "ready_timeout_s": BROKEN_ENGINE_READY_TIMEOUT_S},
    ],
    "scenarios": {
        "functional": {"skip": ["image_input"]},
        "short": {"input_tokens": 64, "output_tokens": 16, "concurrency": [1, 4], "rounds": 4, "requests_per_round": 4},
        "prefill": {"input_tokens": 1024, "output_tokens": 8, "concurrency": [2], "rounds": 3, "requests_per_round": 2},
        "decode": {"input_tokens": 32, "output_tokens": 48, "concurrency": [2], "rounds": 3, "requests_per_round": 2},
        "long_context": {"lengths": [1024, 2048], "depths": [0.1, 0.5, 0.9], "output_tokens": 16,
                         "include_model_limit": False},
        "boundary": {"enabled": False},
        "prefix_cache": {"prompt_tokens": 1500, "repeats": 5},
    },
    "telemetry": {"enabled": True},  # the simulator's own DCGM-style exporter: the report's telemetry chart
    "request_timeout_s": 30,
}
ENGINE_STEPS = ("startup_findings", "functional", "short", "prefill", "decode", "rate", "long_context", "boundary",
                "prefix_cache")


@dataclass(frozen=True)
class SimRun:
    airflow_run_id: str
    run_id: str
    root: Path
    config: dict

    def run_dir(self, root: Path | None = None):
        from tasks.state.storage import RunDir

        return RunDir(self.run_id, root=root or self.root)

    def cfg(self):
        from tasks.steps.context import load_config

        return load_config(self.config, self.run_id)

    def copy(self, dest_root: Path) -> SimRun:
        """A private copy, for a test that adds rows."""
        shutil.copytree(self.root / self.run_id, dest_root / self.run_id)
        return SimRun(self.airflow_run_id, self.run_id, dest_root, self.config)


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> SimRun:
    from dayone_airflow.glue import dayone_run_id
    from tasks.steps.context import RunContext
    from tasks.steps.execution import execute

    root = tmp_path_factory.mktemp("report-runs")
    before = os.environ.get("DAYONE_WORKDIR")
    os.environ["DAYONE_WORKDIR"] = str(root)  # the steps find their run directory here
    try:
        # the steps as the DAG runs them, with no archive (this run is reported, never archived)
        ctx = RunContext.build(SIM_CONFIG, dayone_run_id(AIRFLOW_RUN_ID))

        def step(name: str, engine: str | None = None) -> None:
            try:
                execute(ctx, name, engine)
            except Exception:  # noqa: BLE001  (recorded in state/steps: the report shows it)
                pass

        step("plan")
        step("pin")
        for engine in [e["name"] for e in SIM_CONFIG["engines"]]:
            step("deploy", engine)
            step("wait_ready", engine)
            for name in ENGINE_STEPS:
                step(name, engine)
            step("teardown", engine)
        # No validate step: Great Expectations costs more than the rest together; the report then says
        # validation did not run, which is a state it must show too.
    finally:
        if before is None:
            os.environ.pop("DAYONE_WORKDIR", None)
        else:
            os.environ["DAYONE_WORKDIR"] = before
    run = SimRun(AIRFLOW_RUN_ID, dayone_run_id(AIRFLOW_RUN_ID), root, SIM_CONFIG)
    rounds = run.run_dir().read_rows("rounds")
    assert rounds, "the simulator run measured nothing; see the step outcomes in " + str(root)
    return run

"""The nightly comparison's load scenarios beyond the performance sweeps: the trace replay and the traffic
scenarios (sessions, shared prefix, your own prompts), compared per level like a performance shape
(tasks/compare/nightly.py), and the settings that make two runs' figures of each comparable."""

from __future__ import annotations

from tasks.config import RunConfig
from tasks.core.names import PERF_SCENARIOS, TRACE_SCENARIO, TRAFFIC_SCENARIOS

# Scenarios whose `rounds` rows are compared per level: figures with intervals, the failed share, missing levels.
LOAD_SCENARIOS = (*PERF_SCENARIOS, TRACE_SCENARIO, *TRAFFIC_SCENARIOS)

# What makes the traffic a run sends the same: its source, window, shape and load. Seeds draw other prompts
# or arrivals of the same law, and rounds only change how sure a figure is, so they may differ.
TRAFFIC_SETTINGS: dict[str, tuple[str, ...]] = {
    TRACE_SCENARIO: ("path", "s3_key", "s3_bucket", "synthetic", "format", "speed", "window_start_s",
                     "window_length_s", "max_requests", "block_tokens"),
    "sessions": ("arrival", "sessions", "concurrency", "rates", "turns", "user_tokens", "output_tokens",
                 "think_time_s", "think_distribution"),
    "shared_prefix": ("groups", "prefix_tokens", "suffix_tokens", "requests_per_group", "output_tokens",
                      "concurrency"),
    "dataset": ("path", "s3_key", "s3_bucket", "max_requests", "max_tokens", "arrival", "concurrency", "rates"),
}


# What the hash of a trace window's or a dataset's rows as the plan read them (the manifest's content_sha256)
# stands for, where both runs recorded one: where the traffic was read from, and which of its rows were sent.
CONTENT_COVERS: dict[str, tuple[str, ...]] = {
    TRACE_SCENARIO: ("path", "s3_key", "s3_bucket", "synthetic", "format", "window_start_s", "window_length_s",
                     "max_requests"),
    "dataset": ("path", "s3_key", "s3_bucket", "max_requests"),
}


def planned_load(cfg: RunConfig) -> set[str]:
    """The load scenarios this run measures: a level of theirs the baseline has must be here."""
    return {s for s in LOAD_SCENARIOS if getattr(cfg.scenarios, s).enabled}

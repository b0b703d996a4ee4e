"""The names every stage shares: the scenarios of a run (PROTOCOL.md section 4) and the functional checks.

Each scenario name is a section of `scenarios` in the run config and a per-engine step of the pipeline.
The check names, in the order they run, are what `scenarios.functional.skip` may name: names only, so the
run config checks skip names when it is parsed (tasks/config/scenarios.py); the checks themselves are
listed in tasks/checks/__init__.py, which refuses a list that differs.
"""

PERF_SCENARIOS = ("short", "prefill", "decode", "rate")  # load sweeps: rounds of requests, headline figures
CAPACITY_SCENARIO = "capacity"  # an adaptive search for the highest load meeting the SLO (scenarios/capacity.py)
EVIDENCE_SCENARIOS = ("long_context", "boundary", "prefix_cache")  # one-off requests judged by a rule
TRACE_SCENARIO = "trace"  # a request trace replayed: its arrivals, lengths and shared prefixes (scenarios/trace.py)
TRAFFIC_SCENARIOS = ("sessions", "shared_prefix", "dataset")  # traffic like a user's: chat, prefixes, prompts
# Every scenario a config can switch off, in the order the pipeline runs them.
SCENARIO_SWITCHES = ("functional", *PERF_SCENARIOS, CAPACITY_SCENARIO, TRACE_SCENARIO, *EVIDENCE_SCENARIOS,
                     *TRAFFIC_SCENARIOS)

# The functional checks, in the order they run.
CHECK_NAMES: tuple[str, ...] = (
    "model_list",
    "chat",
    "chat_streaming",
    "reasoning_split",
    "tool_call",
    "tool_call_streaming",
    "image_input",
    "completions_echo_false",
    "completions_echo_true",
    "streaming_usage",
    "output_streams",
    "openai_sdk",
)

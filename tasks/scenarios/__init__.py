"""The scenarios of a run (PROTOCOL.md section 4), named once here.

Each name is a section of `scenarios` in the run config and a per-engine step of the pipeline.
"""

PERF_SCENARIOS = ("short", "prefill", "decode", "rate")  # load sweeps: rounds of requests, headline figures
CAPACITY_SCENARIO = "capacity"  # an adaptive search for the highest load meeting the SLO (scenarios/capacity.py)
EVIDENCE_SCENARIOS = ("long_context", "boundary", "prefix_cache")  # one-off requests judged by a rule
TRACE_SCENARIO = "trace"  # a request trace replayed: its arrivals, lengths and shared prefixes (scenarios/trace.py)
TRAFFIC_SCENARIOS = ("sessions", "shared_prefix", "dataset")  # traffic like a user's: chat, prefixes, prompts
# Every scenario a config can switch off, in the order the pipeline runs them.
SCENARIO_SWITCHES = ("functional", *PERF_SCENARIOS, CAPACITY_SCENARIO, TRACE_SCENARIO, *EVIDENCE_SCENARIOS,
                     *TRAFFIC_SCENARIOS)

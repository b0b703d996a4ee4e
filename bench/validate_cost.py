"""What the validate step's Great Expectations pass costs, by the result format it asks for.

A passing `requests` table (320 rows, the local-sim preset's size for one engine) is validated against its
suite with GX's default format (SUMMARY: every expectation also gathers its unexpected values) and with
BOOLEAN_ONLY (pass or fail alone), in the same process, alternating, so the machine's noise falls on both.
Figures: CPU seconds per validation (median of the repeats) and their ratio. tasks/publish/validate.py asks for
BOOLEAN_ONLY and validates a failed table again with the default, for its failures' counts: the last line
times validate_frames on the passing table and on one with a bad row (both passes).
"""

from __future__ import annotations

import os
import statistics
import time

REPEATS = 7
ROWS = 320


def _rows(n: int) -> list[dict]:
    return [{"run_id": "r", "engine": "e", "image_digest": "sha256:x", "scenario": "short", "round": 1 + i // 16,
             "concurrency": 4, "launch": 0, "request_id": f"q{i}", "first_encounter": False,
             "send_ts": 1.0 + i, "first_event_s": 0.01, "ttft_s": 0.02, "e2e_s": 0.5, "tpot_s": 0.01,
             "itl_s": [0.01] * 8, "tokens_per_event": [1] * 8, "prompt_tokens": 128, "completion_tokens": 64,
             "status": "ok"} for i in range(n)]


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.core import ExpectationSuite
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    from tasks.state.tables import to_frame
    from tasks.publish.validate import load_suite, validate_frames

    good = to_frame("requests", _rows(ROWS))
    bad = to_frame("requests", _rows(ROWS - 1) + [{**_rows(1)[0], "request_id": "bad", "status": "weird"}])
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False}
    doc = load_suite("requests")
    suite = ExpectationSuite(name=doc["name"], expectations=[
        ExpectationConfiguration(type=e["type"], kwargs=e["kwargs"]) for e in doc["expectations"]])
    batch = context.data_sources.add_pandas("bench").add_dataframe_asset("requests") \
        .add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": good})
    batch.validate(suite, result_format="BOOLEAN_ONLY")  # GX's own first-call work, in neither figure
    summary, boolean = [], []
    for _ in range(REPEATS):
        summary.append(_cpu(lambda: batch.validate(suite)))
        boolean.append(_cpu(lambda: batch.validate(suite, result_format="BOOLEAN_ONLY")))
    s, b = statistics.median(summary), statistics.median(boolean)
    print(f"requests, {ROWS} rows, {len(doc['expectations'])} expectations: SUMMARY {s:.3f} s CPU, "
          f"BOOLEAN_ONLY {b:.3f} s CPU, ratio {b / s:.2f}")
    passing = statistics.median(_cpu(lambda: validate_frames({"requests": good})) for _ in range(3))
    failing = statistics.median(_cpu(lambda: validate_frames({"requests": bad})) for _ in range(3))
    print(f"validate_frames: passing table {passing:.3f} s CPU, failing table {failing:.3f} s CPU (two passes)")


if __name__ == "__main__":
    main()

"""Great Expectations suites: generated from the one schema, and they catch bad rows."""

from __future__ import annotations

import json

from tasks.state.tables import TABLES, to_frame
from tasks.publish.validate import SUITES_DIR, build_suite, validate_frames


def test_suites_on_disk_match_the_schema():
    for name, table in TABLES.items():
        on_disk = json.loads((SUITES_DIR / f"{name}.json").read_text())
        assert on_disk == build_suite(table), f"expectations/{name}.json is stale: python -m tasks.publish.validate --write-suites"


def _request(**over):
    row = {"run_id": "r", "engine": "e", "image_digest": "sha256:x", "scenario": "short", "round": 1,
           "concurrency": 1, "launch": 0, "request_id": "q1", "first_encounter": False, "send_ts": 1.0,
           "first_event_s": 0.01,
           "ttft_s": 0.02, "e2e_s": 0.5, "tpot_s": 0.01, "itl_s": [0.01], "tokens_per_event": [1],
           "prompt_tokens": 128, "completion_tokens": 64, "status": "ok"}
    row.update(over)
    return row


def test_good_rows_pass_and_bad_rows_fail():
    good = validate_frames({"requests": to_frame("requests", [_request(), _request(request_id="q2")])})
    assert good["requests"]["success"], good
    bad = validate_frames({"requests": to_frame("requests", [
        _request(status="weird"),            # not in the closed set
        _request(request_id="q2", ttft_s=0.9),  # TTFT after E2E
        _request(request_id="q2"),           # duplicate key
    ])})
    failed = {f["expectation"] for f in bad["requests"]["failed"]}
    assert not bad["requests"]["success"]
    assert {"expect_column_values_to_be_in_set", "expect_column_pair_values_a_to_be_greater_than_b",
            "expect_compound_columns_to_be_unique"} <= failed


def test_an_empty_table_of_the_schema_passes_unevaluated_and_one_missing_a_column_still_fails():
    found = validate_frames({"requests": to_frame("requests", []),
                             "rounds": to_frame("rounds", []).drop(columns=["engine"])})
    assert found["requests"] == {"success": True, "rows": 0, "failed": [], "evaluated": 0}
    assert not found["rounds"]["success"] and found["rounds"]["evaluated"] > 0, found["rounds"]
    assert list(found) == ["requests", "rounds"]


def test_one_gx_session_per_process_judges_each_frame_afresh_and_follows_a_changed_suite(tmp_path):
    """Validations share GX's context, batch definitions and built suites (tasks/publish/validate.py _GxSession):
    a good frame after a bad one passes, a bad one after a good one fails with its own counts, and a suite
    file that changed is built again (the same table, a stricter suite: the same rows now fail)."""
    from tasks.publish.validate import _gx_session

    good = to_frame("requests", [_request(), _request(request_id="q2")])
    bad = to_frame("requests", [_request(status="weird"), _request(request_id="q2")])
    verdicts = [validate_frames({"requests": bad})["requests"]]
    session = _gx_session()
    batch_definition = session.batches["requests"]
    verdicts += [validate_frames({"requests": f})["requests"] for f in (good, bad, good)]
    assert [v["success"] for v in verdicts] == [False, True, False, True]
    assert verdicts[0]["failed"] == verdicts[2]["failed"] and verdicts[2]["failed"][0]["unexpected_count"] == 1
    assert _gx_session() is session and session.batches["requests"] is batch_definition

    suite = json.loads((SUITES_DIR / "requests.json").read_text())
    (tmp_path / "requests.json").write_text(json.dumps(suite))
    assert validate_frames({"requests": good}, tmp_path)["requests"]["success"]
    suite["expectations"].append({"type": "expect_table_row_count_to_equal", "kwargs": {"value": 3}})
    (tmp_path / "requests.json").write_text(json.dumps(suite))
    stricter = validate_frames({"requests": good}, tmp_path)["requests"]
    assert not stricter["success"] and [f["expectation"] for f in stricter["failed"]] == ["expect_table_row_count_to_equal"]

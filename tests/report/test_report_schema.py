"""summary.json is a versioned RunSummary: it round-trips through JSON, the page escapes whatever it
carries, and a reader of an archived summary of another schema version refuses it by name."""

from __future__ import annotations

import io
import json
import logging

import pytest

from tasks.publish.archive import json_bytes

EVIL = "<script>alert('x')</script>"
EVIL_AS_TEXT = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"


@pytest.fixture(scope="module")
def summary(sim_run):
    from tasks.report import build_summary

    return build_summary(sim_run.run_dir(), sim_run.cfg())


class _S3:
    """The two calls of an S3 client that reading an archived summary makes."""

    def __init__(self, objects: dict[str, bytes]):
        self.objects = objects

    def get_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 (boto3's names)
        from botocore.exceptions import ClientError

        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": Key}}, "GetObject")
        return {"Body": io.BytesIO(self.objects[Key])}


def test_a_summary_round_trips_through_json_unchanged(summary, sim_run, tmp_path):
    from tasks.report import read_summary, write_report
    from tasks.report.schema import SCHEMA, RunSummary

    doc = json.loads(json.dumps(summary.model_dump(mode="json")))
    assert doc["schema"] == SCHEMA == "dayone.summary/2"
    again = read_summary(doc)
    assert again == summary
    assert again.model_dump(mode="json") == doc
    assert set(doc["engines"]) == {"sim-sglang", "sim-vllm", "sim-down"}
    # What the report step writes is what a reader gets back.
    run = sim_run.copy(tmp_path)
    built = write_report(run.run_dir(), run.cfg())
    written = json.loads((run.run_dir().path / "summary.json").read_text(encoding="utf-8"))
    assert RunSummary.model_validate(written) == built["summary"] == summary


def test_an_unknown_field_is_refused(summary):
    from pydantic import ValidationError

    from tasks.report import read_summary

    doc = summary.model_dump(mode="json")
    doc["engines"]["sim-sglang"]["perf"]["short"]["levels"][0]["surprise"] = 1
    with pytest.raises(ValidationError, match="surprise"):
        read_summary(doc)


def test_markup_in_any_field_reaches_the_page_as_text(summary):
    """Autoescaping is on: an engine name, a detail, a check's evidence, a log line are text."""
    from tasks.report import read_summary, render_html

    doc = summary.model_dump(mode="json")
    doc["engines"] = {(EVIL if name == "sim-sglang" else name): e for name, e in doc["engines"].items()}
    evil = doc["engines"][EVIL]
    evil["dialect"] = EVIL
    evil["check_evidence"]["chat"].update(reason=EVIL, field=EVIL, excerpt=EVIL)
    evil["startup_findings"][0]["line"] = EVIL
    doc["engines"]["sim-down"]["ready_detail"] = EVIL
    doc["not_tested"].append({"engine": EVIL, "what": EVIL, "why": EVIL})
    doc["decision"].append({"topic": "leads", "text": EVIL})
    doc["comparisons"][0].update(engine=EVIL, level=EVIL)
    page = render_html(read_summary(doc), charts={})
    assert "<script" not in page
    effects = page[page.index("id='effects'"):]
    assert effects.count(EVIL_AS_TEXT) >= 2  # the comparisons table's engine and level
    # name: engines table, comparison and checks headers, several tables' rows; the fields above once each
    assert page.count(EVIL_AS_TEXT) >= 15


def test_compare_refuses_an_archived_summary_of_another_version_and_goes_on(summary, caplog):
    from tasks.compare.sides import archived_summary
    from tasks.report import read_summary
    from tasks.report.schema import SummaryVersionError

    older = {**summary.model_dump(mode="json"), "schema": "dayone.summary/1"}
    with pytest.raises(SummaryVersionError, match="'dayone.summary/1'.*'dayone.summary/2'"):
        read_summary(older)
    s3 = _S3({"old/summary.json": json_bytes(older), "broken/summary.json": b"{not json",
              "now/summary.json": json_bytes(summary.model_dump(mode="json"))})
    with caplog.at_level(logging.WARNING, logger="dayone.compare"):
        assert archived_summary(s3, "bucket", "old/summary.json") is None
        assert archived_summary(s3, "bucket", "broken/summary.json") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("old/summary.json" in w and "treated as absent" in w and "dayone.summary/1" in w for w in warnings)
    assert any("broken/summary.json" in w and "treated as absent" in w for w in warnings)
    assert archived_summary(s3, "bucket", "missing/summary.json") is None
    assert archived_summary(s3, "bucket", "now/summary.json") == summary


def test_a_baseline_with_an_older_summary_loses_only_its_verdicts(summary):
    from tasks.compare.sides import archived_side
    from tasks.config import parse_run_config

    cfg = parse_run_config({"run_id": "now-1", "archive": {"bucket": "bucket"}})
    older = {**summary.model_dump(mode="json"), "schema": "dayone.summary/1"}
    s3 = _S3({"base/summary.json": json_bytes(older)})
    side = archived_side(s3, cfg, {"run_id": "base-1", "prefixes": {"sim-sglang": "base/"}}, "sim-sglang")
    assert side.run_id == "base-1" and side.cache_verdict is None and side.ttft_published is None
    s3.objects["base/summary.json"] = json_bytes(summary.model_dump(mode="json"))
    side = archived_side(s3, cfg, {"run_id": "base-1", "prefixes": {"sim-sglang": "base/"}}, "sim-sglang")
    assert side.cache_verdict == "effective" and side.ttft_published is True


def test_the_regressions_table_names_each_rows_load(summary):
    """A rate round has no concurrency: its row says so rather than showing a number or a bare dash."""
    from tasks.report import read_summary, render_html

    doc = summary.model_dump(mode="json")
    row = {"engine": "sim-sglang", "metric": "output_tok_s", "baseline_run_id": "then", "baseline_value": 100.0,
           "value": 90.0, "change": -0.1, "threshold": -0.05, "regressed": True}
    doc["regressions"] = [{**row, "scenario": "short", "concurrency": 4},
                          {**row, "scenario": "rate", "concurrency": None, "metric": "output_tok_s@2rps"}]
    page = render_html(read_summary(doc), charts={})
    table = page[page.index("id='regressions'"):]
    table = table[:table.index("</table>")]
    assert "<th>load</th>" in table and "<td>c=4</td>" in table and "<td>rate: see metric</td>" in table

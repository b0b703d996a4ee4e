"""Every boundary and regression test can cite what it answers (docs/PROTOCOL.md, "What a test answers"): a
scenario or one of its lengths carries the upstream issue, pull request or recipe it comes from, checked when the
config is parsed, and the report shows it beside the result."""

from __future__ import annotations

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.report.html import render_html
from tasks.report.schema.functional import Needle
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir

CRASH = "https://github.com/sgl-project/sglang/issues/10000"
RECIPE = "the GLM-5.3-Flash Day-1 recipe, 262K cold prefill"


def test_a_boundary_length_and_a_scenario_show_what_they_answer_beside_their_result(tmp_path):
    config = parse_run_config({"run_id": "cites", "model": {"name": "m"},
                               "engines": [{"name": "sglang", "dialect": "sglang"}],
                               "scenarios": {"cites": {"boundary.263000": [CRASH], "boundary": [RECIPE]}}})
    summary = build_summary(RunDir("cites", root=tmp_path), config)
    assert summary.scenarios.cites == {"boundary.263000": [CRASH], "boundary": [RECIPE]}
    e = summary.engines["sglang"]
    e.ready = True
    e.boundary.needles = [Needle(scenario="boundary", target_tokens=n, prompt_tokens=n, depth=0.5, attempt=1,
                                 first_encounter=True, ttft_s=30.0, e2e_s=31.0, passed=True, status="ok",
                                 error=None, expected="x", answer="x") for n in (261_000, 263_000)]
    page = render_html(summary)
    row = page[page.index("263,000"):].split("</tr>")[0]
    assert f"answers <a href='{CRASH}'>" in row
    assert CRASH not in page[page.index("261,000"):].split("</tr>")[0]  # only the length that cites it
    assert f"answers {RECIPE}" in page and "boundary at 263000 tokens" in page


@pytest.mark.parametrize("cites, wrong", [({"boundary.1000": ["x"]}, "names no length"),
                                          ({"bounds": ["x"]}, "names no scenario")])
def test_a_cite_of_a_test_the_run_does_not_have_is_refused_at_parse(cites, wrong):
    with pytest.raises(ConfigError, match=wrong):
        parse_run_config({"scenarios": {"cites": cites}})

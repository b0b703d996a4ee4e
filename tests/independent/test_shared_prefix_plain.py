"""The shared_prefix scenario against a server that caches by exact shared prefix (prefix_server.py): the
hit rate measured from its usage and from its counters equals the reuse the scenario expects, round by
round, at every concurrency; the prompts share exactly the planned prefix and no more."""

from __future__ import annotations

from pathlib import Path

from plain_server import MODEL
from prefix_server import ExactPrefixServer, common_prefix

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir
from tasks.scenarios.shared_prefix import run_shared_prefix, shared_prefix_prompts

SETTINGS = {"enabled": True, "groups": 3, "prefix_tokens": 96, "suffix_tokens": 24, "requests_per_group": 4,
            "output_tokens": 4, "concurrency": [1, 4], "rounds": 2}


def _ctx(tmp_path: Path, url: str) -> EngineContext:
    cfg = parse_run_config({"run_id": "prefix-plain", "model": {"name": MODEL},
                            "engines": [{"name": "eng", "dialect": "vllm", "launcher": "external", "endpoint": url}],
                            "scenarios": {"shared_prefix": SETTINGS, "warmup": False}})
    return EngineContext(cfg, endpoint_for(cfg, "eng", url, "sha256:" + "0" * 64), RunDir("prefix-plain", root=tmp_path))


def test_the_measured_hit_rate_equals_the_expected_reuse(tmp_path):
    with ExactPrefixServer() as server:
        ctx = _ctx(tmp_path, server.url)
        summary = run_shared_prefix(ctx)
    expected = 3 * 3 * 96 / (12 * 120)
    assert summary["expected_reuse"] == expected
    rows = ctx.run_dir.read_rows("shared_prefix_rounds", "eng")
    assert len(rows) == 4 and len(server.prompts) == 4 * 12
    for r in rows:
        assert r["requests_ok"] == 12 and r["cached_reported"] == 12
        assert r["usage_hit_rate"] == expected and r["server_hit_rate"] == expected, r
    for level in summary["levels"]:
        assert level["usage_hit_rate"]["median"] == expected == level["server_hit_rate"]["median"]


def test_a_groups_prompts_share_exactly_the_prefix_and_rounds_share_nothing():
    from tasks.config.shared_prefix import SharedPrefixScenario

    s = SharedPrefixScenario(**SETTINGS)
    one, other = shared_prefix_prompts(s, "r1"), shared_prefix_prompts(s, "r2")
    assert len(one) == 12 and all(len(p) == 120 for p in one)
    assert common_prefix(one[0], one[3]) == 96  # group 0, requests 0 and 1 (groups take turns)
    assert common_prefix(one[0], one[1]) < 96  # groups 0 and 1
    assert max(common_prefix(a, b) for a in one for b in other) < 4

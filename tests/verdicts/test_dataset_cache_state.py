"""Dataset rounds whose prefix cache was not emptied are marked and compared like with like (issue 43, item 10),
against a plain server written for the test that serves a prompt it holds in its cache at once and computes a new
one slowly: an engine that cannot clear its cache (vLLM without dev mode) meets the rows from cache after round 1;
it is neither picked for that speed against one that cleared before every round, nor is a night that cleared
before every round red against one that could not."""

from __future__ import annotations

import json
import time
from pathlib import Path

from aiohttp import web
from plain_pipeline import external, scenarios
from plain_server import MODEL, PlainServer
from verdict_runs import PURPOSES, engine_context

from tasks.compare.nightly import compare_run
from tasks.config import parse_run_config
from tasks.publish.archive import archive_run
from tasks.report import build_summary
from tasks.report.choice import choose
from tasks.scenarios.dataset import run_dataset
from tasks.state.storage import RunDir

ROUNDS = 4
COLD_S, CACHED_S = 0.12, 0.01


class CachingServer(PlainServer):
    """A prompt it has met (by its length: the test's rows differ in length) is served from its prefix cache after
    CACHED_S, a new one after COLD_S; with `resets`, POST /reset_prefix_cache empties the cache (vLLM's route in
    dev mode); without, the route is missing (404), as in vLLM without dev mode."""

    def __init__(self, resets: bool) -> None:
        super().__init__()
        self.resets, self.held = resets, set()

    def first_token_delay_s(self, kind: str, prompt_tokens: int, max_tokens: int) -> float:
        cached = prompt_tokens in self.held
        self.held.add(prompt_tokens)
        return CACHED_S if cached else COLD_S

    async def _reset(self, request: web.Request) -> web.Response:
        self.held.clear()
        return web.json_response({"success": True})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), *([web.post("/reset_prefix_cache", self._reset)] if self.resets else [])]


def _config(run_id: str, engines: dict[str, str], path: Path, bucket: str = "unused"):  # noqa: ANN202
    return parse_run_config({
        "run_id": run_id, "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [external(name, url, "vllm") for name, url in engines.items()],
        "scenarios": {**scenarios(dataset={"enabled": True, "path": str(path), "max_tokens": 2, "concurrency": [2],
                                           "rounds": ROUNDS}), "warmup": False},
        "archive": {"bucket": bucket}, "request_timeout_s": 10, "choice": {"purposes": PURPOSES}})


def _prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"  # rows of 3 to 10 words: each its own length, so its own cache entry
    path.write_text("".join(json.dumps({"prompt": " ".join(["word"] * (3 + i))}) + "\n" for i in range(8)))
    return path


def test_an_engine_served_from_cache_is_not_compared_with_one_that_cleared_it(run_root, tmp_path):
    with CachingServer(resets=True) as clears, CachingServer(resets=False) as cannot:
        cfg = _config("cache-state", {"clears": clears.url, "cannot": cannot.url}, _prompts(tmp_path))
        run_dir = RunDir("cache-state", run_root)
        for name, server in (("clears", clears), ("cannot", cannot)):
            run_dataset(engine_context(cfg, run_dir, name, server), None)
    summary = build_summary(run_dir, cfg)
    choices = choose(summary, cfg.choice.orders())
    assert [c.picked for c in choices] == [["clears", "cannot"], ["clears", "cannot"]], choices
    assert not any(c.scenario == "dataset" for c in summary.comparisons), summary.comparisons
    [cleared], [served] = (summary.engines[n].traffic_levels["dataset"] for n in ("clears", "cannot"))
    assert (cleared.cache_cleared, served.cache_cleared) == ([True] * ROUNDS, [False] * ROUNDS)


def test_a_night_that_cleared_its_cache_is_not_red_against_one_that_could_not(s3_server, run_root, tmp_path):
    s3, bucket = s3_server.client(), f"cache-{time.time_ns()}"
    prompts = _prompts(tmp_path)
    nights = []
    for n, resets in ((1, False), (2, True)):  # dev mode turned on tonight: every round computes its rows again
        with CachingServer(resets=resets) as server:
            cfg = _config(f"night-{n}", {"eng": server.url}, prompts, bucket)
            run_dir = RunDir(f"night-{n}", run_root)
            run_dir.write_json("manifest.json", {"run_id": cfg.run_id, "created_ts": 1000.0 * n,
                                                 "config": cfg.model_dump(mode="json")})
            run_dir.write_json("validation.json", {"success": True})
            run_dataset(engine_context(cfg, run_dir, "eng", server), None)
        nights.append((run_dir, cfg))
    archive_run(*nights[0], s3)
    night2, cfg2 = nights[1]
    compare_run(night2, cfg2, s3)  # no regression raised: the rounds are not alike
    rows = {r["metric"]: r for r in night2.read_rows("regressions", "eng") if r["scenario"] == "dataset"}
    state = next(r for m, r in rows.items() if m.startswith("cache_state"))
    assert not state["regressed"] and state["verdict"].startswith("not compared"), state
    assert not any(m.startswith(("ttft_p95_s", "output_tps")) for m in rows), rows

"""Prefix-cache clears against servers written for the test, answering as current vLLM does.

vLLM's POST /reset_prefix_cache answers 200 {"success": false} while requests hold blocks and
clears nothing: a 2xx is not a clear. One server refuses a few times and then clears; the other
never clears, and the prefix-cache verdict must say the cold request was not cold, and why.
"""

from __future__ import annotations

import httpx
import pytest
from aiohttp import web
from plain_server import MODEL, PlainServer

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.engines import adapter_for
from tasks.engines.vllm import VLLMAdapter
from tasks.evidence.cache import run_prefix_cache
from tasks.state.storage import RunDir


class ClearsAfterRefusals(PlainServer):
    """POST /reset_prefix_cache: 200 {"success": false} `refusals` times, then {"success": true}."""

    def __init__(self, refusals: int | None) -> None:
        super().__init__()
        self.refusals = refusals  # None: never clears
        self.resets = 0

    async def _reset(self, request: web.Request) -> web.Response:
        self.resets += 1
        cleared = self.refusals is not None and self.resets > self.refusals
        return web.json_response({"success": cleared})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/reset_prefix_cache", self._reset)]


@pytest.mark.parametrize("refusals", [0, 3])
def test_clear_is_done_only_when_the_body_says_success(refusals):
    with ClearsAfterRefusals(refusals) as server, httpx.Client(timeout=10) as client:
        cleared, detail = adapter_for("vllm").clear_cache_when_idle(client, server.url, interval_s=0.01)
        resets = server.resets
    assert cleared is True, detail
    assert resets == refusals + 1  # every refusal was retried, and nothing after the clear
    assert detail.startswith('POST /reset_prefix_cache -> 200 {"success": true}')
    assert (f"after {refusals + 1} tries" in detail) == (refusals > 0), detail


def test_a_clear_that_never_succeeds_is_not_done_and_says_how_often_it_tried():
    with ClearsAfterRefusals(None) as server, httpx.Client(timeout=10) as client:
        cleared, detail = adapter_for("vllm").clear_cache_when_idle(client, server.url, timeout_s=0.3, interval_s=0.05)
        resets = server.resets
    assert cleared is False
    assert resets >= 2 and f"on all {resets} tries" in detail and "never cleared" in detail, detail


def test_cache_verdict_names_a_cold_request_that_was_not_cleared(tmp_path, monkeypatch):
    monkeypatch.setattr(VLLMAdapter, "cache_clear_wait_s", 0.3)
    config = parse_run_config({
        "run_id": "plain-run",
        "model": {"name": MODEL},
        "engines": [{"name": "plain-vllm", "dialect": "vllm"}],
        "scenarios": {"prefix_cache": {"prompt_tokens": 200, "repeats": 2}},
        "request_timeout_s": 30,
    })
    with ClearsAfterRefusals(None) as server:
        ctx = EngineContext(config, endpoint_for(config, "plain-vllm", server.url, "sha256:" + "0" * 64),
                          RunDir("plain-run", root=tmp_path))
        verdict = run_prefix_cache(ctx)
        trials = ctx.run_dir.read_rows("cache_trials", "plain-vllm")
    assert verdict["cache_cleared"] is False and trials[0]["cache_cleared"] is False
    assert "never cleared" in verdict["cache_clear_detail"]
    assert "the cache was not cleared before the cold request" in verdict["reason"]
    assert '{"success": false}' in verdict["reason"]

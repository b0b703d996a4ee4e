"""The prefix-cache verdict through `dayone cache` against servers written for the test.

Both servers cache for real in the way the rule checks: a repeat's first token comes 10x sooner and
vLLM-named counters count the repeated prompt's tokens as hits. One streams token by token; the
other holds its output back to the last event, so its TTFT does not time a first token and the
verdict, which rests half on TTFT, may not be "effective" (PROTOCOL.md section 5): the same rule
that withholds a benchmark's TTFT withholds the cache trial's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from aiohttp import web
from plain_server import MODEL, PlainServer


class CachingServer(PlainServer):
    """vLLM's cache surface: POST /reset_prefix_cache and prefix_cache_{queries,hits}_total."""

    hold_back = False

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[int] = set()
        self.queries = self.hits = 0

    def first_token_delay_s(self, kind: str, prompt_tokens: int, max_tokens: int) -> float:
        hit = prompt_tokens in self.seen
        self.seen.add(prompt_tokens)
        self.queries += prompt_tokens
        self.hits += prompt_tokens if hit else 0
        return 0.02 if hit else 0.2

    def completion_events(self, kind: str, prompt_tokens: int, max_tokens: int) -> list[tuple[float, dict]]:
        events = super().completion_events(kind, prompt_tokens, max_tokens)
        if not self.hold_back:
            return events
        head = [e for e in events if not _text(e[1])]  # the role-only opening
        words = [e for e in events if _text(e[1])]
        held = "".join(_text(c) for _, c in words[1:])
        return [*head, words[0], (self.token_delay_s * (len(words) - 1), self.text_chunk(kind, held))]

    def metrics_text(self) -> str:
        return (f"vllm:prefix_cache_queries_total {self.queries}\n"
                f"vllm:prefix_cache_hits_total {self.hits}\n")

    async def _reset(self, request: web.Request) -> web.Response:
        self.seen.clear()
        return web.json_response({"success": True})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/reset_prefix_cache", self._reset)]


class HoldsBackItsOutput(CachingServer):
    hold_back = True


def _text(chunk: dict) -> str:
    choice = (chunk.get("choices") or [{}])[0]
    return (choice.get("delta") or {}).get("content") or choice.get("text") or ""


def _cache(url: str, out) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "cache", "--endpoint", url, "--dialect", "vllm", "--model", MODEL,
         "--prompt-tokens", "300", "--repeats", "3", "--output-tokens", "16", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "prefix_cache.json").read_text()), proc.stdout


@pytest.mark.parametrize("server_class", [CachingServer, HoldsBackItsOutput])
def test_the_cache_verdict_rests_on_ttft_only_where_the_streams_time_a_first_token(server_class, tmp_path):
    with server_class() as server:
        verdict, stdout = _cache(server.url, tmp_path)
    assert verdict["hit_rate"] == pytest.approx(0.75)  # 3 of 4 prompts were hits, whatever the stream
    if not server_class.hold_back:
        assert verdict["verdict"] == "effective", verdict
        assert verdict["withheld"] is None and verdict["ttft_decrease"] > 0.8
        assert "TTFT not published" not in stdout
        return
    assert verdict["verdict"] == "unconfirmed", verdict
    assert verdict["ttft_decrease"] is None and verdict["cold_ttft_s"] is None
    assert "did not deliver output as generated" in verdict["withheld"]
    assert "trial 0: the last event carried" in verdict["reason"]
    assert verdict["cold_e2e_s"] > verdict["hot_e2e_median_s"]  # E2E stays, as evidence
    assert stdout.count("TTFT not published") == 4, stdout

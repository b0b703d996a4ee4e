"""Needles against a server written for the test that answers right only when decoding greedily.

A sampling engine (llama.cpp samples at 0.8 unless told otherwise) gives a small model's answer
a chance to slip a character; a needle verdict must not be a draw, so every needle request asks
for temperature 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pandas as pd
import pytest
from aiohttp import web
from plain_server import MODEL, PlainServer, prompt_token_count

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.evidence.needles import run_long_context
from tasks.stats.reliability import engine_ttft_verdict
from tasks.state.storage import RunDir

CODE = re.compile(r"The secret code is ([A-Z0-9]{4}-[A-Z0-9]{4})\.")


class AnswersWhenGreedy(PlainServer):
    """Streams the prompt's needle code when the request sets temperature 0, else the code with
    its first character changed (what a sampled answer from a small model sometimes is)."""

    def __init__(self) -> None:
        super().__init__()
        self.temperatures: list[Any] = []
        self._answer = ""

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt") or " ".join(m.get("content", "") for m in body.get("messages") or [])
        found = CODE.search(prompt)
        if found is None:  # not a needle (e.g. measuring the chat template)
            self._answer = "ok"
            return await super()._generate(request, kind)
        code = found.group(1)
        self.temperatures.append(body.get("temperature", "unset"))
        self._answer = code if body.get("temperature") == 0 else ("2" if code[0] != "2" else "3") + code[1:]
        return await super()._generate(request, kind)

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"count": prompt_token_count(body.get("prompt", ""))})

    async def _reset(self, request: web.Request) -> web.Response:
        return web.json_response({"success": True})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.post("/tokenize", self._tokenize), web.post("/reset_prefix_cache", self._reset)]

    def completion_events(self, kind: str, prompt_tokens: int, max_tokens: int) -> list[tuple[float, dict]]:
        return [(0.01, self.text_chunk(kind, f" {self._answer}."))]


def test_every_needle_request_decodes_greedily_and_passes(tmp_path):
    config = parse_run_config({
        "run_id": "plain-run",
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "plain-vllm", "dialect": "vllm"}],
        "scenarios": {"long_context": {"enabled": True, "lengths": [600], "depths": [0.1, 0.9],
                                       "include_model_limit": False, "output_tokens": 8},
                      "boundary": {"enabled": False}},
        "request_timeout_s": 30,
    })
    with AnswersWhenGreedy() as server:
        ctx = EngineContext(config, endpoint_for(config, "plain-vllm", server.url, "sha256:" + "0" * 64),
                          RunDir("plain-run", root=tmp_path))
        rows = run_long_context(ctx)
        temperatures = server.temperatures
    assert len(rows) == 4 and temperatures == [0.0] * 4, temperatures
    assert all(r["passed"] and r["expected"] in r["answer"] for r in rows), rows


class StreamsTheAnswer(AnswersWhenGreedy):
    """The answer word by word, as a real engine streams it."""

    def completion_events(self, kind: str, prompt_tokens: int, max_tokens: int) -> list[tuple[float, dict]]:
        return [(0.01, self.text_chunk(kind, w)) for w in (" The", " secret", " code", " is", f" {self._answer}.")]


class HoldsBackTheAnswer(AnswersWhenGreedy):
    """One word, then the rest of the answer in the last event: the stream does not time a first token."""

    def completion_events(self, kind: str, prompt_tokens: int, max_tokens: int) -> list[tuple[float, dict]]:
        return [(0.01, self.text_chunk(kind, " The")),
                (0.03, self.text_chunk(kind, f" secret code is {self._answer}."))]


def _longctx(url: str, out) -> tuple[subprocess.CompletedProcess, pd.DataFrame]:
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "longctx", "--endpoint", url, "--dialect", "vllm", "--model", MODEL,
         "--lengths", "600", "--depths", "0.1,0.9", "--no-model-limit", "--output-tokens", "8", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    return proc, pd.read_csv(out / "needles.csv")


@pytest.mark.parametrize("server_class", [StreamsTheAnswer, HoldsBackTheAnswer])
def test_needle_ttft_obeys_the_ttft_rule_on_every_path(server_class, tmp_path):
    held = server_class is HoldsBackTheAnswer
    with server_class() as server:
        proc, needles = _longctx(server.url, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert needles["passed"].all()  # the answers are right either way: only the timing is in doubt
    assert bool(needles["stream_defect"].notna().all()) is held, needles["stream_defect"].tolist()
    assert ("not published" in proc.stdout) is held, proc.stdout
    # the engine-level verdict (summary.json, the nightly comparison) reads the needle rows too
    run_dir = RunDir("needles", root=tmp_path / "engine")
    with run_dir.rows("needles", "plain-vllm", "long_context") as out:
        for row in needles.to_dict("records"):
            out.write({k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()})
    verdict = engine_ttft_verdict(run_dir, "plain-vllm")
    assert ("did not deliver output as generated" in verdict["reason"]) is held, verdict

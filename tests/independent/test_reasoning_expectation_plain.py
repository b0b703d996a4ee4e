"""reasoning_split through `dayone check` against servers written for the test (not the simulator).

- A server that never reasons: not_applicable by default, a fail once the user says the model
  reasons (`--model-reasons yes`, the run config's model.reasoning: true).
- A server that streams its reasoning in `reasoning` (vLLM's newer field) but answers unstreamed in
  `reasoning_content`: the evidence names each, so a frontend that reads only one field can be judged.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
from plain_server import MODEL, PlainServer

from tasks.checks import CHECK_NAMES


class SplitFields(PlainServer):
    """Chat reasons first: streamed in `reasoning`; the unstreamed message moves it to `reasoning_content`."""

    def completion_events(self, kind, prompt_tokens, max_tokens):
        events = super().completion_events(kind, prompt_tokens, max_tokens)
        if kind != "chat":
            return events
        thinking = [(0.002, self.chat_chunk({"reasoning": f"step{i} "})) for i in range(4)]
        return events[:1] + thinking + events[1:]

    async def _generate(self, request, kind):
        response = await super()._generate(request, kind)
        if kind == "chat" and getattr(response, "body", None):  # unstreamed: rename the field
            body = json.loads(response.body)
            message = body["choices"][0]["message"]
            message["reasoning_content"] = message.pop("reasoning")
            response.body = json.dumps(body).encode()
        return response


def _reasoning_split(url: str, out, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    others = ",".join(c for c in CHECK_NAMES if c != "reasoning_split")
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.cli", "check", "--endpoint", url, "--dialect", "openai", "--model", MODEL,
         "--skip", others, "--out", str(out), *extra],
        capture_output=True, text=True, timeout=120,
    )
    checks = pd.read_csv(out / "checks.csv")
    row = checks[checks["check"] == "reasoning_split"].iloc[0]
    return {"outcome": row["outcome"], **json.loads(row["evidence"])}, proc


def test_no_reasoning_is_not_applicable_unless_the_user_says_the_model_reasons(tmp_path):
    with PlainServer() as server:
        unknown, _ = _reasoning_split(server.url, tmp_path / "unknown")
        reasons, proc = _reasoning_split(server.url, tmp_path / "reasons", "--model-reasons", "yes")
        temperatures = {r["temperature"] for r in server.requests}
    assert unknown["outcome"] == "not_applicable", unknown
    assert reasons["outcome"] == "fail", reasons
    assert "model.reasoning: true" in reasons["reason"]
    assert proc.returncode == 1  # a failed check fails the command
    assert temperatures == {0.0}  # checks decode greedily: a verdict is not the sampler's draw


def test_the_evidence_names_each_field_that_carried_the_reasoning(tmp_path):
    with SplitFields() as server:
        evidence, proc = _reasoning_split(server.url, tmp_path, "--model-reasons", "yes")
    assert evidence["outcome"] == "pass", (evidence, proc.stdout[-1000:])
    assert evidence["reasoning_field"] == "reasoning_content"
    assert evidence["streamed_reasoning_field"] == "reasoning"
    assert evidence["streamed_reasoning_excerpt"].startswith("step0 step1")

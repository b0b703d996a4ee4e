"""A text-only model is not a failing engine (tasks/checks/image_input.py), against plain servers written here.

Each server refuses the image as vLLM 0.32 does for SmolLM2 (tests/fixtures/wire/vllm-0.32.0/image_input.json: 400
"SmolLM2-135M-Instruct is not a multimodal model") or as SGLang would, and says (or not) what the model takes: vLLM
in /server_info's scheduler_config.is_multimodal_model (dev mode), SGLang in /model_info's has_image_understanding.
The check is not_applicable only where the engine says the model takes text only, and says which way it said it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "independent"))
from plain_server import PlainServer  # noqa: E402

from tasks.checks import image_input  # noqa: E402
from tasks.checks.base import FAIL, NOT_APPLICABLE, Probe  # noqa: E402
from tasks.engines import adapter_for  # noqa: E402
from tasks.engines.context import EngineEndpoint  # noqa: E402

VLLM_REFUSAL = "plain-model is not a multimodal model"


class RefusesImages(PlainServer):
    """Answers 400 to any image; `info` is what its info endpoint says (None: no such endpoint, a 404)."""

    info_path = "/server_info"
    refusal = VLLM_REFUSAL

    def __init__(self, info: dict[str, Any] | None) -> None:
        super().__init__()
        self.info = info

    def error_for(self, kind: str, body: dict[str, Any]) -> tuple[int, str] | None:
        parts = (body.get("messages") or [{}])[-1].get("content")
        if isinstance(parts, list) and any(p.get("type") == "image_url" for p in parts):
            return 400, self.refusal
        return None

    async def _info(self, request: web.Request) -> web.Response:
        if self.info is None:
            raise web.HTTPNotFound()
        return web.json_response(self.info)

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.get(self.info_path, self._info)]


def vllm_info(multimodal: bool) -> dict[str, Any]:
    return {"vllm_config": {"scheduler_config": {"is_multimodal_model": multimodal}, "model_config": {}}}


def run_check(server: PlainServer, dialect: str):
    endpoint = EngineEndpoint("t", "e", "sha256:x", server.url, server.model, adapter_for(dialect))
    with httpx.Client(timeout=10) as client:
        return image_input.run(Probe(endpoint, client))


@pytest.mark.parametrize("info,refusal,outcome,said", [
    (vllm_info(False), VLLM_REFUSAL, NOT_APPLICABLE, "is_multimodal_model is false"),
    (None, VLLM_REFUSAL, NOT_APPLICABLE, "refused the image because the model takes text only"),
    (vllm_info(True), VLLM_REFUSAL, FAIL, "request failed"),  # a multimodal model refused: the engine's fault
    (None, "image decoding failed", FAIL, "request failed"),  # nothing says text-only
], ids=["reported-text-only", "refused-in-its-words", "multimodal-refused", "unexplained-400"])
def test_vllm_text_only_model_is_not_applicable_only_where_the_engine_says_so(info, refusal, outcome, said):
    server = RefusesImages(info)
    server.refusal = refusal
    with server:
        result = run_check(server, "vllm")
    assert result.outcome == outcome, result.evidence
    assert said in result.evidence["reason"]
    assert result.evidence["status"] == 400


def test_sglang_model_info_says_the_model_takes_text_only():
    server = RefusesImages({"model_path": "/m", "has_image_understanding": False})
    server.info_path = "/model_info"
    server.refusal = "The model does not support image input"
    with server:
        result = run_check(server, "sglang")
    assert result.outcome == NOT_APPLICABLE, result.evidence
    assert "has_image_understanding is false" in result.evidence["reason"]

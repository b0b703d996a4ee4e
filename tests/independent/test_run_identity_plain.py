"""What a run served and what it did not prove, through the pipeline against servers written for the test.

Two plain servers, one per dialect, each answering the endpoints that engine has for what it serves:
- a vLLM-dialect server whose model list's `root` is a Hugging Face snapshot path and whose
  /server_info (VLLM_SERVER_DEV_MODE) says `model_config.revision` is `main`, started with speculative
  decoding and FP8 weights in its args and an engine switch and a token in its env;
- an SGLang-dialect server whose /server_info says revision `main` and model path `org/plain` (no
  commit anywhere), and whose completions arrive in one event (its streams are never shown).
Before: the manifest withheld every env value, no run recorded which weights it served or flagged the
moving `main`, and the report's limits were the same three sentences for every run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from aiohttp import web
from markupsafe import escape
from plain_pipeline import external, run_pipeline, scenarios
from plain_server import MODEL, PlainServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SNAPSHOT_PATH = f"/models/hub/models--org--plain/snapshots/{COMMIT}"
PLANTED_TOKEN = "hf_plantedIdentityToken0123456789"
SPECULATIVE = '{"method": "mtp", "num_speculative_tokens": 1}'


class ServesSnapshot(PlainServer):
    """vLLM's answers: the model list's root, and /server_info?config_format=json."""

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model",
                                                              "root": SNAPSHOT_PATH, "max_model_len": 4096}]})

    async def _server_info(self, request: web.Request) -> web.Response:
        if request.query.get("config_format") != "json":
            return web.json_response({"vllm_config": f"model='{SNAPSHOT_PATH}', revision=main, dtype=auto"})
        return web.json_response({"vllm_config": {"model_config": {"model": SNAPSHOT_PATH, "revision": "main"}}})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.get("/server_info", self._server_info)]


class SglangOneEvent(PlainServer):
    """SGLang's answers (server args, model info) naming no commit; completions in one event."""

    def completion_events(self, kind, prompt_tokens, max_tokens):
        if kind == "chat":
            return super().completion_events(kind, prompt_tokens, max_tokens)
        text = "".join(f"w{i} " for i in range(max_tokens))
        return [(0.005, self.text_chunk(kind, "")), (0.002 * max_tokens, self.text_chunk(kind, text, "length"))]

    async def _server_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": "org/plain", "revision": "main", "tp_size": 1})

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": "org/plain", "weight_version": "default", "is_generation": True})

    def routes(self) -> list[web.RouteDef]:
        return [*super().routes(), web.get("/server_info", self._server_info),
                web.get("/model_info", self._model_info)]


@pytest.fixture(scope="module")
def pipeline_run(airflow_db, s3_server, tmp_path_factory):
    snapshot = {**external("snapshot", "", "vllm"),
                "args": ["--speculative-config", SPECULATIVE, "--quantization", "fp8"],
                "env": {"VLLM_USE_DEEP_GEMM": "1", "HF_TOKEN": PLANTED_TOKEN}}
    with ServesSnapshot() as vllm_like, SglangOneEvent() as sglang_like:
        snapshot["endpoint"] = vllm_like.url
        run_dir = run_pipeline({
            "model": {"name": MODEL, "context_limit_tokens": 4096},
            "engines": [snapshot, external("oneevent", sglang_like.url, "sglang")],
            "scenarios": scenarios(
                warmup=False,
                short={"input_tokens": 16, "output_tokens": 16, "concurrency": [2], "rounds": 2,
                       "requests_per_round": 4}),
            "archive": {"bucket": "identity"},
            "request_timeout_s": 30,
        }, s3_server, tmp_path_factory.mktemp("identity-runs"), datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc))
    summary = run_dir.read_json("summary.json")
    assert summary is not None, f"no summary.json; step outcomes in {run_dir.path / 'state' / 'steps'}"
    archived = run_dir.read_json("archive.json")
    s3 = s3_server.client()
    [key] = sorted({k for k in archived["keys"] if k.endswith("/manifest.json")})[:1]
    manifest_bytes = s3.get_object(Bucket=archived["bucket"], Key=key)["Body"].read()
    return summary, (run_dir.path / "report.html").read_text(encoding="utf-8"), manifest_bytes


def test_the_archived_manifest_keeps_engine_switches_and_withholds_the_token(pipeline_run):
    _, _, manifest_bytes = pipeline_run
    manifest = json.loads(manifest_bytes)
    env = {e["name"]: e["env"] for e in manifest["config"]["engines"]}
    assert env["snapshot"] == {"HF_TOKEN": "<redacted>", "VLLM_USE_DEEP_GEMM": "1"}
    assert PLANTED_TOKEN.encode() not in manifest_bytes


def test_the_served_revision_is_recorded_and_a_moving_main_is_flagged(pipeline_run):
    summary, html, manifest_bytes = pipeline_run
    served = json.loads(manifest_bytes)["served_revision"]  # what the nightly's lineage reads
    snap = summary["engines"]["snapshot"]["served_revision"]
    assert snap["configured"] == "main" and snap["moving"] is True
    assert snap["served"] == COMMIT and "snapshot" in snap["served_source"] and snap["reported_revision"] == "main"
    assert snap["identity"] == COMMIT and served["snapshot"]["identity"] == COMMIT
    one = summary["engines"]["oneevent"]["served_revision"]
    assert one["moving"] is True and one["served"] is None and one["identity"] is None
    assert one["reported_revision"] == "main" and served["oneevent"]["served"] is None
    assert f"served {COMMIT}" in html and "moving revision" in html
    limits = " ".join(summary["not_proved"])
    assert f"snapshot: model revision `main` is a moving name; it served {COMMIT}" in limits
    assert "oneevent: model revision `main` is a moving name and the engine did not report the commit" in limits


def test_what_this_run_did_not_prove_comes_from_its_config_and_results(pipeline_run):
    summary, html, _ = pipeline_run
    lines = summary["not_proved"]
    text = " ".join(lines)
    assert f"speculative decoding was on for snapshot ({SPECULATIVE})" in text
    assert "Speculative decoding (MTP, EAGLE, a draft model) was off for oneevent" in text
    assert "snapshot fp8; oneevent as the checkpoint stores them" in text
    assert "single node (snapshot TP1 on 1 GPU(s), oneevent TP1 on 1 GPU(s))" in text
    assert "No GPU product was recorded" in text
    assert "Video input was not tested" in text and "(none here)" in text  # functional checks were off
    assert any(line.startswith("oneevent: its stream timing was never shown reliable") and "one event" in line
               for line in lines)
    assert not any(line.startswith("snapshot: its stream timing") for line in lines)
    assert "Switched off in the config" in text and "long_context" in text and "functional" in text
    assert "Long context was not tested: nothing here shows an engine serving prompts near 4,096 tokens" in text
    assert "Loads above concurrency 2 (the highest measured) were not tested" in text
    assert "What this run did not prove" in html and all(str(escape(line)) in html for line in lines)

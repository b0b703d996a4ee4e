"""Proof that the engines served the same weights (docs/PROTOCOL.md, "Which weights"), against servers written
for the test: a moving revision is resolved to its commit before deploy (a local Hugging Face cache's refs, a
hub's API) and every engine is given it; two vLLM-dialect servers that report different snapshots (their model
list's root, a snapshot directory on this machine with its own tokenizer) are not compared on answers or
log-likelihood, and the summary says why; a declared weights variant is compared and named.

Before: `model.revision: main` went to every engine as `main`, nothing resolved it, and the engines' served
identities were recorded but never held against each other: the worse server's answers and its NLL gap were
findings against it although it served other weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from aiohttp import web
from loglik_server import OffsetsLogprobs, ScoresPrompts
from plain_server import MODEL, PlainServer
from quality_server import CorruptsHalfTheArithmetic

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.evidence.revision import record_served_revision, resolve_revision
from tasks.quality.loglik import run_loglik
from tasks.quality.run import run_quality
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.documents import rendered_objects_doc, set_readiness
from tasks.state.storage import RunDir
from tasks.steps.context import RunContext
from tasks.targets.base import Deployment

COMMIT_A = "a" * 8 + "0123456789abcdef0123456789abcdef"
COMMIT_B = "b" * 8 + "0123456789abcdef0123456789abcdef"
DIGEST = "sha256:" + "1" * 64


def _snapshot(root: Path, commit: str, tokenizer: str, ref: str | None = None) -> Path:
    """models--org--plain/snapshots/<commit>/ with a config and a tokenizer, and refs/<ref> naming it."""
    repo = root / "models--org--plain"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text('{"architectures": ["Plain"]}')
    (snap / "tokenizer.json").write_text(tokenizer)
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit + "\n")
    return snap


class Hub(PlainServer):
    """A hub's revision API: GET /api/models/org/plain/revision/main -> {"sha": ...}."""

    async def _revision(self, request: web.Request) -> web.Response:
        if request.match_info["repo"] != "org/plain" or request.match_info["rev"] != "main":
            raise web.HTTPNotFound()
        return web.json_response({"id": "org/plain", "sha": COMMIT_B})

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/api/models/{repo:.+}/revision/{rev}", self._revision)]


def test_a_moving_revision_is_resolved_from_a_local_cache_or_a_hub_or_said_unresolved(tmp_path):
    _snapshot(tmp_path, COMMIT_A, "{}", ref="main")
    model = parse_run_config({"model": {"name": MODEL, "repo_id": "org/plain",
                                        "revision_source": str(tmp_path)}}).model
    assert resolve_revision(model)["commit"] == COMMIT_A
    with Hub() as hub:
        hubbed = model.model_copy(update={"revision_source": hub.url})
        found = resolve_revision(hubbed)
        assert found["commit"] == COMMIT_B and hub.url in found["source"]
        missing = resolve_revision(hubbed.model_copy(update={"repo_id": "org/other"}))
    assert missing["commit"] is None and "HTTP 404" in missing["why"]
    bare = resolve_revision(model.model_copy(update={"revision_source": None}))
    assert bare["commit"] is None and "`main` is a moving name" in bare["why"]


def test_every_engine_is_pinned_and_deployed_with_the_resolved_commit(tmp_path):
    _snapshot(tmp_path / "hub", COMMIT_A, "{}", ref="main")
    config = parse_run_config({
        "run_id": "resolved", "target": "kubernetes", "dry_run": True,
        "model": {"name": "org/plain", "revision": "main", "revision_source": str(tmp_path / "hub")},
        "engines": [{"name": "sglang", "dialect": "sglang", "image": f"lmsysorg/sglang:v0.5.4@{DIGEST}"},
                    {"name": "vllm", "dialect": "vllm", "image": f"vllm/vllm-openai:v0.11.0@{DIGEST}"}]})
    from tasks.steps.engine_steps import deploy
    from tasks.steps.run_steps import pin

    ctx = RunContext(config, RunDir("resolved", root=tmp_path / "runs"))
    pin(ctx)
    for engine in ("sglang", "vllm"):
        deploy(ctx, engine)
        rendered = list(yaml.safe_load_all(ctx.run_dir.read_bytes(rendered_objects_doc(engine))))
        args = next(o for o in rendered if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
        command = " ".join(args.get("command", []) + args.get("args", []))
        assert f"--revision {COMMIT_A}" in command and "--revision main" not in command
    summary = build_summary(ctx.run_dir, config)
    assert summary.resolved_revision.commit == COMMIT_A
    assert f"= {COMMIT_A}" in render_html(summary)


class ServesSnapshotA(ScoresPrompts):
    snapshot = ""

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model",
                                                              "root": self.snapshot, "max_model_len": 4096}]})


class ServesSnapshotBWorse(CorruptsHalfTheArithmetic, OffsetsLogprobs):
    """Another snapshot, half its arithmetic off by one and its log-probabilities 0.3 nats lower."""

    snapshot = ""

    _models = ServesSnapshotA._models


def _run(tmp_path: Path, name: str, engines: list[dict]) -> tuple:
    """The startup step's served identity, the quality step and the log-likelihood of both servers."""
    config = parse_run_config({
        "run_id": name, "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": engines,
        "scenarios": {"quality": {"enabled": True, "items_per_family": 8, "kv_context_tokens": [64],
                                  "nll_lengths_tokens": [64, 256]},
                      "long_context": {"enabled": False}, "boundary": {"enabled": False}},
        "request_timeout_s": 30})
    run_dir = RunDir(name, root=tmp_path / "runs")
    ctx = RunContext(config, run_dir)
    ServesSnapshotA.snapshot = str(_snapshot(tmp_path / name, COMMIT_A, '{"model": {"vocab": "a"}}'))
    ServesSnapshotBWorse.snapshot = str(_snapshot(tmp_path / name, COMMIT_B, '{"model": {"vocab": "b"}}'))
    with ServesSnapshotA() as a, ServesSnapshotBWorse() as b:
        for spec, server in zip(config.engines, (a, b)):
            Deployment(spec.name, server.url, DIGEST).save(run_dir)
            set_readiness(run_dir, spec.name, True, "serving")
            record_served_revision(ctx, spec.name)
            ectx = EngineContext(config, endpoint_for(config, spec.name, server.url, DIGEST), run_dir)
            run_quality(ectx)
            run_loglik(ectx)
    return build_summary(run_dir, config), config


def test_engines_that_served_different_snapshots_are_not_compared_on_answers_or_loglik(tmp_path):
    summary, _ = _run(tmp_path, "apart", [{"name": "a", "dialect": "vllm"}, {"name": "b", "dialect": "vllm"}])
    a, b = summary.engines["a"].served_revision, summary.engines["b"].served_revision
    assert (a.served, b.served) == (COMMIT_A, COMMIT_B)
    assert a.files_hashed == ["config.json", "tokenizer.json"] and a.files_sha256 != b.files_sha256
    (pair,) = summary.same_weights
    assert pair.verdict == "differ" and COMMIT_A in pair.text and "not compared" in pair.text
    # the worse answers and the NLL gap are the weights', not the engine's: neither is a finding
    assert summary.parity.answers == [] and summary.parity.agreement == [] and summary.parity.nll_findings == []
    assert len(summary.parity.nll) == 4  # each engine's own NLL is still shown
    assert summary.parity.not_compared and "different weights" in summary.parity.not_compared[0]
    assert not [c for c in summary.choices for r in c.reasons if r.criterion == "answers"]
    assert any("not compared on answers or log-likelihood" in line for line in summary.not_proved)
    page = render_html(summary)
    assert "Not compared" in page and "they served different weights" in page


def test_a_declared_weights_variant_is_compared_and_named(tmp_path):
    summary, _ = _run(tmp_path, "variant", [{"name": "a", "dialect": "vllm"},
                                            {"name": "b", "dialect": "vllm", "weights_variant": "int4-awq"}])
    (pair,) = summary.same_weights
    assert pair.verdict == "declared" and "b the int4-awq variant" in pair.text
    assert [p.worse for p in summary.parity.answers if p.worse] == ["b"]  # compared: the variant's difference
    assert {f.engine for f in summary.parity.nll_findings} == {"b"}
    assert json.dumps(summary.model_dump(mode="json")).count("int4-awq") >= 1

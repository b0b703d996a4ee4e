"""Engine dialect facts in the rendered pods, each checked against the engine's own source.

- llama-server refuses to start unless --slot-save-path names an existing directory
  (ggml-org/llama.cpp common/arg.cpp: `throw std::invalid_argument("not a directory: ...")`);
- SGLang's /health runs a 1-token generation by default and answers 503 when no engine output
  comes within its health timeout (python/sglang/srt/entrypoints/http_server.py), so a busy engine
  would be restarted by a liveness probe on it;
- both engines must serve the model's configured context limit (vLLM --max-model-len, SGLang
  --context-length; SGLang otherwise takes config.json's).
"""

from __future__ import annotations

import posixpath

import kubernetes_validate
import pytest

from tasks.config import parse_run_config
from tasks.engines import adapter_for
from tasks.k8s.manifests import engine_argv, render_engine

DIGEST = "sha256:" + "3" * 64
CONTEXT_LIMIT = 600_000  # not the 1M default, so the flag must come from the config


def config_for(dialect: str, **engine):
    return parse_run_config({
        "run_id": "dialects-1",
        "target": "kubernetes",
        "model": {"name": "glm-5.3-flash", "path": "/models/glm", "revision": "abc123",
                  "context_limit_tokens": CONTEXT_LIMIT},
        "engines": [{"name": dialect, "dialect": dialect, "image": f"example.org/{dialect}:day1", "gpus": 1,
                     **engine}],
        "kubernetes": {"namespace": "bench"},
    })


def rendered_container(dialect: str, **engine):
    config = config_for(dialect, **engine)
    deployment, service = render_engine(config, config.engines[0], {"pinned_ref": f"example.org/{dialect}@{DIGEST}"})
    for obj in (deployment, service):
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
    pod = deployment["spec"]["template"]["spec"]
    return pod["containers"][0], {v["name"]: v for v in pod["volumes"]}


def flag_values(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == flag]


def test_llamacpp_slot_save_path_is_a_directory_the_pod_mounts():
    container, volumes = rendered_container("llamacpp", llamacpp={"model": "/models/glm.gguf"})
    paths = flag_values(engine_argv(container), "--slot-save-path")
    assert paths, "slot erase (the cache clear) needs a slot save path"
    mounts = {posixpath.normpath(m["mountPath"]): m for m in container["volumeMounts"]}
    for path in paths:
        # A directory under an emptyDir mount does not exist when the container starts: only the
        # mount point itself is a directory the image is sure to have.
        mount = mounts.get(posixpath.normpath(path))
        assert mount is not None, f"--slot-save-path {path} is not a mount of the container {sorted(mounts)}"
        assert not mount.get("readOnly") and "emptyDir" in volumes[mount["name"]]


@pytest.mark.parametrize("dialect", ["sglang", "vllm", "llamacpp"])
def test_no_generating_endpoint_is_a_liveness_probe(dialect):
    container, _ = rendered_container(dialect, llamacpp={"model": "/models/glm.gguf"} if dialect == "llamacpp" else {})
    env = {e["name"]: e["value"] for e in container["env"]}
    live = container["livenessProbe"]["httpGet"]["path"]
    assert live not in {"/health_generate", "/v1/completions", "/v1/chat/completions", "/generate"}
    if dialect == "sglang":
        # /ping answers from the HTTP server alone on every SGLang version; /health would generate.
        assert live == "/ping"
        assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "0"
        # The startup probe keeps /health: it is the one that answers 503 while the server starts.
        assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/models"


def test_a_configured_env_overrides_the_health_switch():
    container, _ = rendered_container("sglang", env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "1"})
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "1"


@pytest.mark.parametrize(("dialect", "flag"), [("sglang", "--context-length"), ("vllm", "--max-model-len")])
def test_both_engines_serve_the_models_configured_context_limit(dialect, flag):
    container, _ = rendered_container(dialect)
    assert flag_values(engine_argv(container), flag) == [str(CONTEXT_LIMIT)]
    config = config_for(dialect)
    assert flag_values(adapter_for(dialect).launch_command(config.engines[0], config.model, 1), flag) == [str(CONTEXT_LIMIT)]

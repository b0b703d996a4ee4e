"""A baseline must share what changes the engine's figures by design (issue 43, item 13): besides its args, GPUs
and revision, the engine's environment, its llama.cpp settings and where the client runs on Kubernetes
(kubernetes.measure_from). A night whose engine ran with another setting is skipped, saying which, never compared."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tasks.compare.nightly import compare_run
from tasks.compare.sides import engine_lineage, setting_differences
from tasks.config import parse_run_config
from tasks.core.desensitize import desensitize
from tasks.publish.archive import archive_run
from tasks.state.storage import RunDir

ENGINE = "eng"


def _config(bucket: str, run_id: str, engine: dict[str, Any], **extra: Any):  # noqa: ANN202
    return parse_run_config({
        "run_id": run_id, "model": {"name": "plain-model", "context_limit_tokens": 4096},
        "engines": [{"name": ENGINE, "dialect": "vllm", **engine}], "archive": {"bucket": bucket},
        "scenarios": {"short": {"concurrency": [2], "rounds": 3, "requests_per_round": 8},
                      **{s: {"enabled": False} for s in ("functional", "prefill", "decode", "rate", "prefix_cache",
                                                         "long_context", "boundary")}},
        **extra})


def _night(root, cfg, created: float) -> RunDir:  # noqa: ANN001
    """A night whose short rounds all went alike: only the lineage can keep it from being compared."""
    run_dir = RunDir(cfg.run_id, root)
    run_dir.write_json("manifest.json", {"run_id": cfg.run_id, "created_ts": created,
                                         "config": cfg.model_dump(mode="json")})
    run_dir.write_json("validation.json", {"success": True})
    with run_dir.rows("rounds", ENGINE, "short") as out:
        for rnd in (1, 2, 3):
            out.write({"run_id": cfg.run_id, "engine": ENGINE, "scenario": "short", "round": rnd, "concurrency": 2,
                       "first_encounter": False, "warmup": False, "requests_ok": 8, "requests_failed": 0,
                       "error_rate": 0.0, "status": "ok", "output_tps": 100.0 + rnd, "ttft_p95_s": 0.02})
    return run_dir


@pytest.mark.parametrize(("then", "now", "named"), [
    ({"env": {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}}, {"env": {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}}, "env"),
    ({"env": {}}, {"env": {"VLLM_USE_DEEP_GEMM": "1"}}, "env"),
])
def test_a_night_whose_engine_ran_with_another_environment_is_skipped(then, now, named, s3_server, run_root):
    s3, bucket = s3_server.client(), f"lineage-{time.time_ns()}"
    cfg1 = _config(bucket, "night-1", then)
    archive_run(_night(run_root, cfg1, 1000.0), cfg1, s3)
    cfg2 = _config(bucket, "night-2", now)
    night2 = _night(run_root, cfg2, 2000.0)
    result = compare_run(night2, cfg2, s3)
    assert result["engines"][ENGINE]["compared"] == 0, result
    [skipped] = night2.read_json("regressions.json")["skipped"]
    assert "another engine lineage" in skipped and named in skipped, skipped


def _lineage(engine: dict[str, Any], **extra: Any) -> dict[str, Any]:
    cfg = _config("unused", "run", engine, **extra)
    return engine_lineage(desensitize(cfg.model_dump(mode="json")), ENGINE)


def test_llamacpp_settings_and_where_the_client_runs_are_part_of_the_lineage():
    slots = {"launcher": "llamacpp", "dialect": "llamacpp"}
    one, four = _lineage({**slots, "llamacpp": {"parallel": 1}}), _lineage({**slots, "llamacpp": {"parallel": 4}})
    assert "llamacpp" in setting_differences(four, one) and "parallel" in setting_differences(four, one)
    cluster = {"image": "vllm/vllm-openai:v0.11.0"}
    kube = {"target": "kubernetes", "kubernetes": {"namespace": "dayone"}}
    worker = _lineage(cluster, **kube)
    runner = {"image": "registry.example/dayone-runner@sha256:" + "b" * 64, "s3_secret": {"name": "dayone-s3"}}
    pods = _lineage(cluster, **{**kube, "kubernetes": {"namespace": "dayone", "measure_from": "cluster",
                                                       "runner": runner}})
    assert "measure_from" in setting_differences(pods, worker), (pods, worker)
    # an archive written before these were recorded reads as the defaults: no night is skipped for it alone
    recorded = desensitize(_config("unused", "run", cluster, **kube).model_dump(mode="json"))
    for spec in recorded["engines"]:
        spec.pop("env"), spec.pop("llamacpp")
    recorded["kubernetes"].pop("measure_from")
    assert setting_differences(worker, engine_lineage(recorded, ENGINE)) == ""

"""Helpers of the product tests: small configs and table rows."""

from __future__ import annotations

from typing import Any


def small_config(bucket: str, engines: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """One quick short-scenario sweep on the simulator: seconds per engine."""
    return {
        "model": {"name": "dayone-sim-model", "context_limit_tokens": 32768},
        "engines": engines or [{"name": "sim-a", "dialect": "sglang", "launcher": "sim"}],
        "scenarios": {
            "warmup": False,
            "functional": {"enabled": False},
            "short": {"concurrency": [2], "rounds": 2, "requests_per_round": 8},
            "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
            "long_context": {"enabled": False}, "boundary": {"enabled": False}, "prefix_cache": {"enabled": False},
        },
        "archive": {"bucket": bucket},
        "request_timeout_s": 30,
        **extra,
    }


def round_row(run_id: str, engine: str, concurrency: int, rnd: int, output_tps: float, ttft_p95_s: float,
              scenario: str = "short", digest: str = "sha256:" + "a" * 64) -> dict[str, Any]:
    """A steady round (as after warmup: no measured round is a first encounter, so every one is compared)."""
    return {"run_id": run_id, "engine": engine, "image_digest": digest, "scenario": scenario, "round": rnd,
            "concurrency": concurrency, "first_encounter": False, "warmup": False, "requests_ok": 8,
            "requests_failed": 0, "error_rate": 0.0, "status": "ok", "output_tps": output_tps,
            "ttft_p95_s": ttft_p95_s, "ttft_p50_s": ttft_p95_s / 2, "ttft_p99_s": ttft_p95_s * 1.1}


def check_row(run_id: str, engine: str, check: str, outcome: str) -> dict[str, Any]:
    return {"run_id": run_id, "engine": engine, "image_digest": "sha256:" + "a" * 64, "scenario": "functional",
            "round": 0, "check": check, "outcome": outcome, "evidence": {"status": 200}}


def needle_row(run_id: str, engine: str, length: int, depth: float, passed: bool) -> dict[str, Any]:
    return {"run_id": run_id, "engine": engine, "image_digest": "sha256:" + "a" * 64, "scenario": "long_context",
            "round": 0, "target_tokens": length, "depth": depth, "attempt": 1, "expected": "x", "answer": "x",
            "passed": passed, "status": "ok"}

"""`dayone check`, `dayone longctx` and `dayone cache` against a running simulator."""

from __future__ import annotations

import json

import pandas as pd

from tasks.checks import CHECK_NAMES
from tasks.cli import main
from tasks.sim.process import start_sim


def test_check_longctx_and_cache_commands_write_their_tables(tmp_path, capsys):
    with start_sim("sglang", {"context_limit": 4096, "reasoning": True, "prefill_tokens_per_s": 10_000}) as sim:
        common = ["--endpoint", sim.url, "--dialect", "sglang", "--model", "dayone-sim-model", "--context-limit", "4096"]
        assert main(["check", *common, "--out", str(tmp_path / "check")]) == 0
        checks = pd.read_csv(tmp_path / "check" / "checks.csv")
        assert set(checks["outcome"]) == {"pass"} and len(checks) == len(CHECK_NAMES)
        assert json.loads((tmp_path / "check" / "ttft_reliability.json").read_text())["reliable"] is True

        code = main(["longctx", *common, "--lengths", "800", "--depths", "0.5", "--no-model-limit",
                     "--boundary", "3000", "--settle-s", "0.1", "--out", str(tmp_path / "longctx")])
        assert code == 0
        needles = pd.read_parquet(tmp_path / "longctx" / "needles.parquet")
        assert sorted(needles["target_tokens"]) == [800, 800, 3000] and needles["passed"].all()
        checks = pd.read_csv(tmp_path / "longctx" / "checks.csv")
        assert sorted(zip(checks["check"], checks["scenario"], checks["outcome"])) == [
            ("boundary_restarts", "boundary", "pass"), ("engine_restarts", "boundary", "pass"),
            ("engine_restarts", "long_context", "pass")]

        assert main(["cache", *common, "--prompt-tokens", "1500", "--repeats", "3",
                     "--out", str(tmp_path / "cache")]) == 0
        verdict = json.loads((tmp_path / "cache" / "prefix_cache.json").read_text())
        assert verdict["verdict"] == "effective"
        assert len(pd.read_csv(tmp_path / "cache" / "cache_trials.csv")) == 4
        assert len(pd.read_csv(tmp_path / "cache" / "server_metrics.csv")) > 0
    out = capsys.readouterr().out
    assert "TTFT reliable" in out and "prefix cache: effective" in out


def test_check_exits_non_zero_on_a_failed_check(tmp_path, capsys):
    with start_sim("vllm", {"quirks": {"echo_ignored": True}}) as sim:
        code = main(["check", "--endpoint", sim.url, "--dialect", "vllm", "--model", "dayone-sim-model",
                     "--skip", "openai_sdk,image_input", "--out", str(tmp_path)])
    assert code == 1
    out = capsys.readouterr().out
    assert "completions_echo_false" in out and "UNRELIABLE" in out


def test_bad_lengths_are_a_config_error_naming_the_field(tmp_path, capsys):
    code = main(["longctx", "--endpoint", "http://127.0.0.1:9", "--dialect", "sglang", "--model", "m",
                 "--context-limit", "4096", "--lengths", "8000", "--out", str(tmp_path)])
    assert code == 2
    assert "scenarios.long_context.lengths[0]" in capsys.readouterr().err

"""KV capacity from the real llama.cpp server's startup log (PyPI xllamacpp, SmolLM2-135M, launched by
DayOne's local target at log verbosity 4), through the startup step's recorder into the report."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "realengine"))

from llamacpp_helpers import llamacpp_config, running_engine  # noqa: E402
from tasks.evidence.startup_facts import record_startup_facts  # noqa: E402
from tasks.report.html import render_html  # noqa: E402
from tasks.report.summary import build_summary  # noqa: E402


@pytest.mark.parametrize("kv_unified,kv_tokens,concurrency", [(True, 2048, 1.0), (False, 2048, 2.0)])
def test_llamacpp_kv_size_reaches_the_report(tmp_path, kv_unified, kv_tokens, concurrency):
    # Two slots over a 2,048-token context: one stream of 2,048 cells shared (unified), or 1,024 per slot.
    config = llamacpp_config({"model": "smollm2", "ctx_size": 2048, "parallel": 2, "kv_unified": kv_unified},
                             context_limit=1024)
    with running_engine(tmp_path, config) as engine:
        log = engine.target.startup_log(engine.deployment)
        run_ctx = SimpleNamespace(engine=lambda name: engine.ctx(), run_dir=engine.run_dir, config=config,
                                  target=engine.target, deployment=lambda name: engine.deployment)
        facts = record_startup_facts(run_ctx, "llamacpp", log)
    assert (facts["kv_tokens"], facts["fits_context"]) == (kv_tokens, True)
    [machine] = engine.run_dir.read_rows("hardware", "llamacpp")  # where it ran: this machine
    assert machine["cpu_cores"] >= 1 and machine["gpu_count"] is not None
    [row] = engine.run_dir.read_rows("kv_capacity", "llamacpp")
    assert row["engine_context_tokens"] == 2048 // (1 if kv_unified else 2)
    assert row["max_concurrency"] == concurrency and row["max_concurrency_source"] == "KV tokens / context"
    assert 0.05 < row["weights_gib"] < 0.12  # the 92 MiB GGUF, as llama.cpp's buffer line says
    assert row["kv_cache_gib"] == pytest.approx(45 / 1024)  # 30 layers x 2,048 cells, f16 K and V
    kv = build_summary(engine.run_dir, config).engines["llamacpp"].kv_capacity
    assert kv.kv_tokens == kv_tokens and kv.peaks == []  # llama.cpp's /metrics has no KV usage gauge
    page = render_html(build_summary(engine.run_dir, config), charts={})
    assert "2,048 tokens" in page and "<span class='badge pass'>fits</span>" in page

"""Memory and KV capacity from each engine's own startup log: the adapters read the lines vLLM, SGLang
and llama.cpp print today (format strings checked in their current source), the simulator prints them
from its profile and the startup step records them, and the report says whether one request at the
configured context limit fits, beside the peak KV usage per scenario."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine_rounds_helpers import context
from tasks.config import parse_run_config
from tasks.engines import adapter_for
from tasks.telemetry.hardware import empty_record
from tasks.evidence.kv_capacity import fits_context, kv_capacity_row
from tasks.evidence.startup_facts import record_startup_facts
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.storage import RunDir
from tasks.state.tables import to_frame

NO_LONG_CONTEXT = {"long_context": {"enabled": False}, "boundary": {"enabled": False}}
# vLLM 0.11+ under tensor parallelism: every rank logs its own copy, prefixed with its process.
VLLM_LOG = """\
(Worker_TP0 pid=211) INFO 11-30 08:01:12 [gpu_model_runner.py:2653] Model loading took 15.2344 GiB memory and 21.402 seconds
(Worker_TP1 pid=212) INFO 11-30 08:01:12 [gpu_model_runner.py:2653] Model loading took 15.2344 GiB memory and 21.611 seconds
(Worker_TP0 pid=211) INFO 11-30 08:01:40 [gpu_worker.py:298] Available KV cache memory: 52.17 GiB
(EngineCore_DP0 pid=190) INFO 11-30 08:01:41 [kv_cache_utils.py:1087] GPU KV cache size: 1,709,664 tokens
(EngineCore_DP0 pid=190) INFO 11-30 08:01:41 [kv_cache_utils.py:1091] Maximum concurrency for 131,072 tokens per request: 13.04x
"""
SGLANG_MHA_LOG = """\
[2026-11-30 08:02:01 TP0] Load weight end. elapsed=33.41 s, type=Qwen3ForCausalLM, avail mem=62.97 GB, mem usage=15.27 GB.
[2026-11-30 08:02:02 TP0] KV Cache is allocated. #tokens: 417262, K size: 23.87 GB, V size: 23.87 GB
[2026-11-30 08:02:09 TP0] max_total_num_tokens=417262, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=40960, available_gpu_mem=11.19 GB
"""
SGLANG_MLA_LOG = """\
[2026-11-30 08:03:00 DP0 TP0 EP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=75.11 GB, mem usage=107.07 GB.
[2026-11-30 08:03:01 DP0 TP0 EP0] KV Cache is allocated. #tokens: 524288, KV size: 17.16 GB
"""
# xllamacpp 2026.10.11549 at verbosity 4, SmolLM2-135M, --ctx-size 2048 --parallel 2 (recorded here).
LLAMACPP_UNIFIED_LOG = """\
0.00.541.670 I load_tensors:   CPU_Mapped model buffer size =    92.10 MiB
0.00.544.329 I llama_context: n_ctx                 = 2048
0.00.544.341 I llama_context: n_ctx_seq             = 2048
0.00.649.065 I llama_kv_cache: size =   45.00 MiB (  2048 cells,  30 layers,  2/1 seqs), K (f16):   22.50 MiB, V (f16):   22.50 MiB
"""
LLAMACPP_PER_SLOT_LOG = """\
0.00.530.708 I llama_context: n_ctx                 = 2048
0.00.530.720 I llama_context: n_ctx_seq             = 1024
0.00.558.064 I llama_kv_cache: size =   45.00 MiB (  1024 cells,  30 layers,  2/2 seqs), K (f16):   22.50 MiB, V (f16):   22.50 MiB
"""


def test_vllm_states_its_kv_tokens_and_concurrency_itself():
    m = adapter_for("vllm").startup_memory(VLLM_LOG)
    assert (m.kv_tokens, m.context_tokens, m.max_concurrency) == (1_709_664, 131_072, 13.04)
    assert m.max_concurrency_logged
    assert (m.weights_gib, m.kv_cache_gib) == (15.2344, 52.17)  # the first rank's line
    assert len(m.lines) == 4


def test_sglang_token_pool_over_its_context_length_is_the_concurrency():
    m = adapter_for("sglang").startup_memory(SGLANG_MHA_LOG)
    assert (m.kv_tokens, m.context_tokens, m.weights_gib) == (417_262, 40_960, 15.27)
    assert m.kv_cache_gib == pytest.approx(47.74)  # K + V pools
    assert m.max_concurrency == pytest.approx(417_262 / 40_960) and not m.max_concurrency_logged
    mla = adapter_for("sglang").startup_memory(SGLANG_MLA_LOG)
    assert (mla.kv_tokens, mla.kv_cache_gib, mla.weights_gib) == (524_288, 17.16, 107.07)
    assert mla.context_tokens is None
    assert mla.max_concurrency is None  # no context length in the log: no ratio, not a guess


def test_llamacpp_cells_times_streams_are_its_kv_tokens():
    adapter = adapter_for("llamacpp")
    unified = adapter.startup_memory(LLAMACPP_UNIFIED_LOG)
    assert (unified.kv_tokens, unified.context_tokens, unified.max_concurrency) == (2048, 2048, 1.0)
    assert unified.weights_gib == pytest.approx(92.10 / 1024) and unified.kv_cache_gib == pytest.approx(45 / 1024)
    per_slot = adapter.startup_memory(LLAMACPP_PER_SLOT_LOG)  # one stream of 1,024 cells per slot
    assert (per_slot.kv_tokens, per_slot.context_tokens, per_slot.max_concurrency) == (2048, 1024, 2.0)


def test_a_request_at_the_limit_fits_only_when_the_kv_cache_and_the_engine_context_hold_it():
    m = adapter_for("vllm").startup_memory(VLLM_LOG)
    assert fits_context(m, 131_072)[0] is True
    fits, why = fits_context(m, 2_000_000)
    assert fits is False and "1,709,664" in why and "2,000,000" in why
    fits, why = fits_context(m, 200_000)  # the KV cache holds it, the engine's context does not
    assert fits is False and "131,072" in why
    assert fits_context(adapter_for("openai").startup_memory(VLLM_LOG), 1024)[0] is None


@pytest.mark.parametrize("dialect,concurrency_source", [("vllm", "engine log"), ("sglang", "KV tokens / context")])
def test_the_simulator_prints_its_profiles_kv_pool_and_the_step_records_it(sims, tmp_path, dialect,
                                                                          concurrency_source):
    sim = sims(dialect, {"cache_capacity_tokens": 50_000, "context_limit": 16_384})
    ctx = context(sim.url, dialect, tmp_path)
    run_ctx = SimpleNamespace(engine=lambda name: ctx, run_dir=ctx.run_dir, deployment=lambda name: None,
                              target=SimpleNamespace(hardware=lambda config, deployment: empty_record()),
                              config=parse_run_config({"engines": [{"name": "eng", "dialect": dialect}],
                                                       "model": {"context_limit_tokens": 16_384},
                                                       "scenarios": NO_LONG_CONTEXT}))
    facts = record_startup_facts(run_ctx, "eng", sim.log())
    assert (facts["kv_tokens"], facts["fits_context"]) == (50_000, True)
    [row] = ctx.run_dir.read_rows("kv_capacity", "eng")
    assert row["engine_context_tokens"] == 16_384 and row["max_concurrency_source"] == concurrency_source
    assert row["max_concurrency"] == pytest.approx(50_000 / 16_384, abs=0.005)
    assert row["kv_cache_gib"] == pytest.approx(50_000 * 131_072 / 2**30, abs=0.01)
    assert row["weights_gib"] > 0 and row["not_logged"] is None
    assert list(to_frame("kv_capacity", [row]).columns)[-1] == "log_lines"


def test_the_report_states_kv_tokens_the_fit_and_peak_usage_per_scenario(tmp_path):
    cfg = parse_run_config({"run_id": "kv", "engines": [{"name": "eng", "dialect": "vllm"}],
                            "model": {"context_limit_tokens": 262_144}, "scenarios": NO_LONG_CONTEXT})
    run_dir = RunDir("kv", root=tmp_path)
    keys = {"run_id": "kv", "engine": "eng", "image_digest": None}
    row = kv_capacity_row({**keys, "scenario": "startup", "round": 0}, adapter_for("vllm"), VLLM_LOG, 262_144)
    with run_dir.rows("kv_capacity", "eng", "startup") as out:
        out.write(row)
    with run_dir.rows("engine_rounds", "eng", "short") as out:
        for scenario, rnd, peak in (("short", 1, 0.25), ("short", 2, 0.5), ("prefill", 1, 0.75)):
            out.write({**keys, "scenario": scenario, "round": rnd, "concurrency": 4, "kv_usage_peak": peak})
    kv = build_summary(run_dir, cfg).engines["eng"].kv_capacity
    assert kv.fits_context is False and kv.kv_tokens == 1_709_664
    assert [(p.scenario, p.usage, p.tokens) for p in kv.peaks] == [("prefill", 0.75, 0.75 * 1_709_664),
                                                                  ("short", 0.5, 0.5 * 1_709_664)]
    page = render_html(build_summary(run_dir, cfg), charts={})
    assert "1,709,664 tokens" in page and "13.04× at 131,072 tokens" in page
    assert "<span class='badge fail'>does not fit</span>" in page and "262,144" in page
    assert "short 50.0%" in page and "prefill 75.0%" in page


# Weights memory in every wording vLLM has logged it (vllm/worker/model_runner.py and
# vllm/v1/worker/gpu_model_runner.py over its history): "GB" there is 2**30 bytes, as "GiB" is.
VLLM_WEIGHTS_WORDINGS = (
    ("INFO 06-02 10:11:12 model_runner.py:1008] Loading model weights took 14.9595 GB", 14.9595),
    ("INFO 03-11 09:00:01 [gpu_model_runner.py:1176] Model loading took 15.2344 GiB and 21.402351 seconds", 15.2344),
    ("(Worker_TP0 pid=211) INFO 11-30 08:01:12 [gpu_model_runner.py:2653] Model loading took 15.2344 GiB memory "
     "and 21.402 seconds", 15.2344),
)


@pytest.mark.parametrize("line,gib", VLLM_WEIGHTS_WORDINGS)
def test_vllm_weights_memory_is_read_in_every_wording_and_published(tmp_path, line, gib):
    log = line + "\n" + VLLM_LOG.split("\n", 2)[2]  # the KV lines of today, the weights line of that version
    assert adapter_for("vllm").startup_memory(log).weights_gib == gib
    cfg = parse_run_config({"run_id": "w", "engines": [{"name": "eng", "dialect": "vllm"}],
                            "model": {"context_limit_tokens": 131_072}, "scenarios": NO_LONG_CONTEXT})
    run_dir = RunDir("w", root=tmp_path)
    keys = {"run_id": "w", "engine": "eng", "image_digest": None, "scenario": "startup", "round": 0}
    with run_dir.rows("kv_capacity", "eng", "startup") as out:
        out.write(kv_capacity_row(keys, adapter_for("vllm"), log, 131_072))
    summary = build_summary(run_dir, cfg)
    assert summary.engines["eng"].kv_capacity.weights_gib == gib
    assert f"{gib:,.1f} GiB" in render_html(summary, charts={})  # the report's table cell

"""Memory per card: the DCGM exporter's used and total per GPU after readiness and after each load step,
headroom, and "other" = used - (the startup log's weights + KV per card), on the simulator with its
DCGM exporter on; the report's "Memory per card" section shows them. Without DCGM, the readings nvidia-smi
printed in the engine pod's log (tests/k8s/test_k8s_memory_per_card.py runs the pod); SGLang's state pool
from its startup log's own line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine_rounds_helpers import one_round
from test_telemetry_sim import SHAPE, context, gpus
from tasks.config import parse_run_config
from tasks.evidence.startup_facts import record_startup_facts
from tasks.report import write_report
from tasks.telemetry import gpu as telemetry
from tasks.telemetry.hardware import empty_record

KV_TOKENS = 65_536  # x 131,072 bytes per token (the simulated model): the log's KV pool is 8.00 GiB
LOG_WEIGHTS_MIB = 61.20 * 1024  # the simulated vLLM's "Model loading took 61.20 GiB"
LOG_KV_MIB = 8.0 * 1024
OTHER_MIB = 3000.0  # what the profile's cards hold beyond the log's weights and KV (graphs, activations, ...)
IDLE_USED_MIB = LOG_WEIGHTS_MIB + LOG_KV_MIB + OTHER_MIB  # the profile's weights_mib: used with no KV in use
KV_GROWTH_MIB = 4000.0  # the profile's kv_cache_mib: used grows by it x KV usage
TOTAL_MIB = 81_559.0


def test_the_report_shows_each_cards_used_total_headroom_and_other_after_readiness_and_load(sims, tmp_path):
    sim = sims("vllm", {"slots": 8, "itl_s": 0.01, "cache_capacity_tokens": KV_TOKENS,
                        "gpus": gpus(weights_mib=IDLE_USED_MIB, kv_cache_mib=KV_GROWTH_MIB, memory_total_mib=TOTAL_MIB)})
    ctx = context(sim.url, tmp_path)
    run_ctx = SimpleNamespace(engine=lambda name: ctx, run_dir=ctx.run_dir, deployment=lambda name: None,
                              target=SimpleNamespace(hardware=lambda config, deployment: empty_record()),
                              config=parse_run_config({"engines": [{"name": "eng", "dialect": "vllm"}]}))
    record_startup_facts(run_ctx, "eng", sim.log())
    one_round(ctx, SHAPE, 12, round_=1)
    built = write_report(ctx.run_dir, ctx.config)

    memory = built["summary"].engines["eng"].memory_per_card
    assert memory is not None and memory.version == 1
    assert memory.weights_per_card_mib == pytest.approx(LOG_WEIGHTS_MIB)
    assert memory.kv_cache_per_card_mib == pytest.approx(LOG_KV_MIB)
    assert "rank" in memory.share_basis  # vLLM logs each worker's own share
    assert [p.when for p in memory.points] == ["after readiness", "after short"]
    ready, loaded = memory.points
    assert len(ready.cards) == 2 and all(c.uuid.startswith("GPU-") for c in ready.cards)
    for card in ready.cards:  # no KV in use yet: the numbers the profile implies, exactly
        assert card.used_mib == pytest.approx(IDLE_USED_MIB)
        assert card.total_mib == pytest.approx(TOTAL_MIB)  # FB_FREE + FB_USED
        assert card.headroom_mib == pytest.approx(TOTAL_MIB - IDLE_USED_MIB)
        assert card.other_mib == pytest.approx(OTHER_MIB)
    for card in loaded.cards:  # after the round: what KV was still in use when the exporter last refreshed
        assert IDLE_USED_MIB <= card.used_mib <= IDLE_USED_MIB + KV_GROWTH_MIB
        assert card.total_mib == pytest.approx(TOTAL_MIB)
        assert card.other_mib == pytest.approx(card.used_mib - LOG_WEIGHTS_MIB - LOG_KV_MIB)

    page = built["page"]
    assert "<h2 id='memory-per-card'>Memory per card</h2>" in page
    section = page[page.index("id='memory-per-card'"):]
    for figure in (IDLE_USED_MIB, TOTAL_MIB, TOTAL_MIB - IDLE_USED_MIB, OTHER_MIB):
        assert f"{figure:.0f} MiB" in section, figure
    assert f"{LOG_WEIGHTS_MIB:.0f} + {LOG_KV_MIB:.0f} MiB" in section
    assert "after readiness" in section and "after short" in section
    assert ready.cards[0].uuid in section


EXPOSITION = """\
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 70000
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a"} 9000
DCGM_FI_DEV_FB_TOTAL{gpu="0",UUID="GPU-a"} 81559
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b"} 60000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-b"} 20000
DCGM_FI_DEV_FB_USED{gpu="2",UUID="GPU-c"} 50000
"""


def test_a_cards_total_is_fb_total_where_exposed_else_free_plus_used_else_unknown():
    cards = telemetry.parse_reading(EXPOSITION).cards_memory()
    # FB_TOTAL counts the driver's reserved memory that FREE + USED leave out: it wins where exposed.
    assert cards == {"GPU-a": [70000.0, 81559.0], "GPU-b": [60000.0, 80000.0], "GPU-c": [50000.0, None]}


def test_other_is_unknown_where_the_log_did_not_state_weights_or_kv():
    row = {"scenario": "short", "started_ts": 1.0, "ended_ts": 2.0, "warmup": False,
           "memory_cards": {"before": {"GPU-a": [70000.0, 81559.0]}, "after": {"GPU-a": [71000.0, None]}}}
    points = telemetry.memory_per_card([row], None, 8192.0)
    assert [p["when"] for p in points] == ["after readiness", "after short"]
    assert points[0]["cards"][0] == {"uuid": "GPU-a", "used_mib": 70000.0, "total_mib": 81559.0,
                                     "headroom_mib": 11559.0, "other_mib": None}
    assert points[1]["cards"][0]["headroom_mib"] is None
    assert telemetry.memory_per_card([row], 60000.0, 8192.0, 1000.0)[0]["cards"][0]["other_mib"] == 808.0


def _engine(used: float, total: float):  # noqa: ANN202
    from tasks.report.schema.telemetry import CardMemory, MemoryPerCard, MemoryPoint

    cards = [CardMemory(uuid=f"GPU-{i}", used_mib=used + i, total_mib=total, headroom_mib=total - used - i,
                        other_mib=None) for i in range(2)]
    return SimpleNamespace(memory_per_card=MemoryPerCard(
        tensor_parallel=2, share_basis="test", weights_per_card_mib=None, kv_cache_per_card_mib=None,
        points=[MemoryPoint(when="after readiness", cards=cards)]))


def test_speculative_off_against_on_compares_the_most_used_per_card_and_the_least_headroom():
    from tasks.report.html import _environment

    engines = {"vllm": _engine(70_000.0, 81_559.0), "vllm-mtp": _engine(72_500.0, 81_559.0)}
    pair = SimpleNamespace(off="vllm", on="vllm-mtp")
    page = _environment().get_template("memory_per_card.html").render(
        s=SimpleNamespace(speculative=SimpleNamespace(pairs=[pair])), engines=engines)
    section = page[page.index("id='memory-speculative'"):]
    # the most used card: 70,001 off, 72,501 on; the least headroom: 11,558 off, 9,058 on
    assert ("<td class='num'>70001 MiB</td><td class='num'>72501 MiB</td>\n<td class='num'>+2500 MiB</td>\n"
            "<td class='num'>11558 MiB</td>\n<td class='num'>9058 MiB</td>") in section
    alone = _environment().get_template("memory_per_card.html").render(s=SimpleNamespace(speculative=None),
                                                                      engines=engines)
    assert "memory-speculative" not in alone and "Memory per card" in alone


# ---- the state pool from SGLang's startup log, and readings from nvidia-smi in the engine's pod ------------------

# SGLang's MambaPool lines (python/sglang/srt/mem_cache/memory_pool.py), as a hybrid model's rank logs them: sizes in
# its GB (2**30 bytes); with speculative decoding the draft tokens' intermediate states follow on the same line.
MAMBA_LINE = ("[2026-09-09 11:57:18 TP0] Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: "
              "0.09GB, ssm_state size: 6.46GB ")
MAMBA_SPEC_LINE = ("[2026-09-09 11:57:18 TP0] Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: "
                   "0.09GB, ssm_state size: 6.46GB intermediate_ssm_state_cache size: 1.62GB "
                   "intermediate_conv_window_cache size: 0.05GB ")
SGLANG_LOG = "\n".join([
    "[2026-09-09 11:57:10 TP0] Load weight end. type=Qwen3NextForCausalLM, dtype=torch.bfloat16, avail mem=61.20 GB, "
    "mem usage=38.55 GB.",
    MAMBA_LINE,
    "[2026-09-09 11:57:18 TP0] KV Cache is allocated. #tokens: 2618868, K size: 9.99 GB, V size: 9.99 GB",
    "[2026-09-09 11:57:27 TP0] max_total_num_tokens=2618868, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=48, context_len=262144, available_gpu_mem=13.38 GB",
])


def test_sglang_states_a_hybrid_models_state_pool_apart_from_its_kv():
    from tasks.engines import adapter_for

    memory = adapter_for("sglang").startup_memory(SGLANG_LOG)
    assert memory.state_pool_gib == pytest.approx(0.09 + 6.46)
    assert (memory.weights_gib, memory.kv_cache_gib) == (38.55, pytest.approx(19.98))
    assert any(line.startswith("Mamba Cache is allocated.") for line in memory.lines)
    spec = adapter_for("sglang").startup_memory(MAMBA_SPEC_LINE)
    assert spec.state_pool_gib == pytest.approx(0.09 + 6.46 + 1.62 + 0.05)
    # a model with no recurrent state logs no such line: no pool, never a zero
    assert adapter_for("sglang").startup_memory(SGLANG_LOG.replace(MAMBA_LINE, "")).state_pool_gib is None
    assert adapter_for("vllm").startup_memory(MAMBA_LINE).state_pool_gib is None  # vLLM counts it in its KV cache


def _pod_log(start: float, used: list[float], period_s: float = 5.0) -> str:
    """The memory loop's lines: one reading per period from `start`, both cards at used[i]."""
    from tasks.telemetry.hardware import GPU_MEMORY_MARKER

    lines = ["dayone-gpu: visible="]
    for i, mib in enumerate(used):
        for card in (0, 1):
            lines.append(f"{GPU_MEMORY_MARKER} {start + i * period_s:.9f} {card}, GPU-{card}aaa-bb, {mib:.0f}, 81559")
    return "\n".join(lines) + "\n"


def _requests(scenario: str, start: float, end: float) -> list[dict]:
    return [{"run_id": "r", "engine": "sg", "scenario": scenario, "round": 1, "concurrency": 2, "launch": 0,
             "request_id": f"{scenario}-{i}", "first_encounter": False, "send_ts": sent, "e2e_s": end - sent,
             "status": "ok"} for i, sent in enumerate((start, start + 0.5))]


def test_memory_from_the_pods_log_sets_the_state_pool_apart_and_leaves_a_point_without_a_near_reading_out(tmp_path):
    from tasks.evidence.kv_capacity import kv_capacity_row
    from tasks.engines import adapter_for
    from tasks.report.summary import _memory_per_card
    from tasks.state.documents import kept_log_doc
    from tasks.state.storage import RunDir

    cfg = parse_run_config({"engines": [{"name": "sg", "dialect": "sglang", "gpus": 2}]})
    run_dir = RunDir("r", root=tmp_path)
    keys = {"run_id": "r", "engine": "sg", "image_digest": None, "scenario": "startup", "round": 0}
    with run_dir.rows("kv_capacity", "sg", "startup") as out:
        out.write(kv_capacity_row(keys, adapter_for("sglang"), SGLANG_LOG, 32768))
    t0 = 1_800_000_000.0
    # readings every 5 s from t0: short ran 12-20 s after, long_context 100-130 s after (no reading near its end)
    run_dir.write_bytes(kept_log_doc("sg"), _pod_log(t0, [70000.0, 70000.0, 70000.0, 71000.0, 71500.0,
                                                          72000.0]).encode())
    with run_dir.rows("requests", "sg", "short") as out:
        for r in _requests("short", t0 + 12.0, t0 + 19.0):
            out.write(r)
    with run_dir.rows("requests", "sg", "long_context") as out:
        for r in _requests("long_context", t0 + 100.0, t0 + 130.0):
            out.write(r)

    memory = _memory_per_card(run_dir, "sg", cfg.engine("sg"))
    assert memory is not None and memory.source.startswith("nvidia-smi in the engine's pod, every 5 s")
    assert memory.state_pool_per_card_mib == pytest.approx((0.09 + 6.46) * 1024)
    # after readiness: the reading at t0 + 10 (before short's first send); after short: the one at t0 + 20
    assert [(p.when, [c.used_mib for c in p.cards]) for p in memory.points] == [
        ("after readiness", [70000.0, 70000.0]), ("after short", [71500.0, 71500.0])]  # long_context: none near
    other = 71500.0 - (38.55 + 19.98 + 0.09 + 6.46) * 1024  # used - (weights + KV + state pool), one rank's own
    assert memory.points[1].cards[0].other_mib == pytest.approx(other)
    assert memory.points[1].cards[0].headroom_mib == 81559.0 - 71500.0


def test_a_pod_that_could_not_read_its_memory_or_whose_clock_is_off_says_so_instead_of_a_figure(tmp_path):
    from tasks.report.html import _environment
    from tasks.report.summary import _memory_per_card
    from tasks.state.documents import kept_log_doc
    from tasks.state.storage import RunDir
    from tasks.telemetry.hardware import GPU_MEMORY_MARKER

    cfg = parse_run_config({"engines": [{"name": "sg", "dialect": "sglang", "gpus": 2}]})
    t0 = 1_800_000_000.0
    no_smi, skewed = RunDir("a", root=tmp_path), RunDir("b", root=tmp_path)
    no_smi.write_bytes(kept_log_doc("sg"), f"{GPU_MEMORY_MARKER} no nvidia-smi in the container: memory per card "
                                           "is not read\nINFO engine up\n".encode())
    skewed.write_bytes(kept_log_doc("sg"), _pod_log(t0 + 3600.0, [70000.0] * 4).encode())  # an hour ahead
    for run_dir in (no_smi, skewed):
        with run_dir.rows("requests", "sg", "short") as out:
            for r in _requests("short", t0 + 12.0, t0 + 19.0):
                out.write(r)

    missing = _memory_per_card(no_smi, "sg", cfg.engine("sg"))
    assert missing.points == [] and missing.not_read == "no nvidia-smi in the container: memory per card is not read"
    off = _memory_per_card(skewed, "sg", cfg.engine("sg"))
    assert off.points == [] and off.not_read.startswith("none of the pod's 4 readings fell within two of its periods")
    assert off.source == "nvidia-smi in the engine's pod, every 5 s (its log's readings nearest each round)"
    page = _environment().get_template("memory_per_card.html").render(
        s=SimpleNamespace(speculative=None), engines={"sg": SimpleNamespace(memory_per_card=missing)})
    assert "<b>no figure: no nvidia-smi in the container: memory per card is not read</b>" in page
    # no memory loop in the log at all (a local engine): no section, as before
    assert _memory_per_card(RunDir("c", root=tmp_path), "sg", cfg.engine("sg")) is None

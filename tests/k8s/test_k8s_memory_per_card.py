"""Memory per card on a simulated cluster (issue 44, item 4): the engine's pod runs its rendered wrapper around
DayOne's simulator (fake_deployments.simulated_engine), whose loop prints nvidia-smi's used and total memory per
card into the container log every kubernetes.gpu_memory_interval_s; the pipeline's steps, through the production
KubernetesTarget, keep that log at teardown, and the report reads memory per card after readiness and after the
load step from it, with DCGM telemetry off and no exec into the pod."""

from __future__ import annotations

import pytest
from fake_deployments import DeploymentKubelet, simulated_engine
from k8s_helpers import CONN_ID, DIGESTS, MODEL

from dayone_airflow.connections import hook_api_client
from tasks.report import write_report
from tasks.state.documents import kept_log_doc
from tasks.steps.context import RunContext
from tasks.steps.execution import execute
from tasks.targets.kubernetes import ClusterAccess
from tasks.telemetry.hardware import GPU_MEMORY_MARKER

NS = "bench"
INTERVAL_S = 0.5  # the memory loop's period (5 s by default)
KV_TOKENS = 65_536  # x 131,072 bytes per token (the simulated model): the vLLM log's KV pool is 8.00 GiB
LOG_WEIGHTS_MIB = 61.20 * 1024  # the simulated vLLM's "Model loading took 61.20 GiB"
LOG_KV_MIB = 8.0 * 1024
OTHER_MIB = 3000.0  # what each simulated card holds beyond the log's weights and KV
IDLE_USED_MIB = LOG_WEIGHTS_MIB + LOG_KV_MIB + OTHER_MIB  # the profile's weights_mib: used with no KV in use
KV_GROWTH_MIB = 4000.0
TOTAL_MIB = 81_559.0
PROFILE = {"model": MODEL, "slots": 8, "itl_s": 0.01, "cache_capacity_tokens": KV_TOKENS,
           "gpus": {"count": 2, "weights_mib": IDLE_USED_MIB, "kv_cache_mib": KV_GROWTH_MIB,
                    "memory_total_mib": TOTAL_MIB, "exporter_refresh_s": 0.1}}
OFF = {"enabled": False}
RUN = {
    "target": "kubernetes",
    "model": {"name": MODEL, "path": "/models/glm", "context_limit_tokens": 32768},
    "engines": [{"name": "vllm", "dialect": "vllm", "image": "example.org/vllm:day1", "digest": DIGESTS["vllm"],
                 "gpus": 2, "node": "h20-node-1"}],
    "kubernetes": {"namespace": NS, "conn_id": CONN_ID, "gpu_memory_interval_s": INTERVAL_S},
    "scenarios": {"warmup": False, "functional": OFF, "quality": OFF, "capacity": OFF, "prefill": OFF, "decode": OFF,
                  "rate": OFF, "long_context": OFF, "boundary": OFF, "prefix_cache": OFF,
                  "short": {"concurrency": [4], "rounds": 1, "requests_per_round": 8}},
    "request_timeout_s": 30,
}


DRAFT_MIB = 2500.0  # an MTP draft's weights on each card (the stand-in's, for an engine given --speculative-config)


@pytest.fixture
def kubelet(apiserver, kube_conn, tmp_path):
    k = DeploymentKubelet(apiserver, tmp_path / "kubelet", images={"example.org/vllm": simulated_engine(
        "vllm", PROFILE, tmp_path / "bin", draft=("--speculative-config", DRAFT_MIB))})
    yield k
    k.close()


def _run(apiserver, kubelet, run: dict, run_id: str) -> RunContext:
    """The pipeline's steps for each engine in turn, as the DAG runs them, through the production KubernetesTarget."""
    ctx = RunContext.build(run, run_id, cluster=ClusterAccess(api_client=hook_api_client,
                                                              service_url=kubelet.service_url))
    for step in ("plan", "pin"):
        execute(ctx, step)
    for engine in [e["name"] for e in run["engines"]]:
        for step in ("deploy", "wait_ready", "startup_findings", "short"):
            execute(ctx, step, engine)
        # at once: teardown keeps the log once the pod printed a reading after the last load step
        execute(ctx, "teardown", engine)
    assert kubelet.errors == [] and kubelet.running() == []
    return ctx


def test_the_report_shows_memory_per_card_from_nvidia_smi_in_the_engines_pod(apiserver, kubelet, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    ctx = _run(apiserver, kubelet, RUN, "mem-1")
    built = write_report(ctx.run_dir, ctx.config)  # the report step's summary and page, without its upload

    # the pod printed its readings itself: nothing exec'd into it, and the worker stayed within its Role
    log = ctx.run_dir.read_bytes(kept_log_doc("vllm")).decode()
    assert log.count(GPU_MEMORY_MARKER) >= 4, log[-2000:]
    assert not [r for r in apiserver.requests if "/exec" in r["path"]] and apiserver.forbidden() == []

    summary = built["summary"].model_dump(mode="json")
    assert summary["engines"]["vllm"]["telemetry_rounds"] == []  # DCGM telemetry is off
    memory = summary["engines"]["vllm"]["memory_per_card"]
    assert memory is not None
    assert memory["source"].startswith("nvidia-smi in the engine's pod, every ")
    assert memory["tensor_parallel"] == 2
    assert memory["weights_per_card_mib"] == pytest.approx(LOG_WEIGHTS_MIB)
    assert memory["kv_cache_per_card_mib"] == pytest.approx(LOG_KV_MIB)
    assert [p["when"] for p in memory["points"]] == ["after readiness", "after short"]
    ready, loaded = memory["points"]
    # the cards nvidia-smi listed in the pod are the ones the pod's hardware report named
    hardware = ctx.run_dir.read_rows("hardware", "vllm")[-1]
    assert sorted(c["uuid"] for c in ready["cards"]) == sorted(hardware["gpu_uuids"]) and len(ready["cards"]) == 2
    for card in ready["cards"]:  # no KV in use: the profile's numbers, in nvidia-smi's whole MiB
        assert card["used_mib"] == round(IDLE_USED_MIB)
        assert card["total_mib"] == TOTAL_MIB
        assert card["headroom_mib"] == TOTAL_MIB - round(IDLE_USED_MIB)
        assert card["other_mib"] == pytest.approx(OTHER_MIB, abs=1.0)
    for card in loaded["cards"]:
        assert round(IDLE_USED_MIB) <= card["used_mib"] <= round(IDLE_USED_MIB + KV_GROWTH_MIB)
        assert card["headroom_mib"] == TOTAL_MIB - card["used_mib"]
        assert card["other_mib"] == pytest.approx(card["used_mib"] - LOG_WEIGHTS_MIB - LOG_KV_MIB)

    page = built["page"]
    section = page[page.index("<h2 id='memory-per-card'>Memory per card</h2>"):]
    assert "read from nvidia-smi in the engine&#39;s pod, every " in section or \
        "read from nvidia-smi in the engine's pod, every " in section
    for figure in (round(IDLE_USED_MIB), TOTAL_MIB, TOTAL_MIB - round(IDLE_USED_MIB)):
        assert f"{figure:.0f} MiB" in section, figure
    assert "after readiness" in section and "after short" in section


def test_speculative_decoding_off_against_on_compares_memory_per_card_from_the_pods(apiserver, kubelet, tmp_path,
                                                                                    monkeypatch):
    """vLLM with and without an MTP draft on the simulated cluster: the draft's weights show in each card's used
    memory, and the off/on table sets the most used card and the least headroom of each side against the other."""
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    mtp = {**RUN["engines"][0], "name": "vllm-mtp",
           "args": ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}']}
    ctx = _run(apiserver, kubelet, {**RUN, "engines": [RUN["engines"][0], mtp]}, "mem-2")
    built = write_report(ctx.run_dir, ctx.config)

    summary = built["summary"]
    assert [(p.off, p.on) for p in summary.speculative.pairs] == [("vllm", "vllm-mtp")]
    used = {name: [max(c.used_mib for c in p.cards) for p in summary.engines[name].memory_per_card.points]
            for name in ("vllm", "vllm-mtp")}
    assert used["vllm"][0] == round(IDLE_USED_MIB) and used["vllm-mtp"][0] == round(IDLE_USED_MIB + DRAFT_MIB)
    page = built["page"]
    table = page[page.index("id='memory-speculative'"):]
    table = table[:table.index("</table>")]
    ready = table[table.index("<td>after readiness</td>"):]
    ready = ready[:ready.index("</tr>")]
    room = TOTAL_MIB - round(IDLE_USED_MIB)
    assert (f"<td class='num'>{round(IDLE_USED_MIB)} MiB</td><td class='num'>{round(IDLE_USED_MIB + DRAFT_MIB)} "
            f"MiB</td>\n<td class='num'>+{DRAFT_MIB:.0f} MiB</td>\n<td class='num'>{room:.0f} MiB</td>\n"
            f"<td class='num'>{room - DRAFT_MIB:.0f} MiB</td>") in ready
    assert "<td>after short</td>" in table

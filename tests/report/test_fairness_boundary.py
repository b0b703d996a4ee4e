"""The fairness boundary (docs/PROTOCOL.md, "What the engine spent"): the report says whether two engines shared a
node and whether they ran on the same GPU UUIDs or on different ones, up together or in series, from the
hardware rows the startup step wrote and the positions the plan measured them in."""

from __future__ import annotations

import pytest

from tasks.config import parse_run_config
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.state.documents import MANIFEST, set_readiness
from tasks.state.storage import RunDir

GPUS = [f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}" for i in range(8)]


def _summary(tmp_path, placed: dict[str, tuple[str, list[str]]], positions: list[list[str]]):
    config = parse_run_config({"run_id": "fair", "model": {"name": "m"},
                               "engines": [{"name": n, "dialect": "vllm"} for n in placed]})
    run_dir = RunDir("fair", root=tmp_path)
    run_dir.write_json(MANIFEST, {"positions": positions, "design": "lanes"})
    for name, (node, uuids) in placed.items():
        set_readiness(run_dir, name, True, "serving")
        with run_dir.rows("hardware", name, "startup") as out:
            out.write({"run_id": "fair", "engine": name, "image_digest": "sha256:" + "0" * 64, "scenario": "startup",
                       "round": 0, "target": "kubernetes", "node": node, "gpu_product": "NVIDIA H20",
                       "gpu_memory_mib": 97871, "gpu_count": len(uuids), "driver_version": "570.86",
                       "cuda_version": "12.8", "gpu_uuids": uuids, "cpu_model": None, "cpu_cores": None,
                       "sources": {}, "unknown": None})
    return build_summary(run_dir, config)


@pytest.mark.parametrize("placed, positions, said", [
    # the Day-1 report's: non-overlapping 4-card slices of one 8-card host, the other engine idle meanwhile
    ({"sglang": ("node-a", GPUS[:4]), "vllm": ("node-a", GPUS[4:])}, [["sglang", "vllm"]],
     "sglang and vllm ran on the same node (node-a), up together; on different GPUs of that node (non-overlapping "
     "slices): the host's CPU, memory and storage paths are still shared, and it is not the gold standard"),
    ({"sglang": ("node-a", GPUS[:4]), "vllm": ("node-a", GPUS[:4])}, [["sglang"], ["vllm"]],
     "sglang and vllm ran on the same node (node-a), one after the other; on the same GPU UUIDs, in series: the "
     "gold standard of an A/B"),
    ({"sglang": ("node-a", GPUS[:4]), "vllm": ("node-b", GPUS[4:])}, [["sglang", "vllm"]],
     "sglang and vllm ran on different nodes (node-a, node-b): host CPU, memory, storage and network differ too, "
     "up together; on different GPUs"),
])
def test_the_report_says_whether_the_engines_shared_a_node_and_their_gpu_uuids(tmp_path, placed, positions, said):
    summary = _summary(tmp_path, placed, positions)
    (line,) = summary.fairness
    assert line.startswith(said), line
    page = render_html(summary)
    assert "Fairness boundary" in page and said.split(";")[0] in page


def test_what_one_replica_on_one_node_cannot_judge_is_said_in_the_limits(tmp_path):
    summary = _summary(tmp_path, {"sglang": ("node-a", GPUS[:4]), "vllm": ("node-a", GPUS[4:])},
                       [["sglang", "vllm"]])
    (line,) = [t for t in summary.not_proved if "cannot judge" in t]
    assert "prefill/decode disaggregation, RDMA" in line and "multi-node topologies" in line
    assert line in render_html(summary).replace("&#39;", "'")

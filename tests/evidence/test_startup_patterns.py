"""Startup-log findings from the engines' real log lines (current and older wordings).

SGLang logs f"Capture {role} {phase} CUDA graph begin." (role target/draft; phase decode, prefill,
verify), older versions "Capture cuda graph begin."; vLLM shows "Capturing CUDA graphs (...)" and
logs "Graph capturing finished in N secs, took X GiB" (gpu_model_runner.py).
"""

from __future__ import annotations

import pytest

from tasks.engines import adapter_for

CUDA_GRAPH_LINES = {
    "sglang": [
        "[2026-10-10 11:59:41] Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8], avail mem=11.19 GB",
        "[2026-10-10 11:59:51] Capture target decode CUDA graph end. elapsed=10.10 s, mem usage=0.79 GB, avail mem=10.39 GB.",
        "[2026-10-10 11:59:52 TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[512], avail mem=10.2 GB",
        "[2026-10-10 11:59:53 TP0] Capture draft decode CUDA graph begin. backend=full, bs=[1, 2], avail mem=9.9 GB",
        "[2025-09-11 10:25:43 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=11.16 GB",
    ],
    "vllm": [
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 11/11",
        "Capturing CUDA graphs (decode, FULL): 100%|████| 4/4",
        "(EngineCore_DP0 pid=212) INFO 10-06 12:00:40 [gpu_model_runner.py:3480] Graph capturing finished in 8 secs, took 0.31 GiB",
    ],
}


@pytest.mark.parametrize("dialect", ["sglang", "vllm"])
def test_cuda_graph_capture_is_found_in_each_real_wording(dialect):
    adapter = adapter_for(dialect)
    for line in CUDA_GRAPH_LINES[dialect]:
        assert [f["finding"] for f in adapter.scan_startup_log(line)] == ["cuda_graph_capture"], line


def test_lines_that_only_mention_graphs_are_not_captures():
    adapter = adapter_for("sglang")
    for line in ("Disable prefill CUDA graph because some layers do not apply Standard GQA",
                 "Decode batch. #running-req: 4, cuda graph: True, gen throughput (token/s): 812.3"):
        assert adapter.scan_startup_log(line) == [], line

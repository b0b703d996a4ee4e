"""A dataset's rows are parsed as they stream: the plan's check of a 50,000-row file holds kilobytes, not
the file; `max_requests` stops the read at its rows."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from tasks.config import parse_run_config
from tasks.traffic.dataset_rows import check_dataset, dataset_rows


def _config(path: Path, **extra):
    return parse_run_config({"run_id": "rows", "model": {"name": "m"}, "engines": [{"name": "e", "dialect": "vllm"}],
                             "scenarios": {"dataset": {"enabled": True, "path": str(path), **extra}}})


def test_the_plan_reads_a_large_dataset_in_bounded_memory(tmp_path: Path):
    path = tmp_path / "big.jsonl"
    row = json.dumps({"messages": [{"role": "user", "content": "word " * 40}], "max_tokens": 16}) + "\n"
    path.write_text(row * 50_000)  # ~14 MB
    tracemalloc.start()
    try:
        found = check_dataset(_config(path), None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found["rows"] == 50_000 and found["chat_rows"] == 50_000
    assert peak < 1_000_000, peak  # the file is 14x that


def test_max_requests_stops_the_read_at_its_rows(tmp_path: Path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\nnot json at all\n')
    with dataset_rows(_config(path, max_requests=2), None) as rows:
        assert [r.prompt for r in rows] == ["a", "b"]  # the bad third line is never read

"""Where a trace lives: an object of the run's S3 store, read as a stream through the archive's client (the
`dayone_s3` connection's), the same rows as the file; a missing object refused by its key; and `dayone trace
synth` writing the generator's rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.config import ConfigError, parse_run_config
from tasks.traffic.trace_source import check_trace, window_rows
from tasks.traffic.trace_synth import synthetic_lines

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{46 + i // 10:02d}.{i % 10}000000,{100 + 7 * i},{1 + i % 5}\n" for i in range(40))


def _config(**trace):
    return parse_run_config({"run_id": "s3-trace", "model": {"name": "m", "context_limit_tokens": 8192},
                             "engines": [{"name": "e", "dialect": "vllm"}], "archive": {"bucket": "dayone-traces"},
                             "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False},
                                           "trace": {"enabled": True, "format": "azure", **trace}}})


def test_a_trace_in_the_runs_s3_store_is_read_like_the_file(s3_server, tmp_path: Path):
    s3 = s3_server.client()
    try:
        s3.create_bucket(Bucket="dayone-traces")
    except Exception:  # noqa: BLE001  (made by an earlier test of the session)
        pass
    s3.put_object(Bucket="dayone-traces", Key="traces/azure.csv", Body=AZURE.encode())
    (tmp_path / "azure.csv").write_text(AZURE)
    from_s3, from_file = _config(s3_key="traces/azure.csv"), _config(path=str(tmp_path / "azure.csv"))
    assert check_trace(from_s3, s3_server.client) == check_trace(from_file, None) | {"source": "s3 key traces/azure.csv"}
    with window_rows(from_s3, s3_server.client) as a, window_rows(from_file, None) as b:
        assert list(a) == list(b)
    with pytest.raises(ConfigError) as info:
        check_trace(_config(s3_key="traces/absent.csv"), s3_server.client)
    assert "scenarios.trace.s3_key" in str(info.value) and "traces/absent.csv" in str(info.value)
    with pytest.raises(ConfigError) as info:
        check_trace(from_s3, None)
    assert "dayone_s3" in str(info.value)


def test_dayone_trace_synth_writes_the_generators_rows(tmp_path: Path):
    from tasks.cli import main

    out = tmp_path / "synth.jsonl"
    assert main(["trace", "synth", "--seed", "5", "--requests", "25", "--rate", "3", "--out", str(out)]) == 0
    assert out.read_text().splitlines(keepends=True) == list(synthetic_lines(5, 25, rate_rps=3.0))

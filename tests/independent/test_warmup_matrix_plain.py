"""Warmup covers the real traffic (docs/PROTOCOL.md, "Warmup"): against a server written for the test that pauses
the first time it meets a prompt length bucket (a power of two, as an engine compiles lengths alike), the warmup
warms the trace window's and the dataset's length buckets, so their measured rounds carry no compile tail; the
matrix is kept as warmup_matrix.json, archived, and shown in the report.

Before: the warmup covered the performance and traffic scenarios' shapes only, and the trace's first round paid
the pause of every bucket it met."""

from __future__ import annotations

import json
from pathlib import Path

from plain_server import MODEL, PlainServer

from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.report.html import render_html
from tasks.report.summary import build_summary
from tasks.scenarios.dataset import run_dataset
from tasks.scenarios.trace import run_trace
from tasks.scenarios.warmup import reset_shapes, run_warmup
from tasks.state.documents import WARMUP_MATRIX
from tasks.state.storage import RunDir

JIT_S = 0.5
TRACE = [{"timestamp": t, "input_length": n, "output_length": 2} for t, n in
         ((0, 20), (50, 72), (100, 150), (150, 40), (200, 130))]  # buckets 64, 128, 256
DATASET = [{"prompt": "abc " * 100}, {"prompt": "abc " * 300, "max_tokens": 3}]  # ~100 and ~300 tokens


class CompilesEachBucket(PlainServer):
    """The first request of each new prompt length bucket waits JIT_S: the engine compiling that shape."""

    def __init__(self) -> None:
        super().__init__()
        self.compiled: list[int] = []

    def first_token_delay_s(self, kind: str, prompt_tokens: int, max_tokens: int) -> float:
        bucket = 64
        while bucket < prompt_tokens:
            bucket *= 2
        if bucket in self.compiled:
            return 0.01
        self.compiled.append(bucket)
        return JIT_S


def _config(tmp_path: Path):
    trace, dataset = tmp_path / "trace.jsonl", tmp_path / "dataset.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in TRACE))
    dataset.write_text("".join(json.dumps(r) + "\n" for r in DATASET))
    return parse_run_config({
        "run_id": "warm", "model": {"name": MODEL, "context_limit_tokens": 8192},
        "engines": [{"name": "plain", "dialect": "vllm"}],
        "scenarios": {name: {"enabled": False} for name in ("short", "prefill", "decode", "long_context", "boundary",
                                                            "prefix_cache", "functional")}
        | {"trace": {"enabled": True, "path": str(trace), "block_tokens": 16, "rounds": 1, "speed": 4.0},
           "dataset": {"enabled": True, "path": str(dataset), "max_tokens": 2, "concurrency": [2], "rounds": 1}}})


def test_the_warmup_covers_the_trace_and_dataset_buckets_so_their_rounds_carry_no_compile_tail(tmp_path):
    cfg = _config(tmp_path)
    run_dir = RunDir("warm", root=tmp_path / "runs")
    with CompilesEachBucket() as server:
        ectx = EngineContext(cfg, endpoint_for(cfg, "plain", server.url, "sha256:" + "0" * 64), run_dir)
        reset_shapes(run_dir, "plain")
        warmed = run_warmup(ectx)
        compiled_in_warmup = list(server.compiled)
        run_trace(ectx, None)
        run_dataset(ectx, None)
    assert sorted(compiled_in_warmup) == [64, 128, 256, 512]
    assert server.compiled == compiled_in_warmup  # nothing left to compile once measuring began
    assert all(s["status"] == "ok" for s in warmed["shapes"])
    rounds = [r for r in run_dir.read_rows("rounds", "plain") if r["scenario"] in ("trace", "dataset")]
    assert {r["scenario"] for r in rounds} == {"trace", "dataset"}
    assert all(r["ttft_p99_s"] < JIT_S / 4 for r in rounds), [(r["scenario"], r["ttft_p99_s"]) for r in rounds]
    matrix = run_dir.read_json(WARMUP_MATRIX)["shapes"]
    assert [(m["input_tokens"], m["output_tokens"], m["concurrency"], m["requests"], m["sources"]) for m in matrix] == [
        (64, 2, 2, 4, ["trace"]), (128, 2, 2, 4, ["trace", "dataset"]), (256, 2, 2, 4, ["trace"]),
        (512, 3, 2, 4, ["dataset"])]
    summary = build_summary(run_dir, cfg)
    assert [w.input_tokens for w in summary.warmup_matrix] == [64, 128, 256, 512]
    page = render_html(summary)
    assert "Warmup matrix for production" in page and "trace, dataset" in page


def test_the_warmup_matrix_and_the_engine_log_are_archived(tmp_path):
    from tasks.core.desensitize import register_secret
    from tasks.publish.archive import archive_run
    from tasks.state.documents import kept_log_doc

    cfg = _config(tmp_path)
    run_dir = RunDir("warm", root=tmp_path / "runs")
    run_dir.write_json(WARMUP_MATRIX, {"shapes": [{"input_tokens": 64, "output_tokens": 2, "concurrency": 2,
                                                   "rate_rps": None, "requests": 4, "sources": ["trace"]}]})
    run_dir.write_bytes(kept_log_doc("plain"), b"INFO 11-30 08:00:01 started with key sk-archivedLogKey0123456789\n")
    register_secret("sk-archivedLogKey0123456789")  # read by the archive step (ctx.read_api_keys)

    class Bucket:
        def __init__(self) -> None:
            self.objects: dict[str, bytes] = {}

        def head_bucket(self, Bucket): ...  # noqa: N803  (boto3's names)

        def head_object(self, Bucket, Key):  # noqa: N803
            from botocore.exceptions import ClientError

            if Key not in self.objects:
                raise ClientError({"Error": {"Code": "404"}}, "HeadObject")
            return {}

        def get_object(self, Bucket, Key):  # noqa: N803
            import io

            return {"Body": io.BytesIO(self.objects[Key])}

        def put_object(self, Bucket, Key, Body, **_):  # noqa: N803
            self.objects[Key] = Body

    s3 = Bucket()
    archive_run(run_dir, cfg, s3)
    (key,) = [k for k in s3.objects if k.endswith("/warmup_matrix.json")]
    assert json.loads(s3.objects[key])["shapes"][0]["sources"] == ["trace"]
    (log,) = [v for k, v in s3.objects.items() if k.endswith("/engine.log")]
    assert b"started with key" in log and b"sk-archivedLogKey" not in log

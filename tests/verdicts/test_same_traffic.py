"""Across nights an eval set, a trace or a dataset is the same by its content, not its name (issue 43, item 7),
measured against plain servers written for the test: the same trace moved to another path is compared, a trace
rewritten under the same path is not; an eval set moved is compared item by item, and an item whose answer key was
edited in place is no engine's regression."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from plain_server import MODEL
from quality_server import SolvesEverything
from verdict_runs import TailServer, archive, measure_trace, night_dir, trace_config, write_trace

from tasks.compare.nightly import compare_run
from tasks.config import parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.publish.archive import archive_run
from tasks.quality.eval_set import items_as_json, parse_eval_set, read_eval_set
from tasks.quality.run import run_quality
from tasks.state.documents import EVAL_SET
from tasks.state.storage import RunDir
from tasks.traffic.trace_source import check_trace


def _trace_night(root: Path, bucket: str, run_id: str, created: float, trace: Path):  # noqa: ANN202
    with TailServer(slow_tail=False) as server:
        cfg = trace_config(run_id, {"eng": server.url}, trace, 2, bucket)
        run_dir = night_dir(root, run_id, created, cfg, ["eng"])
        manifest = run_dir.read_json("manifest.json")
        run_dir.write_json("manifest.json", {**manifest, "trace": check_trace(cfg, None)})  # as the plan records it
        measure_trace(cfg, run_dir, "eng", server)
    return run_dir, cfg


def test_the_same_trace_at_another_path_is_compared_and_another_under_the_same_path_is_not(s3_server, run_root,
                                                                                           tmp_path):
    s3, bucket = s3_server.client(), f"content-{time.time_ns()}"
    first = write_trace(tmp_path / "trace.jsonl")
    night1, cfg1 = _trace_night(run_root, bucket, "night-1", 1000.0, first)
    archive(night1, cfg1, s3)
    moved = tmp_path / "moved" / "trace.jsonl"
    moved.parent.mkdir()
    shutil.copy(first, moved)
    night2, cfg2 = _trace_night(run_root, bucket, "night-2", 2000.0, moved)
    assert compare_run(night2, cfg2, s3)["engines"]["eng"]["baselines"].get("trace") == "night-1"
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    first.write_text("".join(json.dumps({**r, "output_tokens": 4}) + "\n" for r in rows))  # rewritten in place
    night3, cfg3 = _trace_night(run_root, bucket, "night-3", 3000.0, first)
    result = compare_run(night3, cfg3, s3)
    assert "trace" not in result["engines"]["eng"]["baselines"], result
    skipped = night3.read_json("regressions.json")["skipped"]
    assert any("night-1" in line and "content sha256" in line for line in skipped), skipped


EVAL = [{"id": "sum", "prompt": "What is 2 + 3?", "expected": "5", "match": "exact"},
        {"id": "product", "prompt": "What is 4 * 6?", "expected": "24", "match": "exact"},
        {"id": "difference", "prompt": "What is 9 - 7?", "expected": "2", "match": "exact"}]


def _eval_night(root: Path, bucket: str, run_id: str, created: float, path: Path):  # noqa: ANN202
    config = parse_run_config({
        "run_id": run_id, "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": "eng", "dialect": "vllm"}], "archive": {"bucket": bucket},
        "scenarios": {"quality": {"enabled": True, "items_per_family": 1, "kv_context_tokens": [64],
                                  "eval_set": str(path)},
                      **{s: {"enabled": False} for s in ("short", "prefill", "decode", "rate", "prefix_cache",
                                                         "long_context", "boundary")}},
        "request_timeout_s": 30})
    run_dir = RunDir(run_id, root)
    run_dir.write_json("manifest.json", {"run_id": run_id, "created_ts": created,
                                         "config": config.model_dump(mode="json")})
    run_dir.write_json("validation.json", {"success": True})
    source = str(path)
    run_dir.write_json(EVAL_SET, items_as_json(parse_eval_set(read_eval_set(source), source)))  # as the plan keeps it
    with SolvesEverything() as server:
        run_quality(EngineContext(config, endpoint_for(config, "eng", server.url, "sha256:" + "0" * 64), run_dir))
    return run_dir, config


def _write_eval(path: Path, items: list[dict]) -> Path:  # type: ignore[type-arg]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def test_an_eval_set_is_compared_by_its_items_not_its_path(s3_server, run_root, tmp_path):
    s3, bucket = s3_server.client(), f"evalset-{time.time_ns()}"
    night1, cfg1 = _eval_night(run_root, bucket, "night-1", 1000.0, _write_eval(tmp_path / "a" / "eval.jsonl", EVAL))
    archive_run(night1, cfg1, s3)
    night2, cfg2 = _eval_night(run_root, bucket, "night-2", 2000.0, _write_eval(tmp_path / "b" / "eval.jsonl", EVAL))
    compare_run(night2, cfg2, s3)  # moved: compared, and nothing regressed
    rows = {r["metric"]: r for r in night2.read_rows("regressions", "eng")}
    assert rows["items/eval_set"]["verdict"] == "no item right then is wrong now (3/3 then, 3/3 now)", rows
    edited = [{**EVAL[0], "expected": "6"}, *EVAL[1:]]  # the key of "sum" edited in place: another item
    night3, cfg3 = _eval_night(run_root, bucket, "night-3", 3000.0, _write_eval(tmp_path / "b" / "eval.jsonl", edited))
    compare_run(night3, cfg3, s3)
    rows = {r["metric"]: r for r in night3.read_rows("regressions", "eng")}
    assert not any(r["regressed"] for r in rows.values()), [r for r in rows.values() if r["regressed"]]
    assert rows["items/eval_set"]["verdict"] == "no item right then is wrong now (2/2 then, 2/2 now)", rows

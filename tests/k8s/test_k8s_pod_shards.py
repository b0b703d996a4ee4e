"""Two runner pods measuring one round together (tasks/load/pod_shards.py), on the local API server: the
fake kubelet runs each pod's real `dayone step short --shard K/2` as a process; they meet through the
run's S3 staging, shard 1 measures its clock offset against shard 0, both start together, and the
merged rows and client_shards are the step's. Against the independent reference server of bench/,
whose own records give each shard's fidelity figures (bench/load_accuracy.py's compare)."""

from __future__ import annotations

import base64
import sys
import time
import uuid
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet
from k8s_helpers import CONN_ID

from tasks.stats.figures import percentile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from load_accuracy import compare, ground_truth, start_server  # noqa: E402

NS, NODE, ENGINE = "bench", "h20-node-1", "ref"
DIGEST = "sha256:" + "4" * 64
CONCURRENCY, REQUESTS, OUTPUT = 8, 32, 32
TTFT_S, ITL_S = 0.02, 0.005
RUN = {
    "target": "kubernetes",
    "model": {"name": "ref-model", "path": "/models/ref", "context_limit_tokens": 32768},
    "engines": [{"name": ENGINE, "dialect": "vllm", "image": "example.org/vllm:day1", "digest": DIGEST, "gpus": 1,
                 "node": NODE}],
    "kubernetes": {"namespace": NS, "conn_id": CONN_ID, "measure_from": "cluster",
                   "runner": {"image": "registry.example.org/dayone-runner@sha256:" + "3" * 64, "cpu": 1,
                              "s3_secret": {"name": "dayone-s3"}, "startup_timeout_s": 60}},
    # one pod of one core carries 4 streams: the round's 8 take two pods
    "load": {"streams_per_process": 4},
    "scenarios": {"warmup": False, "quality": {"enabled": False}, "capacity": {"enabled": False},
                  "short": {"concurrency": [CONCURRENCY], "rounds": 1, "requests_per_round": REQUESTS,
                            "input_tokens": 32, "output_tokens": OUTPUT},
                  "prefill": {"enabled": False}, "decode": {"enabled": False}, "rate": {"enabled": False},
                  "long_context": {"enabled": False}, "boundary": {"enabled": False},
                  "prefix_cache": {"enabled": False}},
    "request_timeout_s": 30,
}


@pytest.fixture(scope="module")
def reference():
    proc, url = start_server(None, ttft_s=TTFT_S, itl_s=ITL_S)
    yield url
    proc.kill()
    proc.wait(10)


def _planned_run(apiserver, s3, run_id: str):
    """What the worker's plan, deploy and readiness steps leave: the run's config, the engine served at
    the reference server, its pod on NODE, and the S3 keys' Secret."""
    from tasks.config import parse_run_config
    from tasks.k8s.manifests import labels_for, run_selector
    from tasks.state.object_store import S3Access, S3Store
    from tasks.state.documents import MANIFEST
    from tasks.state.storage import RunDir

    config = parse_run_config({**RUN, "run_id": run_id})
    prefix = f"staging-{uuid.uuid4().hex[:8]}"
    state = RunDir(run_id, S3Store(S3Access(s3.endpoint_url, s3.access_key, s3.secret_key), "dayone-shards", prefix))
    state.write_json(MANIFEST, {"config": config.model_dump(mode="json"), "engines": [{"name": ENGINE}]})
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dayone-s3", "namespace": NS},
                                 "data": {"access-key-id": base64.b64encode(s3.access_key.encode()).decode(),
                                          "secret-access-key": base64.b64encode(s3.secret_key.encode()).decode()}})
    apiserver._store("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"dayone-{ENGINE}-0", "namespace": NS, "labels": labels_for(run_id, ENGINE)},
        "spec": {"nodeName": NODE, "containers": [{"name": "engine", "image": "example.org/vllm"}]},
        "status": {"phase": "Running"}})
    return config, state, f"s3://dayone-shards/{prefix}", run_selector(run_id, ENGINE)


def test_two_runner_pods_measure_one_round_together(apiserver, kube_conn, s3_server, reference, tmp_path):
    from kubernetes import client

    from dayone_airflow.connections import hook_api_client
    from tasks.steps.runner_pods import pods_for_step, runner_step_pod
    from tasks.report.html import render_html
    from tasks.report.summary import build_summary
    from tasks.state.documents import outcome_doc, set_readiness
    from tasks.targets.base import Deployment

    run_id = "run-shards"
    config, state, staging, selector = _planned_run(apiserver, s3_server, run_id)
    Deployment(ENGINE, reference, DIGEST, handle={"conn_id": CONN_ID, "namespace": NS, "deployment": f"dayone-{ENGINE}",
                                                  "service": f"dayone-{ENGINE}", "selector": selector, "objects": [],
                                                  "launch_index": 0}).save(state)
    set_readiness(state, ENGINE, True, "served")
    kubelet = FakeKubelet(apiserver, tmp_path / "kubelet")
    assert pods_for_step(config, "short") == 2 and pods_for_step(config, "functional") == 1

    core = client.CoreV1Api(hook_api_client(CONN_ID))
    names = []
    for shard in (1, 0):  # the peer first: it waits for shard 0's rendezvous in S3
        pod = runner_step_pod(config, "short", [ENGINE], run_id, staging, s3_server.endpoint_url, shard=shard, pods=2)
        names.append(core.create_namespaced_pod(NS, pod).metadata.name)
    deadline = time.monotonic() + 180
    while len(kubelet.exit_codes) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    logs = {n: apiserver.logs.get((NS, n, "base", False), "") for n in names}
    assert {n: kubelet.exit_codes.get(n) for n in names} == {n: 0 for n in names}, logs
    assert "joined" in logs[names[0]] and "measured 16 requests" in logs[names[0]], logs

    assert state.read_json(outcome_doc("short", ENGINE))["status"] == "ok"
    rows = sorted((r for r in state.read_rows("requests", ENGINE) if r["scenario"] == "short"),
                  key=lambda r: r["request_id"])
    assert len(rows) == REQUESTS and all(r["status"] == "ok" for r in rows)
    shards = sorted(state.read_rows("client_shards", ENGINE), key=lambda r: r["shard"])
    assert [(s["shard"], s["pod"], s["pods"], s["pod_cores"], s["requests"]) for s in shards] == [
        (0, 0, 2, 1, 16), (1, 1, 2, 1, 16)]
    assert "over 2 runner pods of 1 core" in shards[0]["shards_reason"]
    # one host, one clock: shard 1's offset is within its exchange's uncertainty (recorded, > 0)
    assert shards[0]["offset_s"] == 0.0 and 0 < shards[1]["uncertainty_s"] < 0.05
    assert abs(shards[1]["offset_s"]) <= shards[1]["uncertainty_s"] + 0.002, shards[1]
    [round_row] = [r for r in state.read_rows("rounds", ENGINE) if r["scenario"] == "short"]
    assert round_row["requests_ok"] == REQUESTS
    # the summary and the report say how many pods, of how many cores, measured each round
    summary = build_summary(state, config)
    [load] = summary.engines[ENGINE].client_load
    assert (load.pods, load.pod_cores) == (2, 1)
    assert load.measured_by == ["c=8 round 1: 2 runner pods of 1 core, 2 client processes"]
    table = render_html(summary, charts={}).split("The CPU the load client got")[1].split("</table>")[0]
    assert "2 of 1 core" in table and "c=8 round 1: 2 runner pods of 1 core" in table

    # the common start: the first wave of both pods (8 streams) together, a few ms apart here (printed) and within
    # 0.3 s where a loaded machine stalls one pod's process; pods that did not start together are seconds apart.
    # Never more than 8 in flight.
    truth = ground_truth(reference, {r["request_id"] for r in rows})
    arrivals = sorted(g["arrival_ts"] for g in truth.values())
    assert arrivals[CONCURRENCY - 1] - arrivals[0] < 0.3, arrivals[:CONCURRENCY]
    print(f"first wave of {CONCURRENCY} over both pods arrived within {1e3 * (arrivals[CONCURRENCY - 1] - arrivals[0]):.3f} ms")
    spans = [(r["send_ts"], r["send_ts"] + r["e2e_s"]) for r in rows]
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) <= CONCURRENCY

    # each shard's fidelity against the server's own records, as bench/load_accuracy.py figures it
    figures = {}
    for s in shards:
        mine = [r for r in rows if int(r["request_id"].rsplit("-", 1)[1]) % 2 == s["pod"]]
        doc = {"results": [{"id": r["request_id"], "status": r["status"], "ttft_s": r["ttft_s"],
                            "send_ts": r["send_ts"], "completion_tokens": r["completion_tokens"],
                            "events_s": _events(r)} for r in mine],
               "wall_s": s["wall_s"], "cpu_s": s["cpu_s"], "waited_s": s["waited_s"]}
        figures[s["pod"]] = f = compare(doc, truth, 0.0)
        print(f"pod {s['pod']}: offset {1e3 * s['offset_s']:+.3f}±{1e3 * s['uncertainty_s']:.3f} ms, "
              f"{f['requests']} requests, ttft err p50/p99 {f['ttft_err_ms']['p50']:.3f}/{f['ttft_err_ms']['p99']:.3f} ms, "
              f"itl err p50/p99 {f['itl_err_ms']['p50']:.3f}/{f['itl_err_ms']['p99']:.3f} ms, "
              f"send->arrival p50 {f['send_to_arrival_ms']['p50']:.3f} ms, lag p50 {f['lag_ms']['p50']:.3f} ms, "
              f"cpu {f['cpu_cores']:.2f} cores")
    for f in figures.values():
        assert f["requests"] == REQUESTS // 2 and f["failed"] == f["unmatched"] == 0
        assert f["ttft_err_ms"]["p50"] < 5 and f["itl_err_ms"]["p50"] < 5, f  # a loaded 2-core box: loose
    assert percentile([abs(g["arrival_ts"] - r["send_ts"]) for r in rows for g in [truth[r["request_id"]]]], 50) < 0.005


def _events(row: dict) -> list[float]:
    """Each output event's time after the send, from the row's TTFT and inter-token gaps."""
    out = [row["ttft_s"]]
    for gap in row["itl_s"] or []:
        out.append(out[-1] + gap)
    return out


def test_a_step_takes_one_pod_per_what_a_pod_carries_up_to_max_pods():
    from tasks.config import parse_run_config
    from tasks.steps.runner_pods import pods_for_step

    def pods(concurrency, cpu, max_pods=8):
        runner = {**RUN["kubernetes"]["runner"], "cpu": cpu, "max_pods": max_pods}
        scenarios = {**RUN["scenarios"], "short": {**RUN["scenarios"]["short"], "concurrency": concurrency}}
        doc = {**RUN, "load": {}, "kubernetes": {**RUN["kubernetes"], "runner": runner}, "scenarios": scenarios}
        return pods_for_step(parse_run_config(doc), "short")

    assert pods([64, 512], 4) == 2  # the largest round: 512 streams over 64 a process x 4 cores
    assert pods([64, 256], 4) == 1 and pods([1024], 2, max_pods=3) == 3


@pytest.mark.parametrize(("field", "value", "fix"), [("max_pods", 0, "most runner pods one step may take"),
                                                     ("log_interval_s", 0.5, "whole seconds")])
def test_a_bad_pod_setting_is_refused_naming_the_field_and_the_fix(field, value, fix):
    from tasks.config import ConfigError, parse_run_config

    doc = {**RUN, "kubernetes": {**RUN["kubernetes"], "runner": {**RUN["kubernetes"]["runner"], field: value}}}
    with pytest.raises(ConfigError) as err:
        parse_run_config(doc)
    assert any(f == f"kubernetes.runner.{field}" and fix in x for f, _, x in err.value.problems), err.value.problems

"""dayone_eval with measure_from: cluster where a round asks for more streams than one runner pod carries:
the step's KubernetesPodOperator task creates its peer pod beside its own, the two measure that round
together and the one-pod round alone, the peer is deleted when the step ends, and the report says how
many pods of how many cores measured each round."""

from __future__ import annotations

import pytest
from test_k8s_runner_pods_pipeline import NS, RUN, cluster_run  # noqa: F401  (the fixture)


def test_a_round_past_one_pod_is_measured_by_the_steps_pods_together(eval_dag, cluster_run):  # noqa: F811
    from dayone_airflow.glue import run_dir

    apiserver, kubelet, _, _ = cluster_run
    # one core of 2 streams a pod: short's c=4 rounds take two pods, its c=1 rounds one
    conf = {**RUN, "load": {"streams_per_process": 2},
            "kubernetes": {**RUN["kubernetes"], "runner": {**RUN["kubernetes"]["runner"], "cpu": 1}}}

    run = eval_dag.test(run_conf=conf)

    assert str(run.state).endswith("success"), run.state
    created = [r["body"] for r in apiserver.requests if r["method"] == "POST" and r["path"].endswith("/pods")]
    steps = sorted((p["metadata"]["labels"]["dayone/step"], p["metadata"]["labels"].get("dayone/shard-of", ""))
                   for p in created)
    assert steps == [("functional", ""), ("short", ""), ("short", "short-sglang")], steps
    commands = {p["metadata"]["labels"].get("dayone/shard-of", "lead"): p["spec"]["containers"][0]["command"]
                for p in created if p["metadata"]["labels"]["dayone/step"] == "short"}
    assert commands["lead"][-2:] == ["--shard", "0/2"] and commands["short-sglang"][-2:] == ["--shard", "1/2"]
    assert sorted(kubelet.exit_codes.values()) == [0, 0, 0]
    assert not apiserver.list("pods", NS, "app.kubernetes.io/component=runner-step")  # the peer deleted too

    state = run_dir(run.run_id)
    rows = [r for r in state.read_rows("client_shards", "sglang") if r["scenario"] == "short"]
    by_level = {c: sorted((r["pod"], r["pods"], r["pod_cores"]) for r in rows if r["concurrency"] == c) for c in (1, 4)}
    assert by_level == {1: [(0, 1, 1)], 4: [(0, 2, 1), (1, 2, 1)]}, by_level
    peer = [r for r in rows if r["pod"] == 1][0]
    assert peer["uncertainty_s"] > 0 and abs(peer["offset_s"]) <= peer["uncertainty_s"] + 0.005
    measured = [r for r in state.read_rows("requests", "sglang") if r["scenario"] == "short"]
    assert len(measured) == 16 and all(r["status"] == "ok" for r in measured)
    page = state.read_bytes("report.html").decode()
    assert "c=4 round 1: 2 runner pods of 1 core, 2 client processes" in page
    assert "c=1 round 1: 1 runner pod of 1 core, 1 client process" in page


pytestmark = pytest.mark.usefixtures("s3_conn")

"""A further launch (measurement.launches) on Kubernetes: a fresh rollout through the target's own deploy and
readiness, against a local Kubernetes REST API."""

from __future__ import annotations

import threading
import time

from k8s_helpers import run_config

from dayone_airflow.connections import hook_api_client
from tasks.steps import engine_steps
from tasks.steps.execution import execute
from tasks.steps.context import RunContext
from tasks.targets.kubernetes import ClusterAccess

NS = "bench"
NAME = "dayone-sglang-run-1"


def test_a_relaunch_is_a_fresh_rollout_readied_before_its_rounds(apiserver, kube_conn, engine_url, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("DAYONE_WORKDIR", str(tmp_path / "runs"))
    cluster = ClusterAccess(api_client=hook_api_client, service_url=lambda name, ns, port: engine_url)
    config = run_config(engines=("sglang",)).model_dump(mode="json", exclude={"run_id"})
    config["measurement"] = {"launches": 2}
    config["scenarios"]["warmup"] = False
    ctx = RunContext.build(config, "run-1", cluster=cluster)

    def roll_out() -> None:
        apiserver.start_pod(NS, NAME, running=True, ready=True)
        apiserver.set_available(NS, NAME)

    def creations() -> int:
        return sum(1 for r in apiserver.requests
                   if r["method"] == "POST" and r["path"] == f"/apis/apps/v1/namespaces/{NS}/deployments")

    execute(ctx, "pin")
    execute(ctx, "deploy", "sglang")
    roll_out()
    execute(ctx, "wait_ready", "sglang")
    assert creations() == 1

    def cluster_plays() -> None:  # the new Deployment's pod comes up once it was created
        deadline = time.monotonic() + 30
        while creations() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        roll_out()

    threading.Thread(target=cluster_plays, daemon=True).start()
    launched: dict[str, list] = {"sglang": []}
    started = time.monotonic()
    [ectx] = engine_steps._relaunch(ctx, ["sglang"], "short", 1, launched)

    deployment_calls = [r["method"] for r in apiserver.requests
                        if r["path"].startswith(f"/apis/apps/v1/namespaces/{NS}/deployments")
                        and not r["path"].endswith("/status") and r["method"] in ("POST", "DELETE")]
    assert deployment_calls[-2:] == ["DELETE", "POST"], deployment_calls  # removed, then created anew
    assert creations() == 2
    assert ctx.deployment("sglang").handle["launch_index"] == 1
    [record] = launched["sglang"]
    assert record["launch"] == 1 and record["deployment"] == NAME
    assert 0.2 <= record["ready_waited_s"] <= time.monotonic() - started  # it waited for the new rollout
    assert ectx.endpoint.base_url == engine_url

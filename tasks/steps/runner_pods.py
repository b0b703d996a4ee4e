"""A measuring step's runner pod (kubernetes.measure_from: cluster): the locked-down runner pod of
`dayone render --runner-pod-template`, running `dayone step` beside the engine, with whole cores of its
own, its config and results in the run's S3 staging and its credentials from Secrets by reference."""

from __future__ import annotations

import math
import re
from typing import Any

from tasks.config import RunConfig
from tasks.engines.access import api_key_env
from tasks.load.pod_shards import POD_IP_ENV, pod_group
from tasks.k8s.manifests import (EXECUTOR_CONTAINER, LABEL_ENGINE, LABEL_MANAGED_BY, LABEL_RUN, MANAGED_BY,
                                 label_value, runner_pod_template)
from tasks.core.names import PERF_SCENARIOS
from tasks.steps.context import NOT_ATTEMPTED_EXIT
from tasks.steps.registry import SCENARIO_STEPS

# The steps that measure an engine: with measure_from: cluster each runs in a runner pod, whose Role reads
# the engine's restarts and nothing else (tasks/k8s/rbac.py). Two engine steps stay on the worker, whose Role
# has what they call: the startup findings read the engine's log; the openwebui step makes OpenWebUI's
# Service, Secret and Deployment (it times no engine request, so a runner pod would gain it nothing but
# those grants, in the pods that also take connections from their peers).
WORKER_ENGINE_STEPS = ("startup_findings", "openwebui")
RUNNER_STEPS = tuple(s for s in SCENARIO_STEPS if s not in WORKER_ENGINE_STEPS)
LABEL_COMPONENT = "app.kubernetes.io/component"
RUNNER_COMPONENT = "runner-step"
LABEL_STEP = "dayone/step"
CONTAINER = EXECUTOR_CONTAINER  # KubernetesPodOperator's base container name, as the executor's
SKIP_EXIT_CODES = (NOT_ATTEMPTED_EXIT,)  # not attempted: the task is skipped, as on the worker
HOST_TOPOLOGY = "kubernetes.io/hostname"
S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


LABEL_SHARD_OF = "dayone/shard-of"  # a peer pod's: the step's pod group (tasks/load/pod_shards.py)


def step_command(step: str, engines: list[str], run_id: str, shard: int = 0, pods: int = 1) -> list[str]:
    """`dayone step` as a runner pod runs it: the config is the run's own, read from its staging."""
    return ["dayone", "step", step, *[a for e in engines for a in ("--engine", e)], "--run-id", run_id,
            *(["--shard", f"{shard}/{pods}"] if pods > 1 else [])]


def pods_for_step(config: RunConfig, step: str) -> int:
    """Runner pods measuring `step` together: its largest round's streams over what one pod carries
    (load.streams_per_process x kubernetes.runner.cpu), at most runner.max_pods. Only performance
    scenarios send rounds that large; the other steps take one pod."""
    from tasks.scenarios.warmup import scenario_shapes

    if step not in PERF_SCENARIOS:
        return 1
    settings, runner = getattr(config.scenarios, step), config.kubernetes.runner
    requests = getattr(settings, "requests_per_round", 0) or 0
    streams = max((s.streams(requests) for s in scenario_shapes(config, step)), default=1)
    return max(1, min(runner.max_pods, math.ceil(streams / (config.load.streams_per_process * runner.cpu))))


def _engine_pod_term(run_id: str, engine: str) -> dict[str, Any]:
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_RUN: label_value(run_id), LABEL_ENGINE: engine}
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": HOST_TOPOLOGY}


def placement(config: RunConfig, run_id: str, engines: list[str]) -> dict[str, Any]:
    """nodeSelector and affinity of the pod: the config's own, else the engine's node. Engines measured
    together may sit on different nodes: then each engine's node is preferred, none required."""
    runner = config.kubernetes.runner
    if runner.affinity is not None or runner.node_selector:
        return {k: v for k, v in (("nodeSelector", runner.node_selector), ("affinity", runner.affinity)) if v}
    terms = [_engine_pod_term(run_id, e) for e in engines]
    if len(terms) == 1:
        return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}}
    return {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": t} for t in terms]}}}


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def runner_step_pod(config: RunConfig, step: str, engines: list[str], run_id: str, staging: str,
                    s3_endpoint_url: str | None = None, shard: int = 0, pods: int = 1) -> dict[str, Any]:
    """The Pod running `step` for `engines` of run `run_id`, its state under `staging` (s3://BUCKET/PREFIX);
    with `pods` > 1, shard `shard` of the pods measuring the step together (0 leads, runs the step)."""
    if step not in RUNNER_STEPS:
        raise ValueError(f"{step} is not a measuring step (runner steps: {', '.join(RUNNER_STEPS)})")
    if len(engines) != 1 and step not in PERF_SCENARIOS:
        raise ValueError(f"{step} measures one engine; only performance scenarios measure engines together")
    k8s, runner = config.kubernetes, config.kubernetes.runner
    pod = runner_pod_template(runner.image or "", namespace=k8s.namespace, service_account=runner.service_account)
    [container] = pod["spec"]["containers"]
    container["command"] = step_command(step, engines, run_id, shard, pods)
    env = [*container["env"], {"name": "DAYONE_STAGING", "value": staging}]
    if pods > 1:  # where the peers reach shard 0
        env.append({"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if s3_endpoint_url:
        env.append({"name": "DAYONE_S3_ENDPOINT_URL", "value": s3_endpoint_url})
    s3 = runner.s3_secret
    if s3 is not None:
        env += [_secret_env("AWS_ACCESS_KEY_ID", s3.name, s3.access_key_id_key),
                _secret_env("AWS_SECRET_ACCESS_KEY", s3.name, s3.secret_access_key_key)]
    for e in engines:
        ref = config.engine(e).api_key_secret
        if ref is not None:
            env.append(_secret_env(api_key_env(e), ref.name, ref.key))
    container["env"] = env
    whole = {"cpu": str(runner.cpu), "memory": runner.memory}
    container["resources"] = {"requests": dict(whole), "limits": dict(whole)}  # Guaranteed QoS
    name = re.sub(r"[^a-z0-9-]+", "-", f"dayone-{step}-{'-'.join(engines)}".lower())[:50]
    pod["metadata"]["name"] = name if shard == 0 else f"{name}-s{shard}"
    pod["metadata"]["labels"].update({LABEL_COMPONENT: RUNNER_COMPONENT, LABEL_RUN: label_value(run_id),
                                      LABEL_STEP: label_value(step)})
    if shard > 0:
        pod["metadata"]["labels"][LABEL_SHARD_OF] = label_value(pod_group(step, engines))
    spec = pod["spec"]
    spec["automountServiceAccountToken"] = True  # restart readings: the engine's pods, listed (its Role grants no more)
    spec.update(placement(config, run_id, engines))
    spec["tolerations"] = list(k8s.tolerations)
    return pod

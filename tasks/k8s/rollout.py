"""Reading a rollout: is the engine's Deployment available, still coming, or never going to be?

Pure functions over API objects as plain dicts (the JSON form, camelCase). `rollout_platform` is the
Kubernetes platform's one answer to the readiness wait (tasks/engines/readiness.py); its two API readers, the
target (sync client) and the Airflow trigger (async client), only fetch what it reads and call it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.k8s.manifests import ANNOTATION_CREATED, CONTAINER
from tasks.engines.readiness import UP, Platform

# Waiting reasons that never heal by waiting: the kubelet retries them forever.
FATAL_WAITING = {
    "ImagePullBackOff": "the image cannot be pulled",
    "ErrImagePull": "the image cannot be pulled",
    "InvalidImageName": "the image reference is invalid",
    "ErrImageNeverPull": "the image is not on the node and the pull policy is Never",
    "CrashLoopBackOff": "the engine keeps crashing",
    "CreateContainerConfigError": "the container config is invalid (a missing Secret or ConfigMap?)",
    "CreateContainerError": "the container cannot be created",
    "RunContainerError": "the container cannot be started",
}
# An unschedulable pod may only be waiting for the previous engine on its node to release the
# GPUs (engines sharing a node run one after another): give it this long before failing.
UNSCHEDULABLE_GRACE_S = 180.0


@dataclass(frozen=True)
class RolloutState:
    phase: str  # "available" | "waiting" | "failed"
    reason: str
    pod: str | None = None  # the pod the reason is about, for its events

    @property
    def failed(self) -> bool:
        return self.phase == "failed"

    @property
    def available(self) -> bool:
        return self.phase == "available"


def parse_time(value: Any) -> float | None:
    """Epoch seconds from an RFC 3339 timestamp (or datetime), None when absent."""
    if not value:
        return None
    if isinstance(value, dt.datetime):
        t = value
    else:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def assess(deployment: dict[str, Any] | None, pods: list[dict[str, Any]], now: float,
           unschedulable_grace_s: float = UNSCHEDULABLE_GRACE_S) -> RolloutState:
    """The rollout's state from the Deployment and its pods; fatal states fail at once."""
    if deployment is None:
        return RolloutState("failed", "the Deployment does not exist (deleted, or never created)")
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            return RolloutState("failed", f"pod {name} failed: {status.get('reason', '')} {status.get('message', '')}".strip(), name)
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if reason in FATAL_WAITING:
                last = ((cs.get("lastState") or {}).get("terminated")) or {}
                extra = f"; last exit {last.get('exitCode')} ({last.get('reason')})" if last else ""
                detail = (waiting.get("message") or "").strip()
                return RolloutState(
                    "failed",
                    f"pod {name} container {cs.get('name')}: {reason}: {FATAL_WAITING[reason]}"
                    + (f" ({detail})" if detail else "") + extra,
                    name,
                )
        scheduled = _condition(pod, "PodScheduled")
        if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            since = parse_time(scheduled.get("lastTransitionTime")) or parse_time(pod["metadata"].get("creationTimestamp")) or now
            if now - since >= unschedulable_grace_s:
                return RolloutState(
                    "failed",
                    f"pod {name} is unschedulable for {now - since:.0f} s: {scheduled.get('message', '')}".strip(),
                    name,
                )
            return RolloutState("waiting", f"pod {name} not scheduled yet: {scheduled.get('message', '')}", name)
    progressing = _condition(deployment, "Progressing")
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        return RolloutState("failed", f"rollout exceeded its progress deadline: {progressing.get('message', '')}",
                            pods[0]["metadata"]["name"] if pods else None)
    spec_replicas = (deployment.get("spec") or {}).get("replicas", 1)
    status = deployment.get("status") or {}
    generation_seen = status.get("observedGeneration", 0) >= (deployment["metadata"].get("generation") or 0)
    if generation_seen and (status.get("availableReplicas") or 0) >= spec_replicas:
        return RolloutState("available", f"{status.get('availableReplicas')}/{spec_replicas} replicas available")
    pod = pods[0]["metadata"]["name"] if pods else None
    return RolloutState("waiting", f"{status.get('readyReplicas') or 0}/{spec_replicas} replicas ready", pod)


def describe_events(events: list[dict[str, Any]], limit: int = 8) -> str:
    """The pod's most recent events, warnings first: what `kubectl describe pod` would show."""
    def key(e: dict[str, Any]) -> tuple[int, float]:
        when = parse_time(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")) or 0.0
        return (0 if e.get("type") == "Warning" else 1, -when)

    lines = []
    for e in sorted(events, key=key)[:limit]:
        count = f" (x{e['count']})" if (e.get("count") or 1) > 1 else ""
        lines.append(f"{e.get('type', 'Normal')} {e.get('reason', '')}: {(e.get('message') or '').strip()}{count}")
    return "; ".join(lines) if lines else "no events"


# ---- the platform check: one decision, two API readers ---------------------------------------
def pods_to_explain(deployment: dict[str, Any] | None, pods: list[dict[str, Any]], now: float) -> list[str]:
    """The pods whose events `rollout_platform` quotes: the one a failure names, none otherwise (so a
    reader lists events only when they explain something)."""
    state = assess(deployment, pods, now)
    return [state.pod] if state.failed and state.pod else []


def rollout_platform(deployment: dict[str, Any] | None, pods: list[dict[str, Any]],
                     events: Mapping[str, list[dict[str, Any]]], now: float) -> Platform:
    """Failed for good (with the pod's events), still coming (and why), or up, from the Deployment
    (None: not found), its pods and the events of the pods `pods_to_explain` named."""
    state = assess(deployment, pods, now)
    if state.failed:
        found = describe_events(events.get(state.pod) or []) if state.pod else "no pod"
        return Platform(failed=f"{state.reason}. Events: {found}")
    return UP if state.available else Platform(waiting=state.reason)


def restart_total(pods: list[dict[str, Any]], container: str = CONTAINER) -> int | None:
    """Restarts of the engine container summed over the engine's pods; None without pods."""
    if not pods:
        return None
    total = 0
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == container:
                total += int(cs.get("restartCount") or 0)
    return total


# The kubelet's words when it kills a container for its probes (pkg/kubelet/prober): a Killing event
# "Container engine failed liveness probe, will be restarted" after Unhealthy "Liveness probe failed: ...".
_PROBE_KILL = ("failed liveness probe", "failed startup probe")


def restart_causes(pods: list[dict[str, Any]], events: list[dict[str, Any]],
                   container: str = CONTAINER) -> list[dict[str, Any]]:
    """Why the engine container restarted, as far as the API tells: the probe kills its events name, and
    its last termination (the API keeps only the last) when no probe kill explains it. Each cause is
    {"cause": "oom_killed" | "probe_kill" | "exit", "detail": ..., "count": n or None (unknown)}."""
    causes: list[dict[str, Any]] = []
    for e in events:
        message = (e.get("message") or "").strip()
        if e.get("reason") == "Killing" and any(p in message.lower() for p in _PROBE_KILL):
            causes.append({"cause": "probe_kill", "detail": message, "count": int(e.get("count") or 1)})
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            if cs.get("name") != container or not cs.get("restartCount") or not last:
                continue
            detail = f"{last.get('reason') or 'terminated'} (exit {last.get('exitCode')})"
            if last.get("reason") == "OOMKilled":
                causes.append({"cause": "oom_killed", "detail": detail + ": over its memory limit", "count": None})
            elif not any(c["cause"] == "probe_kill" for c in causes):
                causes.append({"cause": "exit", "detail": detail, "count": None})
    return causes


def created_at(obj: dict[str, Any]) -> float | None:
    """When DayOne created an object: its annotation, else the API server's timestamp."""
    meta = obj.get("metadata") or {}
    return parse_time((meta.get("annotations") or {}).get(ANNOTATION_CREATED)) or parse_time(meta.get("creationTimestamp"))


def newest_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: parse_time(p["metadata"].get("creationTimestamp")) or 0.0, default=None)

"""Judging a rollout from API objects: what waits, what is available, what never heals."""

from __future__ import annotations

import pytest

from tasks.k8s.rollout import assess, created_at, describe_events, pods_to_explain, restart_total, rollout_platform
from tasks.engines.readiness import UP, Platform

NOW = 1_800_000_000.0


def deployment(status=None, generation=1):
    return {"metadata": {"name": "d", "generation": generation}, "spec": {"replicas": 1}, "status": status or {}}


def pod(name="p", phase="Pending", statuses=(), conditions=()):
    return {"metadata": {"name": name, "creationTimestamp": "2027-01-15T08:00:00Z"},
            "status": {"phase": phase, "containerStatuses": list(statuses), "conditions": list(conditions)}}


def waiting(reason, restarts=0):
    return {"name": "engine", "restartCount": restarts, "state": {"waiting": {"reason": reason}}}


def test_available_only_when_the_controller_saw_the_current_generation():
    ready = {"observedGeneration": 1, "availableReplicas": 1, "readyReplicas": 1}
    assert assess(deployment(ready), [pod(phase="Running")], NOW).available
    assert assess(deployment(ready, generation=2), [pod(phase="Running")], NOW).phase == "waiting"


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CrashLoopBackOff",
                                    "CreateContainerConfigError"])
def test_states_that_never_heal_fail(reason):
    state = assess(deployment(), [pod(statuses=[waiting(reason)])], NOW)
    assert state.failed and reason in state.reason and state.pod == "p"


def test_loading_weights_is_waiting_not_failing():
    state = assess(deployment(), [pod(phase="Running", statuses=[{"name": "engine", "restartCount": 0,
                                                                   "state": {"running": {}}}])], NOW)
    assert state.phase == "waiting" and state.reason == "0/1 replicas ready"
    assert assess(deployment(), [pod(statuses=[waiting("ContainerCreating")])], NOW).phase == "waiting"


def test_progress_deadline_and_failed_pods_fail():
    exceeded = {"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                "message": "ReplicaSet has timed out progressing."}]}
    assert "progress deadline" in assess(deployment(exceeded), [pod()], NOW).reason
    assert assess(deployment(), [pod(phase="Failed")], NOW).failed
    assert "does not exist" in assess(None, [], NOW).reason


# ---- the platform check: what both API readers call ------------------------------------------------
PULL_EVENTS = [
    {"type": "Normal", "reason": "Scheduled", "message": "assigned", "lastTimestamp": "2027-01-15T08:00:00Z"},
    {"type": "Warning", "reason": "Failed", "message": "manifest unknown", "lastTimestamp": "2027-01-15T08:00:02Z"},
]


def test_platform_failed_for_good_quotes_the_failing_pods_events():
    pods = [pod("p", statuses=[waiting("ImagePullBackOff")])]
    assert pods_to_explain(deployment(), pods, NOW) == ["p"]
    state = rollout_platform(deployment(), pods, {"p": PULL_EVENTS}, NOW)
    assert state.failed == ("pod p container engine: ImagePullBackOff: the image cannot be pulled. "
                            "Events: Warning Failed: manifest unknown; Normal Scheduled: assigned")
    assert state.waiting is None
    assert rollout_platform(deployment(), pods, {}, NOW).failed.endswith("Events: no events")
    gone = rollout_platform(None, [], {}, NOW)
    assert gone == Platform(failed="the Deployment does not exist (deleted, or never created). Events: no pod")


def test_platform_still_coming_says_why_and_reads_no_events():
    running = [pod(phase="Running", statuses=[{"name": "engine", "restartCount": 0, "state": {"running": {}}}])]
    assert pods_to_explain(deployment(), running, NOW) == []
    assert rollout_platform(deployment(), running, {}, NOW) == Platform(waiting="0/1 replicas ready")
    pending = [pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                "message": "0/3 nodes are available", "lastTransitionTime": "2027-01-15T08:00:00Z"}])]
    assert rollout_platform(deployment(), pending, {}, NOW) == Platform(  # unschedulable since NOW: within its grace
        waiting="pod p not scheduled yet: 0/3 nodes are available")


def test_platform_up_once_the_current_generation_is_available():
    ready = {"observedGeneration": 1, "availableReplicas": 1, "readyReplicas": 1}
    up = [pod(phase="Running")]
    assert pods_to_explain(deployment(ready), up, NOW) == []
    assert rollout_platform(deployment(ready), up, {}, NOW) == UP


def test_restart_total_counts_only_the_engine_container():
    pods = [pod(statuses=[waiting("x", 2), {"name": "sidecar", "restartCount": 5}]), pod("q", statuses=[waiting("x", 1)])]
    assert restart_total(pods) == 3
    assert restart_total([]) is None


def test_events_list_warnings_first_newest_first():
    events = [
        {"type": "Normal", "reason": "Pulling", "message": "Pulling image", "lastTimestamp": "2027-01-15T08:00:03Z"},
        {"type": "Warning", "reason": "Failed", "message": "old", "lastTimestamp": "2027-01-15T08:00:01Z"},
        {"type": "Warning", "reason": "BackOff", "message": "new", "lastTimestamp": "2027-01-15T08:00:05Z", "count": 4},
    ]
    assert describe_events(events) == "Warning BackOff: new (x4); Warning Failed: old; Normal Pulling: Pulling image"
    assert describe_events([]) == "no events"


def test_created_at_prefers_the_annotation():
    obj = {"metadata": {"annotations": {"dayone/created-at": "2027-01-15T08:00:00Z"},
                        "creationTimestamp": "2027-01-15T09:00:00Z"}}
    assert created_at(obj) == created_at({"metadata": {"creationTimestamp": "2027-01-15T08:00:00Z"}})

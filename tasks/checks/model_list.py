"""The model list names the served model."""

from __future__ import annotations

from tasks.checks.base import FAIL, PASS, CheckResult, Probe, evidence, request_failed

NAME = "model_list"


def run(probe: Probe) -> CheckResult:
    path = probe.endpoint.adapter.models_path
    r = probe.get(path)
    if not r.ok:
        return request_failed(NAME, r, "data[].id")
    data = r.body.get("data") if isinstance(r.body, dict) else None
    if not isinstance(data, list):
        return CheckResult(NAME, FAIL, evidence(r.status, "data", r.body_excerpt, f"GET {path}: no data list"))
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    model = probe.endpoint.model
    if model not in ids:
        return CheckResult(NAME, FAIL, evidence(r.status, "data[].id", ids, f"{model!r} is not listed"))
    return CheckResult(NAME, PASS, evidence(r.status, "data[].id", ids, f"{model!r} is listed"))

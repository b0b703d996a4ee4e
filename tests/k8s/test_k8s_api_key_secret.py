"""An engine's API key read from a Kubernetes Secret through the run's cluster connection (the provider's
KubernetesHook against a local API server), never from the config; the worker's Role reads that Secret by
its name (tasks/k8s/rbac.py `roles_for`)."""

from __future__ import annotations

import base64

import pytest
from k8s_helpers import CONN_ID, MODEL

from tasks.config import parse_run_config
from tasks.k8s.rbac import roles_for
from tasks.steps.context import RunContext
from tasks.state.storage import RunDir

KEY = "dk-secretKey-7hQ2pX9w"


def _config(**engine):
    return parse_run_config({
        "run_id": "keyed", "target": "kubernetes", "model": {"name": MODEL},
        "engines": [{"name": "vllm", "dialect": "vllm", "image": "example.org/vllm:day1", **engine}],
        "kubernetes": {"namespace": "bench", "conn_id": CONN_ID}})


def _ctx(tmp_path, config):
    from dayone_airflow.connections import cluster_access

    return RunContext(config, RunDir("keyed", root=tmp_path), cluster=cluster_access())


def test_the_key_is_read_from_the_secret_the_engine_names(apiserver, kube_conn, tmp_path):
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "vllm-key", "namespace": "bench"},
                                 "data": {"api-key": base64.b64encode(KEY.encode()).decode()}})
    config = _config(api_key_secret={"name": "vllm-key"})
    apiserver.grant(roles_for(config))
    ctx = _ctx(tmp_path, config)
    access = ctx.endpoint_access("vllm")
    assert access.headers() == {"Authorization": f"Bearer {KEY}"}
    assert any(r["path"] == "/api/v1/namespaces/bench/secrets/vllm-key" for r in apiserver.requests)


def test_a_secret_without_the_key_names_what_is_missing(apiserver, kube_conn, tmp_path):
    apiserver._store("secrets", {"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": "vllm-key", "namespace": "bench"}, "data": {"other": "eA=="}})
    config = _config(api_key_secret={"name": "vllm-key", "key": "token"})
    apiserver.grant(roles_for(config))
    ctx = _ctx(tmp_path, config)
    with pytest.raises(RuntimeError, match="Secret bench/vllm-key has no key 'token'"):
        ctx.endpoint_access("vllm")

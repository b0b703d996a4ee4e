"""An engine behind an API key and an internal CA is measured, on every path, and the key is published nowhere.

Servers written for the test (not the simulator): KeyedServer refuses any request without
`Authorization: Bearer K` (401), as vLLM or SGLang started with `--api-key K` do; an https plain server
presents a certificate signed by a CA made at test time. `dayone bench` takes the key from the
environment variable --api-key-env names and the CA from --ca-bundle; the functional checks (httpx and
the openai SDK) take both from the engine's endpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from keyed_server import KEY, KeyedServer
from plain_server import MODEL, PlainServer
from test_ca import make_ca

from tasks.checks import run_functional
from tasks.config import ConfigError, parse_run_config
from tasks.engines.context import EngineContext, endpoint_for
from tasks.state.storage import RunDir


def EndpointAccess(**given):  # noqa: N802 -- imported where used, so each test stands or falls alone
    from tasks.engines.access import EndpointAccess

    return EndpointAccess(**given)

KEY_ENV = "DAYONE_TEST_ENGINE_KEY"
PUBLISHED = ("requests.csv", "requests.parquet", "rounds.csv", "rounds.parquet", "summary.json")


def _bench(url: str, out: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", "bench", "--endpoint", url, "--dialect", "openai", "--model", MODEL,
         "--scenario", "short", "--concurrency", "4", "--rounds", "1", "--requests-per-round", "16",
         "--input-tokens", "16", "--output-tokens", "8", "--out", str(out), *extra],
        capture_output=True, text=True, timeout=180, env={**__import__("os").environ, **(env or {})})


def test_bench_measures_an_endpoint_that_requires_a_key_and_publishes_neither_key_nor_host(tmp_path):
    with KeyedServer() as server:
        proc = _bench(server.url, tmp_path / "out", "--api-key-env", KEY_ENV, env={KEY_ENV: KEY})
        refused, authorized = list(server.refused), server.authorized
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert refused == [] and authorized >= 16 + 8  # warmup (two waves of 4) and the measured round
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    (level,) = summary["scenarios"]["short"]["levels"]
    assert level["failed_rounds"] == 0 and level["rounds"][0]["requests_ok"] == 16
    port = server.url.rsplit(":", 1)[1]
    assert summary["endpoint"] == f"http://<host>:{port}"  # class 16: the endpoint as typed was 127.0.0.1
    for name in PUBLISHED:
        raw = (tmp_path / "out" / name).read_bytes()
        assert KEY.encode() not in raw and b"127.0.0.1" not in raw, name
    assert KEY not in proc.stdout + proc.stderr


def test_without_the_key_the_endpoint_refuses_every_request(tmp_path):
    with KeyedServer() as server:
        proc = _bench(server.url, tmp_path / "out", "--no-warmup")
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["scenarios"]["short"]["levels"][0]["rounds"][0]["requests_ok"] == 0
    assert "HTTP 401" in (tmp_path / "out" / "requests.csv").read_text()


def test_bench_names_the_variable_when_it_holds_no_key(tmp_path):
    proc = _bench("http://127.0.0.1:9", tmp_path / "out", "--api-key-env", "DAYONE_TEST_UNSET_KEY")
    assert proc.returncode != 0 and "DAYONE_TEST_UNSET_KEY is unset or empty" in proc.stderr


def _ctx(tmp_path: Path, url: str, access: EndpointAccess | None = None) -> EngineContext:
    cfg = parse_run_config({"run_id": "keyed", "model": {"name": MODEL},
                            "engines": [{"name": "eng", "dialect": "openai", "launcher": "external", "endpoint": url}]})
    return EngineContext(cfg, endpoint_for(cfg, "eng", url, "sha256:" + "0" * 64, access),
                       RunDir("keyed", root=tmp_path / url.rsplit(":", 1)[1]))


def _outcomes(rows: list[dict]) -> dict[str, str]:
    return {r["check"]: r["outcome"] for r in rows}


def test_the_functional_checks_send_the_key_on_every_request(tmp_path):
    """httpx probes and the openai SDK alike: every check judges the server as it does an open one."""
    with PlainServer() as open_server:
        expected = _outcomes(run_functional(_ctx(tmp_path, open_server.url)))
    with KeyedServer() as server:
        got = _outcomes(run_functional(_ctx(tmp_path, server.url, EndpointAccess(api_key=KEY))))
        refused = list(server.refused)
    assert refused == []
    assert got == expected and "pass" in got.values()


# ---- TLS behind an internal CA ------------------------------------------------------------------------


class TlsServer(PlainServer):
    def __init__(self, context) -> None:
        super().__init__()
        self.ssl_context = context


def test_bench_measures_an_https_endpoint_with_the_ca_bundle_and_is_refused_without(tmp_path):
    bundle, context = make_ca(tmp_path)
    with TlsServer(context) as server:
        assert server.url.startswith("https://")
        trusted = _bench(server.url, tmp_path / "trusted", "--ca-bundle", str(bundle), "--no-warmup")
        untrusted = _bench(server.url, tmp_path / "untrusted", "--no-warmup")
        unverified = _bench(server.url, tmp_path / "unverified", "--insecure", "--no-warmup")
    assert trusted.returncode == 0, trusted.stderr[-3000:]
    assert unverified.returncode == 0, unverified.stderr[-3000:]
    assert untrusted.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in (tmp_path / "untrusted" / "requests.csv").read_text()


def test_the_functional_checks_trust_the_ca_bundle(tmp_path):
    bundle, context = make_ca(tmp_path)
    with PlainServer() as open_server:
        expected = _outcomes(run_functional(_ctx(tmp_path, open_server.url)))
    with TlsServer(context) as server:
        got = _outcomes(run_functional(_ctx(tmp_path, server.url, EndpointAccess(ca_bundle=str(bundle)))))
    assert got == expected


# ---- the config never holds a key -------------------------------------------------------------------


@pytest.mark.parametrize("engine, field", [
    ({"api_key": KEY}, "engines[0].api_key"),
    ({"token": KEY}, "engines[0].token"),
    ({"args": ["--api-key", KEY]}, "engines[0].args[0]"),
    ({"args": [f"--api-key={KEY}"]}, "engines[0].args[0]"),
])
def test_a_key_given_inline_is_refused_at_parse_time_naming_its_field(engine, field):
    with pytest.raises(ConfigError) as err:
        parse_run_config({"engines": [{"name": "eng", "dialect": "vllm", **engine}]})
    path, _, fix = err.value.problems[0]
    assert path == field and "api_key_connection" in fix and KEY not in str(err.value)


def test_the_key_is_read_from_the_connection_the_engine_names(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_ENGINE_KEY", json.dumps({"conn_type": "generic", "password": KEY}))
    cfg = parse_run_config({"engines": [{"name": "eng", "dialect": "vllm", "api_key_connection": "engine_key"}]})
    ep = endpoint_for(cfg, "eng", "http://127.0.0.1:9", "sha256:" + "0" * 64)
    assert ep.access.headers() == {"Authorization": f"Bearer {KEY}"}
    assert KEY not in repr(ep) and KEY not in json.dumps(cfg.model_dump(mode="json"))


def test_a_key_read_by_this_process_is_scrubbed_from_published_tables_whatever_its_shape():
    from tasks.state.tables import to_csv_bytes, to_frame

    EndpointAccess(api_key=KEY)
    row = {"run_id": "r", "engine": "e", "scenario": "short", "round": 1, "concurrency": 1, "request_id": "q",
           "first_encounter": False, "send_ts": 1.0, "status": "error", "itl_s": None, "tokens_per_event": None,
           "error": f"HTTP 500: upstream rejected the credential {KEY} (expired)"}
    assert KEY.encode() not in to_csv_bytes(to_frame("requests", [row]))


def test_dayone_check_sends_the_key_from_the_variable_it_names(tmp_path):
    with KeyedServer() as server:
        proc = subprocess.run(
            [sys.executable, "-m", "tasks.cli", "check", "--endpoint", server.url, "--dialect", "openai",
             "--model", MODEL, "--api-key-env", KEY_ENV, "--out", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=180, env={**__import__("os").environ, KEY_ENV: KEY})
        refused = list(server.refused)
    assert refused == [], (refused[:5], proc.stderr[-2000:])
    assert "pass" in (tmp_path / "out" / "checks.csv").read_text()
    assert KEY.encode() not in (tmp_path / "out" / "checks.csv").read_bytes()


def test_bench_summary_publishes_the_endpoint_without_its_host(tmp_path):
    """summary.json is published: the endpoint as typed (an in-cluster name, a node's IP) is scrubbed like
    every other published field, keeping scheme, port and path."""
    with PlainServer() as server:
        url = server.url.replace("127.0.0.1", "localhost") + "/"
        proc = _bench(url, tmp_path / "out", "--no-warmup")
    assert proc.returncode == 0, proc.stderr[-2000:]
    raw = (tmp_path / "out" / "summary.json").read_text()
    assert json.loads(raw)["endpoint"] == f"http://<host>:{url.rsplit(':', 1)[1]}"
    assert "localhost" not in raw and "127.0.0.1" not in raw

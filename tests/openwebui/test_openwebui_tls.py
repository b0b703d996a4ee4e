"""OpenWebUI gets the engine's TLS trust, as every other DayOne path to the engine does (the engine's
tls_ca_bundle and tls_verify, tasks/engines/access.py): an https engine whose certificate an internal CA
signed (a plain server written for the test, tests/independent/, with a CA made at test time) is listed
and answers through the real OpenWebUI when the engine's config names that CA. Without it OpenWebUI cannot
verify the engine, lists no model, and the step would blame the engine."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "independent"))
from plain_server import MODEL, PlainServer  # noqa: E402
from test_ca import make_ca  # noqa: E402

from tasks.config import parse_run_config  # noqa: E402
from tasks.engines.access import EndpointAccess  # noqa: E402
from tasks.engines.context import endpoint_for  # noqa: E402


def test_openwebui_reaches_an_https_engine_through_the_engines_internal_ca(tmp_path):
    from tasks.openwebui.checks import CHAT, MODEL_LIST, check_endpoint
    from tasks.openwebui.server import venv_path

    bundle, served = make_ca(tmp_path)
    server = PlainServer()
    server.ssl_context = served
    with server:
        assert server.url.startswith("https://")
        config = parse_run_config({"model": {"name": MODEL}, "engines": [
            {"name": "plain", "dialect": "openai", "launcher": "external", "endpoint": server.url,
             "tls_ca_bundle": str(bundle)}]})
        spec = config.engine("plain")
        endpoint = endpoint_for(config, "plain", server.url, "sha256:" + "0" * 64,
                                EndpointAccess(ca_bundle=spec.tls_ca_bundle, verify=spec.tls_verify))
        results, _ = check_endpoint(endpoint, venv_path(), tmp_path / "openwebui", None)
        asked = [r["kind"] for r in server.requests]
    verdicts = {r.check: (r.outcome, r.evidence.get("reason")) for r in results}
    assert verdicts[MODEL_LIST][0] == "pass", verdicts
    assert verdicts[CHAT][0] == "pass", verdicts
    assert asked.count("chat") >= 2  # both turns reached the engine over TLS


def test_an_engine_whose_certificate_is_not_checked_is_not_checked_by_openwebui_either(tmp_path):
    from tasks.config.openwebui import tls_settings
    from tasks.openwebui.server import offline_env

    unchecked = offline_env(tmp_path, "https://engine:8000/v1", None, "k", verify=False)
    assert unchecked["AIOHTTP_CLIENT_SESSION_SSL"] == "False"
    assert "AIOHTTP_CLIENT_SESSION_SSL" not in offline_env(tmp_path, "http://engine:8000/v1", None, "k")
    assert tls_settings("/etc/dayone/ca.pem", True) == {"AIOHTTP_CLIENT_SESSION_SSL": "/etc/dayone/ca.pem"}

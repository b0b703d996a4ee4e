"""Which weights a run served: the model revision as configured, and what the engine reported.

`model.revision` defaults to `main`, a branch: the weights behind it move, so two runs under one
manifest may serve different models. A Hugging Face commit is 40 hex digits; anything else (a branch,
a tag) is moving. Once the engine is up its adapter asks what it serves (`served_model`): vLLM and
SGLang report the revision they were started with and the model path, and a path into a Hugging Face
snapshot (`.../snapshots/<commit>/`) names the commit served; a local llama.cpp engine's identity holds
the sha256 of its weights file. The record (`revision_identity`) goes to revisions/<engine>.json, the
manifest's `served_revision`, summary.json and the report, and is what the nightly's lineage reads.
"""

from __future__ import annotations

import re
from typing import Any

from tasks.state.documents import served_revision_doc

COMMIT = re.compile(r"^[0-9a-f]{40}$")
SNAPSHOT = re.compile(r"snapshots/([0-9a-f]{40})(?:/|$)")
QUERY_TIMEOUT_S = 10.0


def is_commit(revision: str | None) -> bool:
    return bool(revision) and bool(COMMIT.match(str(revision)))


def _configured(config: Any) -> str | None:
    """model.revision of a RunConfig or of its JSON (an archived manifest's `config`)."""
    model = config.get("model") if isinstance(config, dict) else getattr(config, "model", None)
    revision = model.get("revision") if isinstance(model, dict) else getattr(model, "revision", None)
    return None if revision is None else str(revision)


def revision_identity(config: Any, served: dict[str, Any] | None) -> dict[str, Any]:
    """The revision a run's engine served, for the manifest and the nightly's lineage:
    `configured` (model.revision), `moving` (it is no commit), `served` (the commit, or sha256:... of the
    weights, the engine or target reported; None when none did), `served_source`, `reported_revision`
    (the revision the engine says it was started with), and `identity`: what two runs must share to
    have served the same weights (`served`, else a configured commit, else None: unknown)."""
    served = served or {}
    configured = _configured(config)
    reported = served.get("revision")
    snapshot = SNAPSHOT.search(str(served.get("model_path") or ""))
    if is_commit(reported):
        commit, source = str(reported), "the engine's reported revision"
    elif snapshot:
        commit, source = snapshot.group(1), "the engine's model path (a Hugging Face snapshot)"
    elif served.get("weights_sha256"):
        commit, source = f"sha256:{served['weights_sha256']}", "the sha256 of the weights file"
    else:
        commit, source = None, None
    return {
        "configured": configured,
        "moving": not is_commit(configured),
        "served": commit,
        "served_source": source,
        "reported_revision": None if reported is None else str(reported),
        "asked": list(served.get("source") or []),
        "identity": commit or (configured if is_commit(configured) else None),
    }


def moving_text(name: str, rec: dict[str, Any]) -> str | None:
    """The report's words for a moving revision; None when the revision is pinned."""
    if not rec.get("moving"):
        return None
    if rec.get("served"):
        return (f"{name}: model revision `{rec['configured']}` is a moving name; it served {rec['served']} "
                f"(from {rec['served_source']}), another run may serve other weights")
    return (f"{name}: model revision `{rec['configured']}` is a moving name and the engine did not report the "
            "commit it served: another run under the same config may serve other weights")


def record_served_revision(ctx: Any, engine: str) -> dict[str, Any]:
    """Ask the ready engine what it serves and record its `revision_identity` (the startup step)."""
    ectx = ctx.engine(engine)
    ep = ectx.endpoint
    with ep.http_client(QUERY_TIMEOUT_S) as client:  # the engine's API key and TLS trust
        served = ep.adapter.served_model(client, ep.base_url, ctx.config.model.name)
    weights = (ctx.deployment(engine).identity or {}).get("model_sha256")  # a local llama.cpp file's
    if weights:
        served = {**served, "weights_sha256": weights, "source": [*served.get("source", []), "pin identity"]}
    record = revision_identity(ctx.config, served)
    ctx.run_dir.write_json(served_revision_doc(engine), record)
    return record

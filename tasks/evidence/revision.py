"""Which weights a run served: the model revision as configured, and what the engine reported.

`model.revision` defaults to `main`, a branch: the weights behind it move, so two runs under one
manifest may serve different models. A Hugging Face commit is 40 hex digits; anything else (a branch,
a tag) is moving. Once the engine is up its adapter asks what it serves (`served_model`): vLLM and
SGLang report the revision they were started with and the model path, and a path into a Hugging Face
snapshot (`.../snapshots/<commit>/`) names the commit served; a local llama.cpp engine's identity holds
the sha256 of its weights file. The record (`revision_identity`) goes to revisions/<engine>.json, the
manifest's `served_revision`, summary.json and the report, and is what the nightly's lineage reads.

Before deploy the pin step resolves a moving revision to its commit where the model's source can say it
(`resolve_revision`: a commit as given, a snapshot path, a hub's API, a local cache's refs), and every engine
is started with that commit (`served_config`); where it cannot, the run's header says why. After readiness the
engines' served identities are held against each other (`weights_pairs`): engines that served different
weights are not compared on answers or log-likelihood, unless the config declares the difference
(`engines[].weights_variant`, e.g. a quantized variant as an experiment factor).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tasks.state.documents import MODEL_REVISION, served_revision_doc

COMMIT = re.compile(r"^[0-9a-f]{40}$")
SNAPSHOT = re.compile(r"snapshots/([0-9a-f]{40})(?:/|$)")
QUERY_TIMEOUT_S = 10.0
# The files that make two snapshots serve alike beside the weights: the model's config and its tokenizer.
IDENTITY_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "tokenizer.model", "special_tokens_map.json", "vocab.json", "merges.txt")


def is_commit(revision: str | None) -> bool:
    return bool(revision) and bool(COMMIT.match(str(revision)))


def _configured(config: Any) -> str | None:
    """model.revision of a RunConfig or of its JSON (an archived manifest's `config`)."""
    model = config.get("model") if isinstance(config, dict) else getattr(config, "model", None)
    revision = model.get("revision") if isinstance(model, dict) else getattr(model, "revision", None)
    return None if revision is None else str(revision)


def revision_identity(config: Any, served: dict[str, Any] | None, resolved: str | None = None) -> dict[str, Any]:
    """The revision a run's engine served, for the manifest and the nightly's lineage:
    `configured` (model.revision), `moving` (it is no commit), `resolved` (the commit the pin step resolved a
    moving revision to, and started the engine with), `served` (the commit, or sha256:... of the weights, the
    engine or target reported; None when none did), `served_source`, `reported_revision` (the revision the
    engine says it was started with), and `identity`: what two runs must share to have served the same
    weights (`served`, else the resolved commit, else a configured commit, else None: unknown)."""
    served = served or {}
    configured = _configured(config)
    resolved = resolved if is_commit(resolved) else None
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
        "resolved": resolved,
        "identity": commit or resolved or (configured if is_commit(configured) else None),
        "model_path": None if served.get("model_path") is None else str(served["model_path"]),
        "files_sha256": served.get("files_sha256"),
        "files_hashed": list(served.get("files_hashed") or []),
    }


def moving_text(name: str, rec: dict[str, Any]) -> str | None:
    """The report's words for a moving revision; None when the revision is pinned."""
    if not rec.get("moving"):
        return None
    if rec.get("served"):
        return (f"{name}: model revision `{rec['configured']}` is a moving name; it served {rec['served']} "
                f"(from {rec['served_source']}), another run may serve other weights")
    if rec.get("resolved"):
        return (f"{name}: model revision `{rec['configured']}` is a moving name, resolved to {rec['resolved']} before "
                "deploy and started with it (the engine did not report what it served)")
    return (f"{name}: model revision `{rec['configured']}` is a moving name and the engine did not report the "
            "commit it served: another run under the same config may serve other weights")


def record_served_revision(ctx: Any, engine: str) -> dict[str, Any]:
    """Ask the ready engine what it serves and record its `revision_identity` (the startup step); on a local
    target, whose model path is on this machine, with the hash of its config and tokenizer files."""
    ectx = ctx.engine(engine)
    ep = ectx.endpoint
    with ep.http_client(QUERY_TIMEOUT_S) as client:  # the engine's API key and TLS trust
        served = ep.adapter.served_model(client, ep.base_url, ctx.config.model.name)
    weights = (ctx.deployment(engine).identity or {}).get("model_sha256")  # a local llama.cpp file's
    if weights:
        served = {**served, "weights_sha256": weights, "source": [*served.get("source", []), "pin identity"]}
    if ctx.config.target == "local" and served.get("model_path"):  # a pod's path is not this machine's
        served = {**served, **files_sha256(str(served["model_path"]))}
    record = revision_identity(ctx.config, served, (ctx.run_dir.read_json(MODEL_REVISION) or {}).get("commit"))
    ctx.run_dir.write_json(served_revision_doc(engine), record)
    return record


def files_sha256(path: str) -> dict[str, Any]:
    """{files_sha256, files_hashed}: one sha256 over the model directory's config and tokenizer files (each
    file's name and bytes, in name order); {} where the path is no directory here or holds none of them."""
    folder = Path(path)
    try:
        found = sorted(name for name in IDENTITY_FILES if (folder / name).is_file())
    except OSError:
        return {}
    if not found:
        return {}
    digest = hashlib.sha256()
    for name in found:
        digest.update(name.encode() + b"\0" + hashlib.sha256((folder / name).read_bytes()).digest())
    return {"files_sha256": "sha256:" + digest.hexdigest(), "files_hashed": found}


# ---- a moving revision resolved to its commit before deploy ----------------------------------------


def resolve_revision(model: Any, transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    """model.revision as a commit, where the model's source can say it: {configured, commit, source, why}
    (commit None and `why` when it cannot). A commit needs nothing; a model path through snapshots/<commit>
    pins it; else model.revision_source: a hub's API (GET /api/models/REPO/revision/REV, its `sha`) or a
    local Hugging Face cache (models--ORG--NAME/refs/REV holds the commit)."""
    configured = str(model.revision)
    out: dict[str, Any] = {"configured": configured, "commit": None, "source": None, "why": None}
    if is_commit(configured):
        return {**out, "commit": configured, "source": "model.revision is a commit"}
    pinned = SNAPSHOT.search(str(model.path or ""))
    if pinned:
        return {**out, "commit": pinned.group(1), "source": "model.path names a snapshot"}
    source, repo = model.revision_source, model.repo_id or model.name
    if not source:
        return {**out, "why": f"model.revision `{configured}` is a moving name and nothing says its commit (give "
                              "model.revision_source, a hub URL or a local Hugging Face cache, or a commit)"}
    if re.match(r"https?://", source):
        commit, why = _from_hub(source, repo, configured, transport)
        where = f"the hub API at {source} for {repo}"
    else:
        commit, why = _from_cache(Path(source), repo, configured)
        where = f"the refs of the local cache {source} for {repo}"
    if commit is None:
        return {**out, "why": f"model.revision `{configured}` could not be resolved from {where}: {why}"}
    return {**out, "commit": commit, "source": where}


def _from_hub(base: str, repo: str, revision: str,
              transport: httpx.BaseTransport | None) -> tuple[str | None, str | None]:
    url = f"{base.rstrip('/')}/api/models/{repo}/revision/{quote(revision, safe='')}"
    try:
        with httpx.Client(timeout=QUERY_TIMEOUT_S, transport=transport, follow_redirects=True) as client:
            r = client.get(url)
    except httpx.HTTPError as exc:
        return None, f"unreachable ({type(exc).__name__})"
    if r.status_code != 200:
        return None, f"HTTP {r.status_code} (a private or gated repository answers 401)"
    try:
        sha = r.json().get("sha")
    except (ValueError, AttributeError):
        sha = None
    return (str(sha), None) if is_commit(sha) else (None, "its answer names no commit (`sha`)")


def _from_cache(cache: Path, repo: str, revision: str) -> tuple[str | None, str | None]:
    for folder in (cache / f"models--{repo.replace('/', '--')}", cache):  # a cache root, or the repo's own folder
        ref = folder / "refs" / revision
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        return (commit, None) if is_commit(commit) else (None, f"{ref} holds no commit")
    return None, f"no refs/{revision} there"


def record_resolved_revision(ctx: Any) -> dict[str, Any]:
    """Resolve model.revision and keep it for every later step (the pin step, before anything is deployed)."""
    found = resolve_revision(ctx.config.model)
    ctx.run_dir.write_json(MODEL_REVISION, found)
    return found


def served_config(config: Any, run_dir: Any) -> Any:
    """The run config as the engines are started with it: model.revision the commit it was resolved to."""
    commit = (run_dir.read_json(MODEL_REVISION) or {}).get("commit")
    if not commit or commit == config.model.revision:
        return config
    return config.model_copy(update={"model": config.model.model_copy(update={"revision": commit})})


# ---- did two engines serve the same weights ----------------------------------------------------------


def weights_pairs(records: dict[str, dict[str, Any] | None],
                  variants: dict[str, str | None]) -> list[dict[str, Any]]:
    """Each pair of engines' served identities held against each other: {a, b, verdict, text}. `differ` where a
    commit or the config and tokenizer files' hash both reported differ (their answers and log-likelihood are
    then not compared); `declared` where the config names a weights variant on either (compared, the
    difference the variant's); `same` where what both reported agrees; `unknown` where neither says enough."""
    names = [n for n in records if records[n] is not None]
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            verdict, facts = _held(a, records[a] or {}, b, records[b] or {})
            va, vb = variants.get(a), variants.get(b)
            if va != vb:
                verdict, text = "declared", (
                    f"different weights by design: {a} serves {_variant(va)}, {b} {_variant(vb)} (engines[]."
                    f"weights_variant), so their answers and log-likelihood are compared and a difference is the "
                    f"variant's ({facts})")
            elif verdict == "differ":
                text = (f"they served different weights ({facts}): their answers and log-likelihood are not "
                        "compared, since a gap would be the weights', not the engines'")
            elif verdict == "same":
                text = f"both served {facts}"
            else:
                text = f"{facts}: that they served the same weights is unproven"
            out.append({"a": a, "b": b, "verdict": verdict, "text": text})
    return out


def _variant(v: str | None) -> str:
    return f"the {v} variant" if v else "the checkpoint as published"


FIELDS = (("served", "commit"), ("files_sha256", "config and tokenizer files' sha256"))


def _held(a: str, ra: dict[str, Any], b: str, rb: dict[str, Any]) -> tuple[str, str]:
    """(same, differ or unknown; the facts that say so) from what both engines reported."""
    both = [(key, words) for key, words in FIELDS if ra.get(key) and rb.get(key)]
    differ = [f"{words} {ra[key]} against {rb[key]}" for key, words in both if ra[key] != rb[key]]
    if differ:
        return "differ", f"{a} against {b}: {'; '.join(differ)}"
    if both:
        return "same", " and ".join(f"{words} {ra[key]}" for key, words in both)
    unnamed = "a path it did not name"
    paths = f"{a} loaded {ra.get('model_path') or unnamed}, {b} {rb.get('model_path') or unnamed}"
    return "unknown", f"neither a commit nor a hash of the config and tokenizer files was reported by both ({paths})"

"""The run's state: every document a task leaves for a later task, and where it lies in the run.

One place names the layout, so a reader (the report, the verdict, a retry) and a writer never
disagree about a path; the run's storage (tasks/state/storage.py RunDir) holds the bytes, on this
machine or under the run's S3 staging prefix, so a later task finds them from any worker.

    manifest.json                  the plan: config (env values redacted), matrix, pins
    pinned.json                    engine -> identity and image digest
    model_revision.json            model.revision resolved to a commit before deploy (the pin step)
    warmup_matrix.json             the warmup a production deployment should run (the warmup step; archived)
    deployments/<engine>.json      where the engine serves and how to find its process or pods
    k8s/<engine>.json              the Kubernetes objects applied (env values redacted)
    k8s/<engine>.yaml              a dry run's rendered objects
    k8s/<engine>-openwebui.json    OpenWebUI's objects in front of it (the openwebui step on Kubernetes)
    openwebui/pinned.json          OpenWebUI's image digests (the pin step, on Kubernetes)
    openwebui/<engine>/chat.json   the chat OpenWebUI stored (the openwebui step)
    state/<engine>/ready.json      readiness: the scenario steps run only for a ready engine
    state/<engine>/shapes.json     the (input, output, concurrency) shapes already warmed
    state/<engine>/engine.log      a local engine's log as its keeper copies it (tasks/targets/keeper.py),
    state/<engine>/engine-log.json  ... when it copied it last,
    state/<engine>/keeper.json     ... what another node asks of the keeper (a fresh copy, a stop),
    state/<engine>/exited.json     ... and how the engine ended
    logs/<engine>.log              the engine's log as its teardown kept it, scrubbed (archived as engine.log)
    state/steps/<step>.json        each step's outcome (run-level) ...
    state/steps/<engine>-<step>.json   ... or per engine: ok, skipped, failed, not_attempted
    progress/<engine>-<step>.json  a step running or ended, its load so far: for watching the run, never read as
                                   evidence (tasks/state/progress.py)
    summaries/<engine>/<scenario>.json  how a performance scenario measured (design, launches, restarts; its
                                   figures are the rounds table's); the capacity search's result
    verdicts/<engine>/prefix_cache.json the prefix-cache verdict
    tables/<table>/<engine>/...    each step's partitions (tasks/state/partitions.py: a file, or S3 chunks)
    validation.json, archive.json, regressions.json, summary.json, report.html, charts/<name>.png
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from tasks.state.storage import RunDir

MANIFEST = "manifest.json"
PINNED = "pinned.json"
VALIDATION = "validation.json"
ARCHIVED = "archive.json"
REGRESSIONS = "regressions.json"
SUMMARY = "summary.json"
REPORT = "report.html"
MODEL_REVISION = "model_revision.json"  # model.revision resolved to a commit (tasks/evidence/revision.py)
WARMUP_MATRIX = "warmup_matrix.json"  # the production warmup matrix (tasks/scenarios/warmup.py), archived
EVAL_SET = "eval_set.json"  # the user's eval set as the plan read and checked it (tasks/quality/eval_set.py)
OUTCOMES_DIR = "state/steps"
DEPLOYMENTS_DIR = "deployments"


def deployment_doc(engine: str) -> str:
    return f"{DEPLOYMENTS_DIR}/{engine}.json"


def applied_objects_doc(engine: str) -> str:
    return f"k8s/{engine}.json"


def rendered_objects_doc(engine: str) -> str:
    return f"k8s/{engine}.yaml"


def chart_doc(name: str) -> str:
    return f"charts/{name}.png"


def readiness_doc(engine: str) -> str:
    return f"state/{engine}/ready.json"


def warmed_shapes_doc(engine: str) -> str:
    return f"state/{engine}/shapes.json"


def engine_log_doc(engine: str) -> str:
    return f"state/{engine}/engine.log"


def engine_log_copied_doc(engine: str) -> str:
    return f"state/{engine}/engine-log.json"


def kept_log_doc(engine: str) -> str:
    """The engine's whole log as its teardown kept it, scrubbed (tasks/evidence/engine_log.py); archived."""
    return f"logs/{engine}.log"


def keeper_orders_doc(engine: str) -> str:
    return f"state/{engine}/keeper.json"


def engine_exit_doc(engine: str) -> str:
    return f"state/{engine}/exited.json"


def perf_summary_doc(engine: str, scenario: str) -> str:
    return f"summaries/{engine}/{scenario}.json"


def cache_verdict_doc(engine: str) -> str:
    return f"verdicts/{engine}/prefix_cache.json"


def hardware_doc(engine: str) -> str:
    """Where the engine ran (tasks/telemetry/hardware.py), written by its startup step."""
    return f"hardware/{engine}.json"


def served_revision_doc(engine: str) -> str:
    """The model revision the engine served (tasks/evidence/revision.py), written by its startup step."""
    return f"revisions/{engine}.json"


def openwebui_chat_doc(engine: str) -> str:
    """The chat OpenWebUI stored in front of the engine (the openwebui step), archived beside the tables."""
    return f"openwebui/{engine}/chat.json"


OPENWEBUI_PINNED = "openwebui/pinned.json"  # OpenWebUI's image digests on Kubernetes (the pin step)


def openwebui_objects_doc(engine: str) -> str:
    """The OpenWebUI objects applied in front of the engine on Kubernetes (env values redacted, no Secret)."""
    return f"k8s/{engine}-openwebui.json"


def outcome_doc(step: str, engine: str | None) -> str:
    return f"{OUTCOMES_DIR}/{engine}-{step}.json" if engine else f"{OUTCOMES_DIR}/{step}.json"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore")


class EngineReadiness(_Doc):
    """Whether the engine serves; `detail` says what it is doing or why it failed."""

    ready: bool = False
    detail: str = ""
    waited_s: float | None = None


StepStatus = Literal["ok", "skipped", "failed", "not_attempted"]


class StepOutcome(_Doc):
    """How a step ended. `detail` and `trace` are desensitized before they are written."""

    step: str
    engine: str | None = None
    status: StepStatus
    detail: str = ""
    trace: str = ""

    @property
    def where(self) -> str:
        return f"{self.engine or 'run'}/{self.step}"


def set_readiness(run_dir: RunDir, engine: str, ready: bool, detail: str, waited_s: float | None = None) -> None:
    run_dir.write_json(readiness_doc(engine),
                       EngineReadiness(ready=ready, detail=detail, waited_s=waited_s).model_dump())


def readiness(run_dir: RunDir, engine: str) -> EngineReadiness:
    doc = run_dir.read_json(readiness_doc(engine))
    return EngineReadiness.model_validate(doc) if doc else EngineReadiness()


def write_outcome(run_dir: RunDir, outcome: StepOutcome) -> None:
    run_dir.write_json(outcome_doc(outcome.step, outcome.engine), outcome.model_dump(exclude_defaults=False))


def outcomes(run_dir: RunDir) -> list[StepOutcome]:
    """Every recorded step outcome of the run, in path order."""
    found = []
    for name in run_dir.names(OUTCOMES_DIR):
        doc = run_dir.read_json(f"{OUTCOMES_DIR}/{name}") if name.endswith(".json") else None
        if doc:
            found.append(StepOutcome.model_validate(doc))
    return found


def pinned(run_dir: RunDir) -> dict[str, dict]:
    return run_dir.read_json(PINNED, {}) or {}


def manifest(run_dir: RunDir) -> dict | None:
    """The plan's manifest, with each engine's hardware record and served model revision once its
    startup step wrote them (a document per engine: engines start in parallel, so none rewrites the
    shared manifest)."""
    doc = run_dir.read_json(MANIFEST)
    if doc is None:
        return None
    names = [e.get("name") for e in doc.get("engines") or [] if isinstance(e, dict)]
    hardware = {n: h for n in names if (h := run_dir.read_json(hardware_doc(n))) is not None}
    doc = {**doc, "hardware": hardware} if hardware else doc
    # What each engine served of the model (`revision_identity`): the nightly's lineage reads it.
    revisions = {n: r for n in names if (r := run_dir.read_json(served_revision_doc(n))) is not None}
    return {**doc, "served_revision": revisions} if revisions else doc


PROGRESS_DIR = "progress"  # how far a run has got (tasks/state/progress.py): for watching it, never evidence


def progress_doc(step: str, engine: str | None) -> str:
    return f"{PROGRESS_DIR}/{engine}-{step}.json" if engine else f"{PROGRESS_DIR}/{step}.json"


def progress_listed(name: str) -> str:
    """A progress document by the name `RunDir.names(PROGRESS_DIR)` lists."""
    return f"{PROGRESS_DIR}/{name}"

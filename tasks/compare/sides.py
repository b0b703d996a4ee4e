"""The two sides of a nightly comparison: an engine's figures in this run (the run directory) or in an
archived run (the archive's tables and documents), and what makes two runs' figures comparable (the
engine lineage, each scenario's settings). tasks/compare/nightly.py compares them."""

from __future__ import annotations

import io
import json
import logging
import math
import statistics
from typing import TYPE_CHECKING, Any

import pandas as pd

from tasks.state import documents as run_documents
from tasks.publish.archive import model_slug
from tasks.config import RunConfig
from tasks.compare.traffic import CONTENT_COVERS, LOAD_SCENARIOS, TRAFFIC_SETTINGS
from tasks.core.names import CAPACITY_SCENARIO, TRACE_SCENARIO
from tasks.scenarios.capacity import published as published_capacity
from tasks.state.storage import RunDir

if TYPE_CHECKING:
    from tasks.report.schema import RunSummary

log = logging.getLogger("dayone.compare")

HEADLINE_METRICS = ("output_tps", "ttft_p95_s")

# What makes one scenario's figures of two runs comparable: the load it puts on the engine. Rounds
# and requests per round only change how sure a figure is, so they may differ.
SCENARIO_SETTINGS: dict[str, tuple[str, ...]] = {
    "short": ("input_tokens", "output_tokens", "concurrency"),
    "prefill": ("input_tokens", "output_tokens", "concurrency"),
    "decode": ("input_tokens", "output_tokens", "concurrency"),
    "rate": ("input_tokens", "output_tokens", "rates"),
    "long_context": ("output_tokens", "prompt_style"),
    "prefix_cache": ("prompt_tokens", "output_tokens"),
    "capacity": ("mode", "input_tokens", "output_tokens", "target_goodput_share", "start", "max", "step"),
    # the same items, answered alike; an eval set is compared item by item, by content (nightly.py `_shared_items`)
    "quality": ("seed", "items_per_family", "kv_context_tokens", "max_tokens"),
    **TRAFFIC_SETTINGS,
}

Shape = tuple[str, int | None, float | None]  # (scenario, concurrency, rate): exactly one of the two is set


def run_index(s3: Any, cfg: RunConfig) -> list[dict[str, Any]]:
    """All archived runs of the model, newest first."""
    prefix = f"{cfg.archive.prefix}/{model_slug(cfg.model.name)}/_index/"
    docs: list[dict[str, Any]] = []
    try:
        pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=cfg.archive.bucket, Prefix=prefix))
    except Exception as exc:  # noqa: BLE001
        if "NoSuchBucket" in str(exc):
            return []
        raise
    for page in pages:
        for obj in page.get("Contents", []):
            docs.append(json.loads(s3.get_object(Bucket=cfg.archive.bucket, Key=obj["Key"])["Body"].read()))
    return sorted(docs, key=lambda d: d.get("created_ts") or 0, reverse=True)


def _read_table(s3: Any, bucket: str, prefix: str, table: str) -> pd.DataFrame:
    from botocore.exceptions import ClientError

    from tasks.state.tables import to_frame

    try:
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}tables/{table}.parquet")["Body"].read()
    except ClientError:
        return to_frame(table, [])
    return pd.read_parquet(io.BytesIO(body))


def archived_summary(s3: Any, bucket: str, key: str) -> RunSummary | None:
    """The archived summary.json at `key`; None when missing, and None with a warning when it is
    unreadable or of another schema version (a nightly goes on without that run's verdicts)."""
    from botocore.exceptions import ClientError

    from tasks.report.schema import read_summary

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError:
        return None
    try:
        return read_summary(json.loads(body))
    except ValueError as exc:  # not JSON, another schema version, or fields that do not validate
        log.warning("archived %s not read, treated as absent: %s", key, str(exc)[:500])
        return None


class Side:
    """One engine's figures in one run: headline per shape, check/needle outcomes, cache verdict."""

    def __init__(self, run_id: str, rounds: pd.DataFrame, checks: pd.DataFrame, needles: pd.DataFrame,
                 cache_verdict: str | None, ttft_published: bool | None = None,
                 capacity: dict[str, Any] | None = None, quality: pd.DataFrame | None = None,
                 loglik: pd.DataFrame | None = None, left_out: dict[tuple[str, int], str] | None = None):
        self.run_id = run_id
        # (scenario, round) -> why that round is compared with nothing: the client fell behind the trace
        self.left_out = left_out or {}
        self.loglik = loglik if loglik is not None else pd.DataFrame()  # the fixed text's NLL by length, where scored
        self.quality = quality if quality is not None else pd.DataFrame()  # the quality step's verdicts, where it ran
        self.capacity = capacity  # the capacity search's published result (capacity.published), where it ran
        # The run's own verdict on its stream timing, where known (tasks/stats/reliability.py)
        self.ttft_published = ttft_published
        self.rounds = rounds
        self.checks = checks
        self.needles = needles
        self.cache_verdict = cache_verdict
        self._shapes: dict[Shape, list[dict[str, Any]]] | None = None

    def scenarios(self) -> set[str]:
        found = set(self.rounds["scenario"].dropna()) if not self.rounds.empty else set()
        if not self.checks.empty:
            found.add("functional")
        if not self.needles.empty:
            found.add("long_context")
        if self.cache_verdict:
            found.add("prefix_cache")
        if self.capacity is not None:
            found.add("capacity")
        if not self.quality.empty:
            found.add("quality")
        return {str(s) for s in found}

    def steady_rounds(self) -> dict[Shape, list[dict[str, Any]]]:
        """(scenario, concurrency, rate) -> its measured, ok, steady rounds: a first-encounter round (with warmup
        off, a shape's first round on a fresh server; a trace's or dataset's round 1) pays its compilation and is
        left out, as the report's comparison leaves it out."""
        out: dict[Shape, list[dict[str, Any]]] = {}
        for key, rounds in self._by_shape().items():
            ok = [r for r in rounds if r.get("status") == "ok" and not _true(r.get("first_encounter"))
                  and (key[0], _round_number(r)) not in self.left_out]
            if ok:
                out[key] = ok
        return out

    def left_out_of(self, scenario: str) -> list[str]:
        """Why each of the scenario's rounds left out of every comparison is (a trace round the client fell
        behind in), in round order."""
        return [why for (s, _), why in sorted(self.left_out.items()) if s == scenario]

    def shape_rounds(self) -> dict[Shape, dict[str, list[float]]]:
        """(scenario, concurrency, rate) -> each headline metric's values over its steady rounds."""
        return {key: metric_values(rounds) for key, rounds in self.steady_rounds().items()}

    def shape_counts(self) -> dict[Shape, dict[str, int]]:
        """(scenario, concurrency, rate) of a load scenario (LOAD_SCENARIOS) -> its measured rounds' request counts
        (ok, failed) and rounds (all, failed), failed rounds included: failures are what this counts."""
        return {key: {"ok": sum(int(r.get("requests_ok") or 0) for r in rounds),
                      "failed": sum(int(r.get("requests_failed") or 0) for r in rounds),
                      "rounds": len(rounds), "rounds_failed": sum(1 for r in rounds if r.get("status") == "failed")}
                for key, rounds in self._by_shape().items() if key[0] in LOAD_SCENARIOS}

    def _by_shape(self) -> dict[Shape, list[dict[str, Any]]]:
        """Measured (not warmup) rounds by shape, read once: a side is compared as baseline, reference and history."""
        if self._shapes is None:
            self._shapes = {}
            for r in self.rounds.to_dict("records"):
                rate, concurrency = r.get("rate_rps"), r.get("concurrency")
                if r.get("warmup") is True or not (_present(rate) or _present(concurrency)):
                    continue
                # A rate round's level is its rate alone (older archives held its request count in concurrency).
                key = ((str(r["scenario"]), None, float(rate)) if _present(rate)
                       else (str(r["scenario"]), int(concurrency), None))
                self._shapes.setdefault(key, []).append(r)
            self._shapes = dict(sorted(self._shapes.items(),
                                       key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2] or 0)))
        return self._shapes

    def item_verdicts(self) -> dict[tuple[str, ...], tuple[str, bool, bool]]:
        """(item id, prompt digest, expected answer, match rule) -> (family, answered right, unstable) of the
        quality step; a failed request counts as wrong, and an item wrong at first and right when asked again is
        unstable (quality/parity.py). An item is its content, not its name: one whose prompt, answer key or
        rule changed under the same id (an eval set edited in place) is another item."""
        if self.quality.empty:
            return {}
        return {tuple(str(r.get(k)) for k in ("item_id", "prompt_sha256", "expected", "match_rule")):
                (str(r["family"]), _present(r["correct"]) and bool(r["correct"]),
                 _present(r.get("reask_correct")) and bool(r["reask_correct"]) and not (
                     _present(r["correct"]) and bool(r["correct"])))
                for r in self.quality.to_dict("records")}

    def nll_by_length(self) -> dict[int, float]:
        """length -> mean NLL per token (nats) of the lengths scored ok."""
        if self.loglik.empty:
            return {}
        ok = self.loglik[self.loglik["status"] == "ok"]
        return {int(r["length_tokens"]): float(r["mean_nll_nats"]) for _, r in ok.iterrows()
                if _present(r["mean_nll_nats"])}

    def check_outcomes(self) -> dict[str, str]:
        return {str(r["check"]): str(r["outcome"]) for _, r in self.checks.iterrows()}

    def needle_outcomes(self) -> dict[tuple[int, float], bool]:
        """(length, depth) -> passed on every attempt."""
        if self.needles.empty:
            return {}
        return {(int(t), float(d)): bool(g["passed"].fillna(False).all())
                for (t, d), g in self.needles.groupby(["target_tokens", "depth"])}

    def ttft_reliable(self) -> bool:
        from tasks.stats.reliability import ttft_verdict

        if self.ttft_published is not None:
            return self.ttft_published
        rows = [{k: (None if pd.isna(v) else v) if not isinstance(v, (list, dict)) else v for k, v in r.items()}
                for r in self.checks.to_dict("records")]
        for row in rows:
            if isinstance(row.get("evidence"), str):
                try:
                    row["evidence"] = json.loads(row["evidence"])
                except json.JSONDecodeError:
                    pass
        return bool(ttft_verdict(rows)["reliable"])


def _present(value: Any) -> bool:
    return value is not None and value is not pd.NA and not (isinstance(value, float) and math.isnan(value))


def _round_number(r: dict[str, Any]) -> int | None:
    return int(r["round"]) if _present(r.get("round")) else None


def trace_left_out(rounds: list[dict[str, Any]], limit_s: float | None) -> dict[tuple[str, int], str]:
    """(trace, round) -> why: the trace's rounds whose send lateness p99 exceeded the run's limit (`behind`)."""
    from tasks.scenarios.trace import left_out_reason

    return {(TRACE_SCENARIO, int(r["round"])): left_out_reason(int(r["round"]), float(r["lateness_p99_s"]),
                                                                float(limit_s or 0.0))
            for r in rounds if r.get("behind") and r.get("lateness_p99_s") is not None}


def _true(value: Any) -> bool:
    return _present(value) and bool(value)


def metric_values(rounds: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each headline metric's values over `rounds`."""
    return {m: [float(r[m]) for r in rounds if _present(r.get(m))] for m in HEADLINE_METRICS}


def alike_rounds(was: list[dict[str, Any]], now: list[dict[str, Any]]) -> tuple[list, list] | None:
    """The rounds of two runs' shape that met the engine alike: a dataset round records whether the engine emptied
    its prefix cache before it (`cache_cleared`); where both runs recorded it, only rounds of one state are held
    against each other (an emptied cache first), and None where they share none (rows served from cache tonight
    against rows computed then). Where either did not record it (another scenario, an older archive), all."""
    def state(r: dict[str, Any]) -> bool | None:
        return bool(r["cache_cleared"]) if _present(r.get("cache_cleared")) else None

    held_was, held_now = {state(r) for r in was}, {state(r) for r in now}
    if None in held_was or None in held_now:
        return was, now
    common = held_was & held_now
    if not common:
        return None
    pick = True if True in common else next(iter(common))
    return [r for r in was if state(r) == pick], [r for r in now if state(r) == pick]


def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def current_side(run_dir: RunDir, engine: str, cfg: RunConfig) -> Side:
    from tasks.evidence.cache import published_verdict
    from tasks.stats.reliability import engine_ttft_verdict

    stream = engine_ttft_verdict(run_dir, engine)
    verdict = published_verdict(run_dir.read_json(run_documents.cache_verdict_doc(engine)) or {}, stream)
    searched = run_dir.read_json(run_documents.perf_summary_doc(engine, CAPACITY_SCENARIO))
    capacity = None if searched is None else published_capacity(searched, bool(stream["reliable"]), cfg.slo)
    trace = run_dir.read_json(run_documents.perf_summary_doc(engine, TRACE_SCENARIO)) or {}
    return Side(run_dir.run_id, run_dir.frame("rounds", engine), run_dir.frame("checks", engine),
                run_dir.frame("needles", engine), verdict.get("verdict"), bool(stream["reliable"]), capacity,
                run_dir.frame("quality", engine), run_dir.frame("loglik", engine),
                trace_left_out(trace.get("rounds") or [], trace.get("lateness_p99_max_s")))


def archived_side(s3: Any, cfg: RunConfig, index: dict[str, Any], engine: str) -> Side:
    bucket, prefix = cfg.archive.bucket, index["prefixes"][engine]
    summary = archived_summary(s3, bucket, prefix + run_documents.SUMMARY)
    mine = None if summary is None else summary.engines.get(engine)
    cache = None if mine is None or mine.prefix_cache is None else mine.prefix_cache.verdict
    published = None if mine is None else mine.ttft.reliable
    capacity = None if mine is None or mine.capacity is None else mine.capacity.model_dump(mode="json")
    trace = None if mine is None or mine.trace is None else mine.trace
    left_out = {} if trace is None else trace_left_out([r.model_dump(mode="json") for r in trace.rounds],
                                                       trace.lateness_p99_max_s)
    return Side(index["run_id"], _read_table(s3, bucket, prefix, "rounds"), _read_table(s3, bucket, prefix, "checks"),
                _read_table(s3, bucket, prefix, "needles"), cache, published, capacity,
                _read_table(s3, bucket, prefix, "quality"), _read_table(s3, bucket, prefix, "loglik"), left_out)


def archived_manifest(s3: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    """An archived run's manifest.json (desensitized); None when absent or unreadable."""
    from botocore.exceptions import ClientError

    try:
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=prefix + run_documents.MANIFEST)["Body"].read())
    except (ClientError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def archived_config(s3: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    """The run config recorded in an archived run's manifest.json (desensitized); None when absent."""
    config = (archived_manifest(s3, bucket, prefix) or {}).get("config")
    return config if isinstance(config, dict) else None


def image_repository(image: str | None) -> str | None:
    """`registry/name` of an image reference, without its tag or digest (Docker Hub's short names
    spelled out; a reference whose host the desensitizer replaced is cut as written)."""
    from tasks.k8s.images import RegistryError, parse_image

    if not image:
        return None
    try:
        return parse_image(image).name
    except RegistryError:
        pass
    head, _, last = image.split("@", 1)[0].rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name


def engine_lineage(config: dict[str, Any], engine: str) -> dict[str, Any]:
    """What a baseline's engine of this name must share with this run's: target and dialect, the image
    repository on a cluster or the launcher locally (a new tag or digest is what is compared), and what
    changes the engine's figures by design: its args (speculative decoding, ...), environment, llama.cpp
    settings, GPU count and tensor parallelism, the model revision and weights variant, and on a cluster where the client runs
    (kubernetes.measure_from: the path to the engine enters TTFT). A setting an older archive did not record
    reads as its default. (The GPU product, from the hardware record: `gpu_product`.)"""
    spec = next((e for e in config.get("engines") or [] if e.get("name") == engine), None)
    if spec is None:
        return {"engine": None}
    target = config.get("target")
    lineage = {"target": target, "dialect": spec.get("dialect")}
    if target == "local":
        lineage["launcher"] = spec.get("launcher")
    else:
        lineage["image"] = image_repository(spec.get("image"))
    lineage["engine args"] = list(spec.get("args") or [])
    lineage["engine env"] = dict(spec.get("env") or {})
    lineage["llamacpp"] = spec.get("llamacpp")
    if target == "kubernetes":
        lineage["measure_from"] = (config.get("kubernetes") or {}).get("measure_from") or "worker"
    lineage["gpus"] = spec.get("gpus", 1)
    lineage["tensor parallel"] = spec.get("tensor_parallel") or spec.get("gpus", 1)
    lineage["model revision"] = (config.get("model") or {}).get("revision")
    lineage["weights variant"] = spec.get("weights_variant")  # a quantized variant is other weights
    return lineage


def gpu_product(manifest: dict[str, Any] | None, engine: str) -> str | None:
    """The GPU product the engine ran on, from the run's hardware record (None where none was recorded)."""
    record = ((manifest or {}).get("hardware") or {}).get(engine) or {}
    return record.get("gpu_product") or None


def served_weights(manifest: dict[str, Any] | None, engine: str) -> tuple[str | None, bool]:
    """(identity, moving) of the weights the engine served, from the run's served-revision record
    (tasks/evidence/revision.py): the identity is None where neither the engine nor the config named a
    commit or a weights hash; moving where model.revision is a branch or tag, not a commit."""
    record = ((manifest or {}).get("served_revision") or {}).get(engine) or {}
    return record.get("identity") or None, bool(record.get("moving"))


def traffic_content(manifest: dict[str, Any] | None) -> dict[str, str]:
    """scenario -> the sha256 of the traffic the plan read (a trace's window, a dataset's rows), where recorded."""
    return {s: doc["content_sha256"] for s in CONTENT_COVERS
            if isinstance(doc := (manifest or {}).get(s), dict) and doc.get("content_sha256")}


def scenario_settings(config: dict[str, Any], scenario: str, content: str | None = None) -> dict[str, Any]:
    """What the scenario's figures of two runs must share; with `content` (the traffic's hash, given where both
    runs recorded one) the hash stands for where the traffic was read from and what it held: the same file
    moved compares, new rows under the same name do not."""
    settings = (config.get("scenarios") or {}).get(scenario) or {}
    covered = CONTENT_COVERS.get(scenario, ()) if content else ()
    out = {k: settings.get(k) for k in SCENARIO_SETTINGS.get(scenario, ()) if k not in covered}
    if content:
        out["content sha256"] = content
    if scenario == "capacity":  # a capacity is the load that met the SLO: another SLO, another figure
        out["slo"] = config.get("slo")
    return out


def setting_differences(now: dict[str, Any], then: dict[str, Any]) -> str:
    """'concurrency [1, 4] then, [2] now; ...' for every key that differs; empty when none does."""
    return "; ".join(f"{k} {then.get(k)!r} then, {now.get(k)!r} now"
                     for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k))

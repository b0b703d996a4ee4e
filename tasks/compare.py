"""Regression comparison against the last good run and the accepted reference (the nightly's compare step).

Per comparable baseline (the same engine lineage, `engine_lineage`, and scenario settings,
`SCENARIO_SETTINGS`), each shape's figures are compared as effects with an interval
(tasks/evidence/effects.py, widened by the lineage's history: tasks/evidence/history.py); checks,
needles, cache verdicts and capacity regress on pass -> fail; a quality family's accuracy on a drop
its interval detects; the fixed text's NLL on a rise beyond its tolerance. The rules: PROTOCOL.md section 8, "Regression verdicts". Every comparison is a
row of the `regressions` table; any regressed row makes `compare` raise RegressionFound after the rows
are written, so the table is archived and the task fails.
"""

from __future__ import annotations

import io
import json
import logging
import math
import statistics
from dataclasses import replace
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from tasks import run_documents
from tasks.archive import model_slug
from tasks.config import RunConfig
from tasks.desensitize import desensitize
from tasks.evidence.effects import Effect, effect, widen
from tasks.evidence.history import HISTORY_RUNS, between_run_log_sd
from tasks.compare_traffic import LOAD_SCENARIOS, TRAFFIC_SETTINGS, planned_load
from tasks.scenarios import CAPACITY_SCENARIO
from tasks.scenarios.capacity import order as capacity_order
from tasks.scenarios.capacity import published as published_capacity
from tasks.scenarios.capacity import newcombe
from tasks.run_storage import RunDir

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
    "quality": ("seed", "items_per_family", "kv_context_tokens", "max_tokens", "eval_set"),  # the same items, answered alike
    **TRAFFIC_SETTINGS,
}

Shape = tuple[str, int | None, float | None]  # (scenario, concurrency, rate): exactly one of the two is set
BaselineKind = str  # "last_good" or "reference"


class RegressionFound(RuntimeError):
    """The run regressed against its baseline; the message lists what."""


# ---- reading the archive -------------------------------------------------------------------------


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

    from tasks.tables import to_frame

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
                 loglik: pd.DataFrame | None = None):
        self.run_id = run_id
        self.loglik = loglik if loglik is not None else pd.DataFrame()  # the fixed text's NLL by length, where scored
        self.quality = quality if quality is not None else pd.DataFrame()  # the quality step's verdicts, where it ran
        self.capacity = capacity  # the capacity search's published result (capacity.published), where it ran
        # The run's own verdict on its stream timing, where known (tasks/evidence/reliability.py)
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

    def shape_rounds(self) -> dict[Shape, dict[str, list[float]]]:
        """(scenario, concurrency, rate) -> each headline metric's values over measured, ok rounds."""
        out: dict[Shape, dict[str, list[float]]] = {}
        for key, rounds in self._by_shape().items():
            ok = [r for r in rounds if r.get("status") == "ok"]
            if ok:
                out[key] = {m: [float(r[m]) for r in ok if _present(r.get(m))] for m in HEADLINE_METRICS}
        return out

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

    def family_counts(self) -> dict[str, tuple[int, int]]:
        """family -> (correct, items) of the quality step; a failed request counts as wrong."""
        if self.quality.empty:
            return {}
        return {str(f): (int(g["correct"].fillna(False).astype(bool).sum()), len(g))
                for f, g in self.quality.groupby("family")}

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
        from tasks.evidence.reliability import ttft_verdict

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


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def current_side(run_dir: RunDir, engine: str, cfg: RunConfig) -> Side:
    from tasks.evidence.cache import published_verdict
    from tasks.evidence.reliability import engine_ttft_verdict

    stream = engine_ttft_verdict(run_dir, engine)
    verdict = published_verdict(run_dir.read_json(run_documents.cache_verdict_doc(engine)) or {}, stream)
    searched = run_dir.read_json(run_documents.perf_summary_doc(engine, CAPACITY_SCENARIO))
    capacity = None if searched is None else published_capacity(searched, bool(stream["reliable"]), cfg.slo)
    return Side(run_dir.run_id, run_dir.frame("rounds", engine), run_dir.frame("checks", engine),
                run_dir.frame("needles", engine), verdict.get("verdict"), bool(stream["reliable"]), capacity,
                run_dir.frame("quality", engine), run_dir.frame("loglik", engine))


def archived_side(s3: Any, cfg: RunConfig, index: dict[str, Any], engine: str) -> Side:
    bucket, prefix = cfg.archive.bucket, index["prefixes"][engine]
    summary = archived_summary(s3, bucket, prefix + run_documents.SUMMARY)
    mine = None if summary is None else summary.engines.get(engine)
    cache = None if mine is None or mine.prefix_cache is None else mine.prefix_cache.verdict
    published = None if mine is None else mine.ttft.reliable
    capacity = None if mine is None or mine.capacity is None else mine.capacity.model_dump(mode="json")
    return Side(index["run_id"], _read_table(s3, bucket, prefix, "rounds"), _read_table(s3, bucket, prefix, "checks"),
                _read_table(s3, bucket, prefix, "needles"), cache, published, capacity,
                _read_table(s3, bucket, prefix, "quality"), _read_table(s3, bucket, prefix, "loglik"))


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
    from tasks.registry import RegistryError, parse_image

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
    changes the engine's figures by design: its args (speculative decoding, ...), GPU count and tensor
    parallelism, and the model revision. (The GPU product, from the hardware record: `gpu_product`.)"""
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
    lineage["gpus"] = spec.get("gpus", 1)
    lineage["tensor parallel"] = spec.get("tensor_parallel") or spec.get("gpus", 1)
    lineage["model revision"] = (config.get("model") or {}).get("revision")
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


def scenario_settings(config: dict[str, Any], scenario: str) -> dict[str, Any]:
    settings = (config.get("scenarios") or {}).get(scenario) or {}
    out = {k: settings.get(k) for k in SCENARIO_SETTINGS.get(scenario, ())}
    if scenario == "capacity":  # a capacity is the load that met the SLO: another SLO, another figure
        out["slo"] = config.get("slo")
    return out


def _differences(now: dict[str, Any], then: dict[str, Any]) -> str:
    """'concurrency [1, 4] then, [2] now; ...' for every key that differs; empty when none does."""
    return "; ".join(f"{k} {then.get(k)!r} then, {now.get(k)!r} now"
                     for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k))


# ---- choosing baselines --------------------------------------------------------------------------


def accepted_runs(runs: list[dict[str, Any]], named: tuple[str, ...] = ()) -> set[str]:
    """Run ids a person accepted as a level: named now (the Variable) or recorded by an earlier run."""
    recorded = {str(r) for doc in runs for r in (doc.get("comparison") or {}).get("accepted") or []}
    return recorded | set(named)


def is_good(doc: dict[str, Any], accepted: set[str]) -> bool:
    """Whether an indexed run may be a baseline: not quarantined, and it passed its own comparison, made
    none (a person's run; an archive from before comparisons were recorded), or a person accepted it."""
    if doc.get("quarantined"):
        return False
    comparison = doc.get("comparison")
    return doc.get("run_id") in accepted or comparison is None or bool(comparison.get("passed"))


class Candidates:
    """Earlier archived runs of this engine, read once each (config, hardware, figures) however many
    baselines look at them; `skipped` keeps every line that says why one was not comparable."""

    def __init__(self, s3: Any, cfg: RunConfig, engine: str, manifest: dict[str, Any] | None = None):
        self.s3, self.cfg, self.engine = s3, cfg, engine
        # Archived manifests are desensitized: compare like with like (a registry host may be scrubbed).
        self.now = desensitize(cfg.model_dump(mode="json"))
        self.lineage = engine_lineage(self.now, engine)
        self.gpu = gpu_product(manifest, engine)
        self.weights = served_weights(manifest, engine)
        self.weights_then: dict[str, tuple[str | None, bool]] = {}
        self.skipped: list[str] = []
        self._read: dict[str, tuple[dict[str, Any] | None, Side | None]] = {}

    def _skip(self, line: str) -> None:
        if line not in self.skipped:
            log.info("%s", line)
            self.skipped.append(line)

    def _load(self, doc: dict[str, Any]) -> tuple[dict[str, Any] | None, Side | None]:
        run_id = str(doc.get("run_id"))
        if run_id not in self._read:
            manifest = archived_manifest(self.s3, self.cfg.archive.bucket, doc["prefixes"][self.engine])
            then = (manifest or {}).get("config")
            if not isinstance(then, dict):
                self._skip(f"baseline {run_id} skipped for {self.engine}: its manifest.json records no run config")
                self._read[run_id] = (None, None)
                return self._read[run_id]
            differs = _differences(self.lineage, engine_lineage(then, self.engine))
            gpu_then = gpu_product(manifest, self.engine)
            if self.gpu and gpu_then and self.gpu != gpu_then:  # only where both runs recorded one
                differs = "; ".join(filter(None, (differs, f"gpu product {gpu_then!r} then, {self.gpu!r} now")))
            self.weights_then[run_id] = weights_then = served_weights(manifest, self.engine)
            if self.weights[0] and weights_then[0] and self.weights[0] != weights_then[0]:  # a moving revision moved
                differs = "; ".join(filter(None, (differs, f"served weights {weights_then[0]} then, "
                                                           f"{self.weights[0]} now")))
            if differs:
                self._skip(f"baseline {run_id} skipped for {self.engine}: another engine lineage ({differs})")
                self._read[run_id] = (then, None)
            else:
                self._read[run_id] = (then, archived_side(self.s3, self.cfg, doc, self.engine))
        return self._read[run_id]

    def caveats(self, used: set[str]) -> list[str]:
        """A line for each baseline compared although the weights may differ: a moving model revision
        whose served weights were not identified on both sides."""
        lines = []
        for run_id in sorted(used):
            then = self.weights_then.get(run_id, (None, False))
            if (self.weights[1] or then[1]) and not (self.weights[0] and then[0]):
                lines.append(f"baseline {run_id} compared for {self.engine} with a moving model revision whose served "
                             "weights were not identified on both runs: its figures may come from other weights")
        return lines

    def find(self, docs: list[dict[str, Any]], scenarios: set[str], per_scenario: int = 1) -> dict[str, list[Side]]:
        """scenario -> up to `per_scenario` comparable runs that measured it, in the order of `docs`."""
        found: dict[str, list[Side]] = {}
        for doc in docs:
            if all(len(found.get(s, [])) >= per_scenario for s in scenarios):
                break
            then, side = self._load(doc)
            if side is None or then is None:
                continue
            for scenario in sorted(scenarios & side.scenarios()):
                if len(found.get(scenario, [])) >= per_scenario:
                    continue
                differs = _differences(scenario_settings(self.now, scenario), scenario_settings(then, scenario))
                if differs:
                    self._skip(f"baseline {side.run_id} skipped for {self.engine}/{scenario}: other scenario "
                               f"settings ({differs})")
                else:
                    found.setdefault(scenario, []).append(side)
        return found


def _earlier(runs: list[dict[str, Any]], cfg: RunConfig, engine: str, before_ts: float | None) -> list[dict[str, Any]]:
    """Indexed runs before this one that measured `engine`, newest first."""
    return [doc for doc in runs if doc.get("run_id") != cfg.run_id and engine in (doc.get("prefixes") or {})
            and (before_ts is None or (doc.get("created_ts") or 0) < before_ts)]


def history(candidates: Candidates, runs: list[dict[str, Any]], engine: str, scenarios: set[str],
            before_ts: float | None, accepted: tuple[str, ...] = ()) -> dict[str, list[Side]]:
    """scenario -> the last good comparable runs that measured it, newest first (at most HISTORY_RUNS):
    the last good run first, then the lineage's history its run-to-run variation is estimated from."""
    ok = accepted_runs(runs, accepted)
    docs = [d for d in _earlier(runs, candidates.cfg, engine, before_ts) if is_good(d, ok)]
    return candidates.find(docs, scenarios, HISTORY_RUNS)


def references(candidates: Candidates, runs: list[dict[str, Any]], engine: str, scenarios: set[str],
               before_ts: float | None, accepted: tuple[str, ...] = ()) -> dict[str, Side]:
    """scenario -> the reference: the newest accepted comparable run that measured it, else the lineage's
    first good comparable run (the oldest)."""
    ok = accepted_runs(runs, accepted)
    earlier = [d for d in _earlier(runs, candidates.cfg, engine, before_ts) if is_good(d, ok)]
    found = candidates.find([d for d in earlier if d.get("run_id") in ok], scenarios)
    rest = scenarios - set(found)
    if rest:
        found.update(candidates.find(list(reversed(earlier)), rest))
    return {scenario: sides[0] for scenario, sides in found.items()}


# ---- comparing -----------------------------------------------------------------------------------


def _mostly_failed(counts: dict[str, int]) -> bool:
    return 2 * counts["rounds_failed"] > counts["rounds"]


def compare_engine(cfg: RunConfig, engine: str, digest: str | None, current: Side, bases: dict[str, Side],
                   refs: dict[str, Side] | None = None,
                   histories: dict[str, list[Side]] | None = None) -> list[dict[str, Any]]:
    """The regressions rows of one engine: every comparison made, regressed or not, against the last good
    run of each scenario and, where it is another run, against the reference."""
    rows = _compare_with(cfg, engine, digest, current, bases, "last_good", histories or {})
    for scenario, ref in sorted((refs or {}).items()):
        last = bases.get(scenario)
        if last is None or last.run_id != ref.run_id:
            rows += _compare_with(cfg, engine, digest, current, {scenario: ref}, "reference", histories or {})
    return rows


def _compare_with(cfg: RunConfig, engine: str, digest: str | None, current: Side, bases: dict[str, Side],
                  kind: BaselineKind, histories: dict[str, list[Side]]) -> list[dict[str, Any]]:
    t = cfg.thresholds
    rows: list[dict[str, Any]] = []

    def row(scenario: str, metric: str, base: Side, baseline_value: float | None, value: float | None,
            change: float | None, threshold: float | None, regressed: bool, verdict: str,
            concurrency: int | None = None, e: Effect | None = None, interval: tuple[float, float] | None = None,
            covers: str | None = None) -> None:
        low, high = interval if interval is not None else ((e.low, e.high) if e else (None, None))
        rows.append({"run_id": cfg.run_id, "engine": engine, "image_digest": digest, "scenario": scenario,
                     "round": 0, "concurrency": concurrency, "metric": metric, "baseline_run_id": base.run_id,
                     "baseline_kind": kind, "baseline_value": baseline_value, "value": value, "change": change,
                     "threshold": threshold, "regressed": bool(regressed), "ratio": e.ratio if e else None,
                     "ci_low": low, "ci_high": high, "covers": covers or (e.covers if e and e.ratio is not None
                                                                           else None),
                     "verdict": verdict})

    # metric -> the threshold as a change, and whether worse is below it (throughput) or above (latency)
    limits = {"output_tps": (-t.output_tps_drop, "below"), "ttft_p95_s": (t.ttft_p95_rise, "above")}
    now_rounds = current.shape_rounds()
    now_counts = current.shape_counts()
    ttft_ok_now = current.ttft_reliable()
    planned = planned_load(cfg)
    for scenario in sorted(({k[0] for k in now_rounds} | planned) & set(bases)):
        base = bases[scenario]
        base_rounds = base.shape_rounds()
        base_counts = base.shape_counts()
        ttft_ok = ttft_ok_now and base.ttft_reliable()
        past = [h for h in histories.get(scenario, []) if h.run_id != current.run_id]
        shapes = {k for k in (*now_rounds, *now_counts, *base_counts) if k[0] == scenario}
        for key in sorted(shapes, key=lambda k: (k[1] or 0, k[2] or 0)):
            suffix = f"@{key[2]:g}rps" if key[2] is not None else ""
            was_counts, now_count = base_counts.get(key), now_counts.get(key)
            if was_counts is not None and scenario in planned:
                if now_count is None:
                    row(scenario, "measured" + suffix, base, float(was_counts["rounds"]), 0.0, None, None, True,
                        "measured -> missing", key[1])
                    continue
                _failed_share_row(row, cfg, scenario, suffix, base, key, was_counts, now_count)
            if key not in base_rounds or key not in now_rounds:
                continue
            for metric, (threshold, worse) in limits.items():
                if metric == "ttft_p95_s" and not ttft_ok:
                    continue
                was, now = base_rounds[key][metric], now_rounds[key][metric]
                was_median, now_median = _median(was), _median(now)
                if not was_median or now_median is None:
                    continue
                e = effect(was, now, t.confidence)
                between = between_run_log_sd([h.shape_rounds().get(key, {}).get(metric, []) for h in reversed(past)])
                if between is not None:  # the lineage's own run-to-run variation, from its good runs
                    covers = f"{e.covers}, and run-to-run variation estimated from {between.runs} past runs"
                    e = replace(widen(e, between.log_sd, covers, between.df), covers=covers)
                regressed = _beyond(e, 1 + threshold, worse)
                change = now_median / was_median - 1
                _log_undecided(engine, scenario, key[1], metric + suffix, e, change, threshold, worse)
                row(scenario, metric + suffix, base, was_median, now_median, change, threshold, regressed,
                    e.verdict, key[1], e)
    if "functional" in bases and not current.checks.empty:
        base = bases["functional"]
        now_checks = current.check_outcomes()
        for check, was in sorted(base.check_outcomes().items()):
            if was == "pass" and check in now_checks:
                now = now_checks[check]
                row("functional", f"check:{check}", base, 1.0, 1.0 if now == "pass" else 0.0, None, None,
                    now == "fail", f"pass -> {now}")
    if "long_context" in bases and not current.needles.empty:
        base = bases["long_context"]
        now_needles = current.needle_outcomes()
        for (length, depth), was in sorted(base.needle_outcomes().items()):
            if was and (length, depth) in now_needles:
                now = now_needles[(length, depth)]
                row("long_context", f"needle:{length}@{depth:g}", base, 1.0, 1.0 if now else 0.0, None, None, not now,
                    f"passed -> {'passed' if now else 'failed'}")
    if "prefix_cache" in bases and current.cache_verdict:
        base = bases["prefix_cache"]
        if base.cache_verdict == "effective":
            now_ok = current.cache_verdict == "effective"
            row("prefix_cache", "cache_verdict", base, 1.0, 1.0 if now_ok else 0.0, None, None, not now_ok,
                f"effective -> {current.cache_verdict}")
    if "quality" in bases and not current.quality.empty:
        _accuracy_rows(row, cfg, bases["quality"], current)
        _nll_rows(row, cfg, bases["quality"], current)
    if "capacity" in bases and current.capacity is not None:
        base = bases["capacity"]
        was, now = base.capacity or {}, current.capacity
        if not was.get("withheld") and not now.get("withheld"):
            found = capacity_order(now, was)
            words = {"more": "higher: it passed a load the baseline failed",
                     "less": "lower: it failed a load the baseline passed",
                     "overlap": "no detectable difference: the brackets overlap or rest on close probes"}[found]
            row("capacity", "capacity", base, was.get("capacity"), now.get("capacity"), None, None, found == "less",
                f"{words} (baseline {was.get('text')}; now {now.get('text')})")
    return rows


def _failed_share_row(row: Callable[..., None], cfg: RunConfig, scenario: str, suffix: str, base: Side,
                      key: Shape, was: dict[str, int], now: dict[str, int]) -> None:
    """The share of failed requests of one shape, then and now: a regression when the interval of the
    difference lies wholly above `failed_share_rise`, or when most rounds failed now and not then."""
    t = cfg.thresholds
    n_was, n_now = was["ok"] + was["failed"], now["ok"] + now["failed"]
    if not n_was or not n_now:
        return
    share_was, share_now = was["failed"] / n_was, now["failed"] / n_now
    low, high = newcombe(now["failed"], n_now, was["failed"], n_was, t.confidence)
    rounds_now = _mostly_failed(now) and not _mostly_failed(was)
    regressed = low > t.failed_share_rise or rounds_now
    verdict = "higher" if low > 0 else "lower" if high < 0 else "no detectable difference"
    if rounds_now:
        verdict += f"; {now['rounds_failed']} of {now['rounds']} measured rounds failed"
    row(scenario, "failed_share" + suffix, base, share_was, share_now, share_now - share_was, t.failed_share_rise,
        regressed, verdict, key[1], interval=(low, high),
        covers=f"the finite number of requests ({n_was} then, {n_now} now), taken as independent")


def _accuracy_rows(row: Callable[..., None], cfg: RunConfig, base: Side, current: Side) -> None:
    """Each family's accuracy, then and now: a regression when the Newcombe interval of the difference
    lies wholly below -`accuracy_drop` (docs/PROTOCOL.md, "Answers")."""
    t = cfg.thresholds
    now_counts = current.family_counts()
    for family, (good_was, n_was) in sorted(base.family_counts().items()):
        if family not in now_counts or not n_was or not now_counts[family][1]:
            continue
        good_now, n_now = now_counts[family]
        was, now = good_was / n_was, good_now / n_now
        low, high = newcombe(good_now, n_now, good_was, n_was, t.confidence)
        verdict = "lower" if high < 0 else "higher" if low > 0 else "no detectable difference"
        row("quality", f"accuracy/{family}", base, was, now, now - was, -t.accuracy_drop, high < -t.accuracy_drop,
            f"{verdict} ({good_was}/{n_was} then, {good_now}/{n_now} now)", interval=(low, high),
            covers=f"the finite number of items ({n_was} then, {n_now} now), taken as independent")


def _nll_rows(row: Callable[..., None], cfg: RunConfig, base: Side, current: Side) -> None:
    """The fixed text's NLL per token at each length, then and now: the same weights and text score the same
    up to kernel noise, so a rise beyond `scenarios.quality.nll_tolerance` regresses (docs/PROTOCOL.md,
    "Log-likelihood parity")."""
    tolerance = cfg.scenarios.quality.nll_tolerance
    now_nll = current.nll_by_length()
    for length, was in sorted(base.nll_by_length().items()):
        if length not in now_nll:
            continue
        now = now_nll[length]
        rise = now - was
        verdict = "higher" if rise > tolerance else "lower" if rise < -tolerance else "within the tolerance"
        row("quality", f"nll/{length}", base, was, now, rise, tolerance, rise > tolerance,
            f"{verdict} ({was:.3f} then, {now:.3f} nats/token now)")


def _beyond(e: Effect, limit: float, worse: str) -> bool:
    """Whether the whole interval of the ratio lies beyond `limit` on the worse side: a regression.
    Without an interval (fewer than 2 good rounds a side) nothing is shown, so nothing regressed."""
    if e.low is None or e.high is None:
        return False
    return e.high < limit if worse == "below" else e.low > limit


def _log_undecided(engine: str, scenario: str, concurrency: int | None, metric: str, e: Effect, change: float,
                   threshold: float, worse: str) -> None:
    """A median beyond the threshold whose interval still holds it is not a regression; say what would tell."""
    limit = 1 + threshold
    beyond = change < threshold if worse == "below" else change > threshold
    if not beyond or e.ratio is None or _beyond(e, limit, worse):
        return
    needed = e.rounds_needed(e.ratio / limit - 1)
    log.info("%s/%s%s %s: median %+.1f%% is beyond the threshold %+.0f%% but the interval %.3f-%.3f (covering %s) "
             "holds %.2f: not a regression at %d vs %d rounds (%s)",
             engine, scenario, "" if concurrency is None else f" c={concurrency}", metric, 100 * change, 100 * threshold, e.low, e.high, e.covers, limit,
             e.rounds_a, e.rounds_b, f"about {needed} rounds a side would tell either way" if needed else
             "no number of rounds would tell: the run-to-run variation alone is as large")


def compare_run(run_dir: RunDir, cfg: RunConfig, s3: Any, accepted: tuple[str, ...] = ()) -> dict[str, Any]:
    """Write the run's regressions rows per engine; raise RegressionFound when any row regressed.
    `accepted`: run ids a person accepted as the new level (the Variable dayone_nightly_accept)."""
    pinned = run_documents.pinned(run_dir)
    manifest = run_documents.manifest(run_dir) or {}
    created = manifest.get("created_ts")
    runs = run_index(s3, cfg)
    known = {str(d.get("run_id")) for d in runs}
    for run_id in accepted:
        if run_id not in known:
            log.warning("accepted run %s is not in the run index of %s: nothing to accept", run_id, cfg.model.name)
    regressed: list[str] = []
    result: dict[str, Any] = {"engines": {}}
    skipped: list[str] = []
    caveats: list[str] = []
    for e in cfg.engines:
        current = current_side(run_dir, e.name, cfg)
        wanted = current.scenarios() | planned_load(cfg)
        found = Candidates(s3, cfg, e.name, manifest)
        past = history(found, runs, e.name, wanted, created, accepted)
        bases = {scenario: sides[0] for scenario, sides in past.items()}
        refs = references(found, runs, e.name, wanted, created, accepted)
        rows = compare_engine(cfg, e.name, pinned.get(e.name, {}).get("image_digest"), current, bases, refs, past)
        with run_dir.rows("regressions", e.name, "compare") as out:
            for r in rows:
                out.write(r)
        bad = [r for r in rows if r["regressed"]]
        regressed += [_describe(r) for r in bad]
        skipped += found.skipped
        caveats += found.caveats({b.run_id for b in (*bases.values(), *refs.values())})
        result["engines"][e.name] = {
            "baselines": {s: b.run_id for s, b in sorted(bases.items())},
            "references": {s: b.run_id for s, b in sorted(refs.items())},
            "compared": len(rows), "regressed": len(bad),
        }
    accepted_here = sorted(set(accepted) & known)
    run_dir.write_json(run_documents.REGRESSIONS, {**result, "regressions": regressed, "skipped": skipped,
                                           "caveats": caveats, "accepted": accepted_here})
    if regressed:
        raise RegressionFound(f"{len(regressed)} regression(s) against the last good run or the reference: "
                              + "; ".join(regressed))
    return result


def _describe(r: dict[str, Any]) -> str:
    where = f"{r['engine']}/{r['scenario']}" + (f" c={r['concurrency']}" if r.get("concurrency") is not None else "")
    vs = f"vs {r['baseline_run_id']} ({r['baseline_kind'].replace('_', ' ')})"
    if r["metric"].startswith("failed_share"):
        return (f"{where} {r['metric']}: {r['baseline_value']:.1%} -> {r['value']:.1%} of requests failed "
                f"(difference interval {r['ci_low']:+.1%} to {r['ci_high']:+.1%}, threshold "
                f"+{r['threshold']:.0%}; {r['verdict']}) {vs}")
    if r["metric"].startswith("accuracy/"):
        return (f"{where} {r['metric']}: {r['baseline_value']:.0%} -> {r['value']:.0%} of items answered right "
                f"(difference interval {r['ci_low']:+.1%} to {r['ci_high']:+.1%}, threshold "
                f"{r['threshold']:+.0%}; {r['verdict']}) {vs}")
    if r["metric"].startswith("nll/"):
        return (f"{where} {r['metric']}: {r['baseline_value']:.3f} -> {r['value']:.3f} nats/token of the fixed text "
                f"({r['change']:+.3f}, tolerance {r['threshold']:g}) {vs}")
    if r["metric"].startswith("measured"):
        return f"{where} {r['metric']}: measured in {r['baseline_run_id']}, missing now {vs}"
    if r.get("ratio") is not None:
        return (f"{where} {r['metric']}: {r['baseline_value']:.4g} -> {r['value']:.4g} ({r['change']:+.1%}; ratio "
                f"{r['ratio']:.3f}, interval {r['ci_low']:.3f}-{r['ci_high']:.3f} beyond the threshold "
                f"{r['threshold']:+.0%}" + (f", covering {r['covers']}" if r.get("covers") else "") + f") {vs}")
    return f"{where} {r['metric']}: passed in {r['baseline_run_id']}, fails now {vs}"

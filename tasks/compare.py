"""Regression comparison against the last good run (the nightly's compare step).

The baseline of one (model, engine, scenario) is the most recent archived run before this one that
was validated and not quarantined, that measured that engine and scenario, and that is comparable:
the same engine lineage (dialect; on Kubernetes the image repository, tag and digest aside; locally
the launcher) and the same settings of that scenario (input/output tokens, concurrency levels or
rates; `SCENARIO_SETTINGS`), read from the run config in its archived manifest.json. A candidate
that differs is skipped with a log line naming the difference, and the next older one is tried.
The run index under `runs/MODEL/_index/` says which runs exist and whether they were quarantined.

Compared, with the thresholds of `config.thresholds`, per shape (scenario, concurrency, rate): the
effect new/baseline of the measured rounds' values (tasks/evidence/effects.py: ratio of geometric
means with a `confidence` interval), so a few milliseconds of jitter between rounds is not a
regression:

- output throughput: regressed when the whole interval lies below 1 - `output_tps_drop`;
- P95 TTFT: regressed when the whole interval lies above 1 + `ttft_p95_rise`, only where TTFT is
  publishable on both sides (tasks/evidence/reliability.py);
- fewer than 2 good rounds on a side: not regressed, verdict "not enough rounds";
- every functional check, needle (length x depth) and prefix-cache verdict that passed in the
  baseline and now fails;
- the capacity under the SLO: regressed when this run failed a load the baseline passed (a search
  knows a capacity to its bracket; overlapping brackets are no detectable difference), where
  neither side's capacity is withheld.

Every comparison is a row of the `regressions` table (regressed true or false; the medians and
their change for the reader, the ratio, its interval and the verdict for the decision); any
regressed row makes `compare` raise RegressionFound after the rows are written, so the table is
archived and the Airflow task fails.
"""

from __future__ import annotations

import io
import json
import logging
import statistics
from typing import TYPE_CHECKING, Any

import pandas as pd

from tasks import state
from tasks.archive import model_slug
from tasks.config import RunConfig
from tasks.desensitize import desensitize
from tasks.evidence.effects import Effect, effect
from tasks.scenarios import CAPACITY_SCENARIO
from tasks.scenarios.capacity import order as capacity_order
from tasks.scenarios.capacity import published as published_capacity
from tasks.staging import RunDir

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
}

Shape = tuple[str, int, float | None]  # (scenario, concurrency, rate)


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
                 capacity: dict[str, Any] | None = None):
        self.run_id = run_id
        self.capacity = capacity  # the capacity search's published result (capacity.published), where it ran
        # The run's own verdict on its stream timing, where known (tasks/evidence/reliability.py)
        self.ttft_published = ttft_published
        self.rounds = rounds
        self.checks = checks
        self.needles = needles
        self.cache_verdict = cache_verdict

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
        return {str(s) for s in found}

    def shape_rounds(self) -> dict[Shape, dict[str, list[float]]]:
        """(scenario, concurrency, rate) -> each headline metric's values over measured, ok rounds."""
        r = self.rounds
        if r.empty:
            return {}
        r = r[(r["warmup"].fillna(False) == False) & (r["status"] == "ok")]  # noqa: E712
        out: dict[Shape, dict[str, list[float]]] = {}
        for (scenario, conc, rate), g in r.groupby(["scenario", "concurrency", "rate_rps"], dropna=False, sort=True):
            key = (str(scenario), int(conc), None if pd.isna(rate) else float(rate))
            out[key] = {m: [float(v) for v in g[m].tolist() if v is not None and not pd.isna(v)]
                        for m in HEADLINE_METRICS}
        return out

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


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def current_side(run_dir: RunDir, engine: str, cfg: RunConfig) -> Side:
    from tasks.evidence.cache import published_verdict
    from tasks.evidence.reliability import engine_ttft_verdict

    stream = engine_ttft_verdict(run_dir, engine)
    verdict = published_verdict(run_dir.read_json(f"verdicts/{engine}/prefix_cache.json") or {}, stream)
    searched = run_dir.read_json(state.perf_summary_doc(engine, CAPACITY_SCENARIO))
    capacity = None if searched is None else published_capacity(searched, bool(stream["reliable"]), cfg.slo)
    return Side(run_dir.run_id, run_dir.frame("rounds", engine), run_dir.frame("checks", engine),
                run_dir.frame("needles", engine), verdict.get("verdict"), bool(stream["reliable"]), capacity)


def archived_side(s3: Any, cfg: RunConfig, index: dict[str, Any], engine: str) -> Side:
    bucket, prefix = cfg.archive.bucket, index["prefixes"][engine]
    summary = archived_summary(s3, bucket, prefix + "summary.json")
    mine = None if summary is None else summary.engines.get(engine)
    cache = None if mine is None or mine.prefix_cache is None else mine.prefix_cache.verdict
    published = None if mine is None else mine.ttft.reliable
    capacity = None if mine is None or mine.capacity is None else mine.capacity.model_dump(mode="json")
    return Side(index["run_id"], _read_table(s3, bucket, prefix, "rounds"), _read_table(s3, bucket, prefix, "checks"),
                _read_table(s3, bucket, prefix, "needles"), cache, published, capacity)


def archived_config(s3: Any, bucket: str, prefix: str) -> dict[str, Any] | None:
    """The run config recorded in an archived run's manifest.json (desensitized); None when absent."""
    from botocore.exceptions import ClientError

    try:
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "manifest.json")["Body"].read())
    except (ClientError, ValueError):
        return None
    config = manifest.get("config") if isinstance(manifest, dict) else None
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
    """What a baseline's engine of this name must share with this run's: target and dialect, and the
    image repository on a cluster or the launcher locally (a new tag or digest is what is compared)."""
    spec = next((e for e in config.get("engines") or [] if e.get("name") == engine), None)
    if spec is None:
        return {"engine": None}
    target = config.get("target")
    lineage = {"target": target, "dialect": spec.get("dialect")}
    if target == "local":
        lineage["launcher"] = spec.get("launcher")
    else:
        lineage["image"] = image_repository(spec.get("image"))
    return lineage


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


def baselines(s3: Any, cfg: RunConfig, engine: str, scenarios: set[str], before_ts: float | None,
              runs: list[dict[str, Any]] | None = None) -> dict[str, Side]:
    """scenario -> the last good run that measured it for this engine (validated, not quarantined), of
    the same engine lineage and with the same settings of that scenario."""
    # Archived manifests are desensitized: compare like with like (a registry host may be scrubbed).
    now = desensitize(cfg.model_dump(mode="json"))
    lineage = engine_lineage(now, engine)
    found: dict[str, Side] = {}
    for doc in runs if runs is not None else run_index(s3, cfg):
        if len(found) == len(scenarios):
            break
        if doc.get("quarantined") or doc.get("run_id") == cfg.run_id or engine not in (doc.get("prefixes") or {}):
            continue
        if before_ts is not None and (doc.get("created_ts") or 0) >= before_ts:
            continue  # a baseline is an earlier run
        then = archived_config(s3, cfg.archive.bucket, doc["prefixes"][engine])
        if then is None:
            log.info("baseline %s skipped for %s: its manifest.json records no run config", doc.get("run_id"), engine)
            continue
        differs = _differences(lineage, engine_lineage(then, engine))
        if differs:
            log.info("baseline %s skipped for %s: another engine lineage (%s)", doc.get("run_id"), engine, differs)
            continue
        side = archived_side(s3, cfg, doc, engine)
        for scenario in sorted((scenarios & side.scenarios()) - set(found)):
            differs = _differences(scenario_settings(now, scenario), scenario_settings(then, scenario))
            if differs:
                log.info("baseline %s skipped for %s/%s: other scenario settings (%s)", doc.get("run_id"), engine,
                         scenario, differs)
            else:
                found[scenario] = side
    return found


# ---- comparing -----------------------------------------------------------------------------------


def compare_engine(cfg: RunConfig, engine: str, digest: str | None, current: Side,
                   bases: dict[str, Side]) -> list[dict[str, Any]]:
    """The regressions rows of one engine: every comparison made, regressed or not."""
    t = cfg.thresholds
    rows: list[dict[str, Any]] = []

    def row(scenario: str, metric: str, base: Side, baseline_value: float | None, value: float | None,
            change: float | None, threshold: float | None, regressed: bool, verdict: str,
            concurrency: int | None = None, e: Effect | None = None) -> None:
        rows.append({"run_id": cfg.run_id, "engine": engine, "image_digest": digest, "scenario": scenario,
                     "round": 0, "concurrency": concurrency, "metric": metric, "baseline_run_id": base.run_id,
                     "baseline_value": baseline_value, "value": value, "change": change, "threshold": threshold,
                     "regressed": bool(regressed), "ratio": e.ratio if e else None,
                     "ci_low": e.low if e else None, "ci_high": e.high if e else None, "verdict": verdict})

    # metric -> the threshold as a change, and whether worse is below it (throughput) or above (latency)
    limits = {"output_tps": (-t.output_tps_drop, "below"), "ttft_p95_s": (t.ttft_p95_rise, "above")}
    now_rounds = current.shape_rounds()
    ttft_ok_now = current.ttft_reliable()
    for scenario in sorted({k[0] for k in now_rounds} & set(bases)):
        base = bases[scenario]
        base_rounds = base.shape_rounds()
        ttft_ok = ttft_ok_now and base.ttft_reliable()
        for key in sorted((k for k in now_rounds if k[0] == scenario), key=lambda k: (k[1], k[2] or 0)):
            if key not in base_rounds:
                continue
            suffix = f"@{key[2]:g}rps" if key[2] is not None else ""
            for metric, (threshold, worse) in limits.items():
                if metric == "ttft_p95_s" and not ttft_ok:
                    continue
                was, now = base_rounds[key][metric], now_rounds[key][metric]
                was_median, now_median = _median(was), _median(now)
                if not was_median or now_median is None:
                    continue
                e = effect(was, now, t.confidence)
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
    if "capacity" in bases and current.capacity is not None:
        base = bases["capacity"]
        was, now = base.capacity or {}, current.capacity
        if not was.get("withheld") and not now.get("withheld"):
            found = capacity_order(now["bracket"], was["bracket"])
            words = {"more": "higher: it passed a load the baseline failed",
                     "less": "lower: it failed a load the baseline passed",
                     "overlap": "no detectable difference: the brackets overlap"}[found]
            row("capacity", "capacity", base, was.get("capacity"), now.get("capacity"), None, None, found == "less",
                f"{words} (baseline {was.get('text')}; now {now.get('text')})")
    return rows


def _beyond(e: Effect, limit: float, worse: str) -> bool:
    """Whether the whole interval of the ratio lies beyond `limit` on the worse side: a regression.
    Without an interval (fewer than 2 good rounds a side) nothing is shown, so nothing regressed."""
    if e.low is None or e.high is None:
        return False
    return e.high < limit if worse == "below" else e.low > limit


def _log_undecided(engine: str, scenario: str, concurrency: int, metric: str, e: Effect, change: float,
                   threshold: float, worse: str) -> None:
    """A median beyond the threshold whose interval still holds it is not a regression; say what would tell."""
    limit = 1 + threshold
    beyond = change < threshold if worse == "below" else change > threshold
    if not beyond or e.ratio is None or _beyond(e, limit, worse):
        return
    needed = e.rounds_needed(e.ratio / limit - 1)
    log.info("%s/%s c=%d %s: median %+.1f%% is beyond the threshold %+.0f%% but the interval %.3f-%.3f (covering %s) "
             "holds %.2f: not a regression at %d vs %d rounds (%s)",
             engine, scenario, concurrency, metric, 100 * change, 100 * threshold, e.low, e.high, e.covers, limit,
             e.rounds_a, e.rounds_b, f"about {needed} rounds a side would tell either way" if needed else
             "no number of rounds would tell: the run-to-run variation alone is as large")


def compare_run(run_dir: RunDir, cfg: RunConfig, s3: Any) -> dict[str, Any]:
    """Write the run's regressions rows per engine; raise RegressionFound when any row regressed."""
    pinned = run_dir.read_json("pinned.json", {})
    created = (run_dir.read_json("manifest.json", {}) or {}).get("created_ts")
    runs = run_index(s3, cfg)
    regressed: list[str] = []
    result: dict[str, Any] = {"engines": {}}
    for e in cfg.engines:
        current = current_side(run_dir, e.name, cfg)
        bases = baselines(s3, cfg, e.name, current.scenarios(), created, runs)
        rows = compare_engine(cfg, e.name, pinned.get(e.name, {}).get("image_digest"), current, bases)
        with run_dir.rows("regressions", e.name, "compare") as out:
            for r in rows:
                out.write(r)
        bad = [r for r in rows if r["regressed"]]
        regressed += [_describe(r) for r in bad]
        result["engines"][e.name] = {
            "baselines": {s: b.run_id for s, b in sorted(bases.items())},
            "compared": len(rows), "regressed": len(bad),
        }
    run_dir.write_json("regressions.json", {**result, "regressions": regressed})
    if regressed:
        raise RegressionFound(f"{len(regressed)} regression(s) against the last good run: " + "; ".join(regressed))
    return result


def _describe(r: dict[str, Any]) -> str:
    where = f"{r['engine']}/{r['scenario']}" + (f" c={r['concurrency']}" if r.get("concurrency") is not None else "")
    if r.get("ratio") is not None:
        return (f"{where} {r['metric']}: {r['baseline_value']:.4g} -> {r['value']:.4g} ({r['change']:+.1%}; ratio "
                f"{r['ratio']:.3f}, interval {r['ci_low']:.3f}-{r['ci_high']:.3f} beyond the threshold "
                f"{r['threshold']:+.0%}) vs {r['baseline_run_id']}")
    return f"{where} {r['metric']}: passed in {r['baseline_run_id']}, fails now"

"""Choosing the nightly's baselines among the archived runs: a good run (passed its own comparison, made
none, or was accepted by a person), comparable to this one (tasks/compare/sides.py), the last good ones
and the reference (PROTOCOL.md section 8)."""

from __future__ import annotations

import logging
from typing import Any

from tasks.compare.sides import (Side, archived_manifest, archived_side, engine_lineage, gpu_product, scenario_settings,
                                 served_weights, setting_differences, traffic_content)
from tasks.config import RunConfig
from tasks.core.desensitize import desensitize
from tasks.stats.history import HISTORY_RUNS

log = logging.getLogger("dayone.compare")

BaselineKind = str  # "last_good" or "reference"


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
        self.content = traffic_content(manifest)  # the traffic this run sent, by its hash
        self.content_then: dict[str, dict[str, str]] = {}
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
            self.content_then[run_id] = traffic_content(manifest)
            if not isinstance(then, dict):
                self._skip(f"baseline {run_id} skipped for {self.engine}: its manifest.json records no run config")
                self._read[run_id] = (None, None)
                return self._read[run_id]
            differs = setting_differences(self.lineage, engine_lineage(then, self.engine))
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
                now_c, then_c = self.content.get(scenario), self.content_then.get(side.run_id, {}).get(scenario)
                both = bool(now_c and then_c)  # an older archive without the hash compares by its settings
                differs = setting_differences(scenario_settings(self.now, scenario, now_c if both else None),
                                              scenario_settings(then, scenario, then_c if both else None))
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

"""Scraping an engine's Prometheus /metrics, parsed with prometheus_client's text parser.

Keys are sample names as the engine exposes them (e.g. "sglang:prompt_tokens_total"), which is
what the adapters' counter names use. prometheus_client names a counter *family* without its
`_total` suffix, and when a `# TYPE` line omits the suffix its `_total` samples land in a family
of type "unknown"; reading sample names, not family names, is right in both cases.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tasks.engines import EngineAdapter

# Sample suffixes that are not values to sum: a counter's creation time, a histogram's buckets.
_SKIPPED_SUFFIXES = ("_created", "_bucket")
_SUMMED_TYPES = ("counter", "gauge", "unknown", "untyped", "histogram", "summary")


class MetricsUnavailable(RuntimeError):
    """The engine exposes no /metrics, or it could not be read."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    family_type: str


def parse_samples(text: str) -> list[Sample]:
    """Every sample in a Prometheus text exposition (bucket and _created samples left out)."""
    out = []
    for family in text_string_to_metric_families(text):
        if family.type not in _SUMMED_TYPES:
            continue
        for s in family.samples:
            if s.name.endswith(_SKIPPED_SUFFIXES) or "quantile" in s.labels:
                continue
            out.append(Sample(s.name, dict(s.labels), float(s.value), family.type))
    return out


def sum_over_labels(samples: list[Sample]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for s in samples:
        totals[s.name] = totals.get(s.name, 0.0) + s.value
    return totals


def series_key(name: str, labels: dict[str, str]) -> str:
    """One series' identity, as Prometheus writes it: name{label="value",...}, labels sorted."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"


def series_values(samples: list[Sample]) -> dict[str, float]:
    """Every series on its own (series_key -> value): what the window rule checks for a reset, since
    a sum over label sets can rise while one of its series restarted from zero."""
    return {series_key(s.name, s.labels): s.value for s in samples}


def fetch_text(client: httpx.Client, base_url: str, adapter: EngineAdapter) -> str:
    if adapter.metrics_path is None:
        raise MetricsUnavailable(f"{adapter.dialect} exposes no metrics endpoint")
    url = base_url.rstrip("/") + adapter.metrics_path
    try:
        r = client.get(url)
    except httpx.HTTPError as exc:
        raise MetricsUnavailable(f"GET {adapter.metrics_path}: {type(exc).__name__}: {exc}") from exc
    if r.status_code != 200:
        raise MetricsUnavailable(f"GET {adapter.metrics_path} -> {r.status_code}")
    return r.text


def scrape_samples(client: httpx.Client, base_url: str, adapter: EngineAdapter) -> list[Sample]:
    """The raw samples of one scrape, for `server_metrics` rows."""
    return parse_samples(fetch_text(client, base_url, adapter))


def scrape(client: httpx.Client, base_url: str, adapter: EngineAdapter) -> dict[str, float]:
    """Counter and gauge values summed over labels, keyed by the sample name as exposed."""
    return sum_over_labels(scrape_samples(client, base_url, adapter))


def sample_rows(keys: dict[str, Any], phase: str, samples: list[Sample], scrape_ts: float | None = None) -> list[dict]:
    """`server_metrics` rows for one scrape; `keys` are the endpoint's row keys."""
    ts = time.time() if scrape_ts is None else scrape_ts
    return [
        {**keys, "scrape_ts": ts, "phase": phase, "metric": s.name, "labels": s.labels, "value": s.value}
        for s in samples
    ]

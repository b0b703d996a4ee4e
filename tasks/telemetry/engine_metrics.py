"""What the engine spent in a round, from its own /metrics: preemptions, KV usage, its queue, its
own TTFT/ITL/E2E beside the client's, speculative-decoding acceptance (one `engine_rounds` row per round).

Counters and histograms are deltas between a scrape just before the round's first send and one just
after its last completion (outside the timed window), under the window rule (tasks/telemetry/window.py).
Gauges say nothing once an idle engine drained, so a sampler thread reads them while the round runs
(GaugeSampler: one GET and a line scan every `interval_s`). Which names mean what is the adapter's
(EngineAdapter.round_metrics); a figure the engine does not expose is null and `not_exposed` says so.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tasks.engines.access import EndpointAccess
from tasks.engines import EngineAdapter
from tasks.engines.base import RoundMetrics
from tasks.telemetry import metrics
from tasks.telemetry.window import unpublishable

# A server TTFT this much below the client's is a finding: time spent before the engine saw the
# request or after it sent the token (client, network, HTTP server, proxy queue).
TTFT_GAP_MIN_S = 0.010
TTFT_GAP_MIN_SHARE = 0.25
# The client's TTFT this much below the engine's cannot be: both start at the request and the client
# sees the token after the engine made it. Beyond it the two did not time the same requests.
TTFT_GAP_BELOW_S = 0.002
# The client's mean gap between streamed tokens against the engine's ITL: a sum of gaps is the stream's
# span on both sides, so they agree within a fraction of a millisecond unless the client stalls (a
# loop starved of a core) or the stream coalesces tokens into fewer events.
ITL_GAP_MIN_S = 0.002
ITL_GAP_MIN_SHARE = 0.10
GAUGE_SAMPLE_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Scrape:
    """One reading of /metrics: samples summed over labels (histograms' _sum and _count included),
    each histogram's cumulative buckets summed over labels, as (upper bound, count), and every
    series on its own (`series`, for the window rule's per-series reset check)."""

    ts: float
    values: dict[str, float]
    buckets: dict[str, list[tuple[float, float]]]
    samples: list[metrics.Sample] = field(default_factory=list, compare=False)
    series: dict[str, float] = field(default_factory=dict, compare=False)


def parse_scrape(text: str, ts: float | None = None) -> Scrape:
    samples = metrics.parse_samples(text)
    buckets: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        for s in family.samples:
            if s.name.endswith("_bucket") and "le" in s.labels:
                base = s.name[: -len("_bucket")]
                le = float(s.labels["le"])
                buckets.setdefault(base, {})[le] = buckets.setdefault(base, {}).get(le, 0.0) + float(s.value)
    return Scrape(
        ts=time.time() if ts is None else ts,
        values=metrics.sum_over_labels(samples),
        buckets={name: sorted(b.items()) for name, b in buckets.items()},
        samples=samples,
        series=metrics.series_values(samples),
    )


def scrape(client: httpx.Client, base_url: str, adapter: EngineAdapter) -> Scrape | None:
    """One scrape, or None where the engine exposes no /metrics or it could not be read."""
    try:
        return parse_scrape(metrics.fetch_text(client, base_url, adapter))
    except (metrics.MetricsUnavailable, ValueError):
        return None


# ---- arithmetic (pure) ---------------------------------------------------------------------------


def histogram_quantile(q: float, before: list[tuple[float, float]], after: list[tuple[float, float]]) -> float | None:
    """The q-quantile of the observations between two readings of a histogram, interpolated linearly
    inside the bucket it falls in (Prometheus' histogram_quantile); None without observations. A
    quantile in the +Inf bucket is the largest finite bound (all that the buckets can say)."""
    was = dict(before)
    delta = [(le, count - was.get(le, 0.0)) for le, count in after]
    if not delta or delta[-1][1] <= 0:
        return None
    total = delta[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le, count in delta:
        if count >= rank:
            if math.isinf(le):
                return lower_bound
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return lower_bound


def histogram_mean(name: str, before: Mapping[str, float], after: Mapping[str, float]) -> tuple[float | None, float | None]:
    """(mean, observations) of a histogram over a window from its _sum and _count deltas."""
    s, c = f"{name}_sum", f"{name}_count"
    if any(k not in snap for k in (s, c) for snap in (before, after)):
        return None, None
    count = after[c] - before[c]
    if count <= 0:
        return None, count
    return (after[s] - before[s]) / count, count


def ttft_gap_finding(client_mean_s: float | None, server_mean_s: float | None) -> str | None:
    """A sentence with both numbers when the client's mean TTFT exceeds the server's by at least
    TTFT_GAP_MIN_S and TTFT_GAP_MIN_SHARE of the server's; None otherwise."""
    if client_mean_s is None or server_mean_s is None or server_mean_s < 0:
        return None
    gap = client_mean_s - server_mean_s
    if gap < TTFT_GAP_MIN_S or gap < TTFT_GAP_MIN_SHARE * server_mean_s:
        return None
    share = f" ({gap / server_mean_s:+.0%})" if server_mean_s > 0 else ""
    return (f"client TTFT mean {client_mean_s * 1e3:.1f} ms vs the engine's own {server_mean_s * 1e3:.1f} ms: "
            f"{gap * 1e3:.1f} ms{share} spent outside the engine's timing (client, network, HTTP server or "
            "a queue in front of the engine)")


def itl_gap_finding(client_mean_s: float | None, server_mean_s: float | None,
                    span_gap_s: float | None = None) -> str | None:
    """A sentence with both numbers when the client's mean gap between streamed tokens differs from the
    engine's ITL by at least ITL_GAP_MIN_S and ITL_GAP_MIN_SHARE of it, either way; None otherwise.

    `span_gap_s` (E2E gap - TTFT gap: the client's streams against the engine's, on the clock the engine
    stamps TTFT and E2E with) clears a short client gap: the client's streams were no shorter than the
    engine served them, past what a first token's delivery may add (TTFT_GAP_MIN_S), so the engine's ITL
    was stamped elsewhere (vLLM's engine core, ahead of a lagging frontend)."""
    if client_mean_s is None or server_mean_s is None or server_mean_s <= 0:
        return None
    gap = client_mean_s - server_mean_s
    if abs(gap) < ITL_GAP_MIN_S or abs(gap) < ITL_GAP_MIN_SHARE * server_mean_s:
        return None
    if gap < 0 and span_gap_s is not None and span_gap_s > -TTFT_GAP_MIN_S:
        return None
    why = ("the client read the tokens late (its loop waited for a core) or the stream carried several "
           "tokens per event" if gap > 0 else "the client's gaps are shorter than the engine's own")
    return (f"client ITL mean {client_mean_s * 1e3:.2f} ms vs the engine's own {server_mean_s * 1e3:.2f} ms "
            f"({gap / server_mean_s:+.0%}): {why}; the client's token timing is not trustworthy in this round")


def timing_gap_unpublished(server_requests: float | None, client_row: Mapping[str, Any]) -> str | None:
    """Why the client's timing cannot stand beside the engine's histograms over the round's window:
    the engine counted other requests than the client's (others' traffic in the window, or requests
    it never timed). A request the client saw fail may lack a first token, so the engine's count may
    lie anywhere from the client's ok requests to all it sent."""
    if server_requests is None or client_row.get("requests_ok") is None:
        return None  # a client row that does not count its requests: nothing to hold the engine's count against
    ok = int(client_row["requests_ok"])
    sent = ok + int(client_row.get("requests_failed") or 0)
    if server_requests > sent:
        return (f"the engine timed {server_requests:.0f} first tokens in the round's window, the client sent "
                f"{sent} requests: other traffic reached the engine, its histograms are not the client's requests")
    if server_requests < ok:
        return (f"the engine timed {server_requests:.0f} first tokens in the round's window, the client received "
                f"{ok}: the histograms miss requests the client timed")
    return None


# ---- gauges while the round runs ---------------------------------------------------------------


@dataclass
class GaugeStats:
    samples: int = 0
    peak: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    nonzero: dict[str, list[float]] = field(default_factory=dict)  # [sum, count] of the readings above 0

    def add(self, values: Mapping[str, float]) -> None:
        self.samples += 1
        for name, v in values.items():
            self.peak[name] = max(v, self.peak.get(name, v))
            self.total[name] = self.total.get(name, 0.0) + v
            if v > 0:
                acc = self.nonzero.setdefault(name, [0.0, 0.0])
                acc[0] += v
                acc[1] += 1

    def mean(self, name: str) -> float | None:
        n = self.samples
        return self.total[name] / n if n and name in self.total else None

    def mean_nonzero(self, name: str) -> float | None:
        """Mean of the readings above 0: for a last-value gauge that reads 0 until the engine first
        sets it (SGLang's speculative acceptance)."""
        acc = self.nonzero.get(name)
        return acc[0] / acc[1] if acc else None


def read_gauges(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The named gauges summed over labels, by a line scan (cheaper than a full parse while the
    round's streams are being timed)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        for name in names:
            if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
                try:
                    out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
                except (ValueError, IndexError):
                    pass
                break
    return out


class GaugeSampler:
    """Reads the adapter's gauges every `interval_s` on a thread of its own while a round runs."""

    def __init__(self, base_url: str, adapter: EngineAdapter, interval_s: float | None = None,
                 access: EndpointAccess | None = None):
        self.url = base_url.rstrip("/") + (adapter.metrics_path or "/metrics")
        self.access = access or EndpointAccess()  # the engine's API key, should its /metrics ask for it
        self.names = adapter.round_metrics.gauges
        self.interval_s = GAUGE_SAMPLE_INTERVAL_S if interval_s is None else interval_s
        self.stats = GaugeStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GaugeSampler:
        if self.names:
            self._thread = threading.Thread(target=self._run, name="dayone-gauge-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> GaugeStats:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.stats

    def _run(self) -> None:
        # The first reading one interval in: the engine is idle at the start, and the scrape before
        # the round already read it then.
        with self.access.http_client(timeout=max(1.0, 4 * self.interval_s)) as client:
            while not self._stop.wait(self.interval_s):
                try:
                    r = client.get(self.url)
                    if r.status_code == 200:
                        self.stats.add(read_gauges(r.text, self.names))
                except httpx.HTTPError:
                    pass  # a missed sample; the row carries the count of samples taken


# ---- the round's row -----------------------------------------------------------------------------


def engine_round_row(
    adapter: EngineAdapter,
    keys: Mapping[str, Any],
    before: Scrape | None,
    after: Scrape | None,
    gauges: GaugeStats | None = None,
    client_row: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One `engine_rounds` row from the scrapes around a round, the gauges sampled during it and the
    client's round row (for the TTFT beside the server's)."""
    names: RoundMetrics = adapter.round_metrics
    gauges = gauges or GaugeStats()
    client_row = client_row or {}
    not_exposed: dict[str, str] = {}
    row: dict[str, Any] = {
        **keys,
        "concurrency": client_row.get("concurrency"),
        "rate_rps": client_row.get("rate_rps"),
        "input_tokens": client_row.get("input_tokens"),
        "output_tokens": client_row.get("output_tokens"),
        "warmup": client_row.get("warmup"),
        "scrape_before_ts": None if before is None else before.ts,
        "scrape_after_ts": None if after is None else after.ts,
        "gauge_samples": gauges.samples,
    }
    if before is None or after is None:
        reason = (f"{adapter.dialect} exposes no metrics endpoint" if adapter.metrics_path is None
                  else f"{adapter.metrics_path} could not be read before and after the round")
        row["deltas_unpublished"] = reason
    else:
        # Per series, not the sums: one engine core's counters restarting hides in a sum that still rose.
        row["deltas_unpublished"] = unpublishable((before.series or before.values, after.series or after.values),
                                                  "during the round", names.counters)
    b = {} if before is None else before.values
    a = {} if after is None else after.values
    published = row["deltas_unpublished"] is None

    def delta(name: str | None, figure: str) -> float | None:
        if name is None:
            not_exposed[figure] = f"{adapter.dialect} has no such metric"
            return None
        if not published:
            return None
        if name in names.absent_until_first and b and a:  # registered, absent until its first increment
            return a.get(name, 0.0) - b.get(name, 0.0)
        if name not in b or name not in a:
            not_exposed[figure] = f"{name} not exposed"
            return None
        return a[name] - b[name]

    row["preemption_metric"] = names.preemptions
    row["preemptions"] = delta(names.preemptions, "preemptions")
    row["preempted"] = None if row["preemptions"] is None else row["preemptions"] > 0

    for figure, name in (("kv_usage", names.kv_usage), ("waiting", names.waiting), ("running", names.running)):
        if name is None:
            not_exposed[f"{figure}_peak"] = f"{adapter.dialect} has no such gauge"
        row[f"{figure}_peak"] = gauges.peak.get(name) if name else None
        row[f"{figure}_mean"] = gauges.mean(name) if name else None

    for figure, name in (("queue_time", names.queue_time), ("server_ttft", names.ttft), ("server_itl", names.itl),
                         ("server_e2e", names.e2e)):
        mean = count = None
        if name is None:
            not_exposed[figure] = f"{adapter.dialect} has no such histogram"
        elif published:
            # A labelled histogram absent before its first observation (SGLang's ITL on a fresh server) counts from 0.
            absent = name in names.absent_until_first and b and f"{name}_count" in a and f"{name}_count" not in b
            mean, count = histogram_mean(name, {f"{name}_sum": 0.0, f"{name}_count": 0.0, **b} if absent else b, a)
            if count is None:
                not_exposed[figure] = f"{name} not exposed"
        row[f"{figure}_mean_s"] = mean
        if figure == "server_ttft":
            row["server_requests"] = count
        if figure in ("server_ttft", "server_itl"):
            hb = [] if before is None else before.buckets.get(name or "", [])
            ha = [] if after is None else after.buckets.get(name or "", [])
            for q, col in ((0.5, f"{figure}_p50_s"), (0.99, f"{figure}_p99_s")):
                row[col] = histogram_quantile(q, hb, ha) if published and name else None

    row.update(client_against_server(row, client_row, not_exposed))

    drafts = delta(names.spec_drafts, "spec_drafts") if names.spec_drafts else None
    draft_tokens = delta(names.spec_draft_tokens, "spec_draft_tokens") if names.spec_draft_tokens else None
    accepted = delta(names.spec_accepted_tokens, "spec_accepted_tokens") if names.spec_accepted_tokens else None
    row["spec_drafts"], row["spec_draft_tokens"], row["spec_accepted_tokens"] = drafts, draft_tokens, accepted
    # No drafts in the round (or no draft model): no acceptance figures, not a rate of 0.
    rate = accepted / draft_tokens if draft_tokens and accepted is not None else None
    length = 1.0 + accepted / drafts if drafts and accepted is not None else None  # bonus token included
    if rate is None and length is None and names.spec_accept_length:
        # SGLang's last-value gauges: their mean while the round ran, else the value after it; 0 = none.
        length = gauges.mean_nonzero(names.spec_accept_length) if gauges.samples else a.get(names.spec_accept_length)
        rate = None
        if names.spec_accept_rate:
            rate = gauges.mean_nonzero(names.spec_accept_rate) if gauges.samples else a.get(names.spec_accept_rate)
        if not length:
            rate = length = None
    if not (names.spec_drafts or names.spec_accept_length):
        not_exposed["speculative"] = f"{adapter.dialect} has no speculative-decoding metrics"
    row["spec_acceptance_rate"], row["spec_mean_accepted_length"] = rate, length
    row["not_exposed"] = not_exposed or None
    return row


def client_against_server(row: Mapping[str, Any], client_row: Mapping[str, Any],
                          not_exposed: Mapping[str, str]) -> dict[str, Any]:
    """The client's TTFT and ITL beside the engine's histograms over the same window, and the gaps.

    The client's ITL is the rounds row's itl_mean_s: every gap between consecutive streamed output
    events of the round's ok requests pooled, one observation per gap, as the engines' histograms count
    them: vLLM 0.32 observes, per request and engine step, the time since that request's previous output
    (v1/metrics/stats.py); SGLang 0.5.18 adds the interval since the previous output to _sum and one count
    per new token (observe_inter_token_latency), a mean per token. Both stream one event per step and
    token (no speculation; SGLang's stream_interval 1), so the two count the same intervals; the client's
    TPOT mean (per request, then averaged) stands beside it for streams that carry several tokens per
    event. vLLM stamps its ITL in the engine core (EngineCoreOutputs.timestamp) but its TTFT and E2E in
    the frontend's output processor (IterationStats.iteration_timestamp), so where the frontend fell behind
    on a request's first token its ITL sum exceeds what the frontend served; the E2E gap, on the same
    clock as the TTFT gap, holds the client's whole stream. Gaps are client - server, null with
    `timing_gap_unpublished` saying why.
    """
    client = {
        "client_ttft_mean_s": client_row.get("ttft_mean_s"),
        "client_ttft_p50_s": client_row.get("ttft_p50_s"),
        "client_ttft_p99_s": client_row.get("ttft_p99_s"),
        "client_itl_mean_s": client_row.get("itl_mean_s"),
        "client_itl_p50_s": client_row.get("itl_p50_s"),
        "client_itl_p99_s": client_row.get("itl_p99_s"),
        "client_tpot_mean_s": client_row.get("tpot_mean_s"),
        "client_e2e_mean_s": client_row.get("e2e_mean_s"),
    }
    # Nothing stands beside the client where the window's deltas are void or hold other requests.
    void = row.get("deltas_unpublished") or timing_gap_unpublished(row.get("server_requests"), client_row)
    absent = [f"{figure}: {not_exposed[figure]}" for figure in ("server_ttft", "server_itl") if figure in not_exposed]
    why = void or (f"not_exposed ({'; '.join(absent)})" if absent else None)
    server_ttft, server_itl, server_e2e = (row.get(f"server_{f}_mean_s") for f in ("ttft", "itl", "e2e"))

    def gap(client_s: float | None, server_s: float | None) -> float | None:
        return None if void or client_s is None or server_s is None else client_s - server_s

    out = {**client, "timing_gap_unpublished": why,
           "ttft_gap_s": gap(client["client_ttft_mean_s"], server_ttft),
           "itl_gap_s": gap(client["client_itl_mean_s"], server_itl),
           "tpot_gap_s": gap(client["client_tpot_mean_s"], server_itl),
           "e2e_gap_s": gap(client["client_e2e_mean_s"], server_e2e)}
    findings: dict[str, str | None] = {"ttft": None, "itl": None}
    if not void:
        findings["ttft"] = ttft_gap_finding(client["client_ttft_mean_s"], server_ttft)
        if findings["ttft"] is None and out["ttft_gap_s"] is not None and out["ttft_gap_s"] < -TTFT_GAP_BELOW_S:
            findings["ttft"] = (f"client TTFT mean {client['client_ttft_mean_s'] * 1e3:.1f} ms below the engine's own "
                                f"{server_ttft * 1e3:.1f} ms: the two did not time the same requests; the client's "
                                "timing is not trustworthy in this round")
        span_gap = (None if out["e2e_gap_s"] is None or out["ttft_gap_s"] is None
                    else out["e2e_gap_s"] - out["ttft_gap_s"])
        findings["itl"] = itl_gap_finding(client["client_itl_mean_s"], server_itl, span_gap)
    out["ttft_gap_finding"], out["itl_gap_finding"] = findings["ttft"], findings["itl"]
    return out


class RoundWatch:
    """Scrapes before a round, samples gauges during it, scrapes after it; `row()` is the result.

    Construct and `start()` before the first send; `finish()` after the last completion."""

    def __init__(self, base_url: str, adapter: EngineAdapter, interval_s: float | None = None,
                 timeout_s: float = 10.0, access: EndpointAccess | None = None):
        self.base_url, self.adapter = base_url, adapter
        self.access = access or EndpointAccess()
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.before: Scrape | None = None
        self.after: Scrape | None = None
        self.gauges = GaugeStats()
        self._sampler: GaugeSampler | None = None

    @property
    def active(self) -> bool:
        return self.adapter.metrics_path is not None

    def start(self) -> RoundWatch:
        if self.active:
            with self.access.http_client(timeout=self.timeout_s) as client:
                self.before = scrape(client, self.base_url, self.adapter)
            if self.before is not None:
                self._sampler = GaugeSampler(self.base_url, self.adapter, self.interval_s, self.access).start()
        return self

    def stop_sampling(self) -> None:
        if self._sampler is not None:
            self.gauges = self._sampler.stop()
            self._sampler = None

    def finish(self) -> RoundWatch:
        self.stop_sampling()
        if self.active:
            with self.access.http_client(timeout=self.timeout_s) as client:
                self.after = scrape(client, self.base_url, self.adapter)
        return self

    def row(self, keys: Mapping[str, Any], client_row: Mapping[str, Any]) -> dict[str, Any]:
        return engine_round_row(self.adapter, keys, self.before, self.after, self.gauges, client_row)

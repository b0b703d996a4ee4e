"""Load statistics as pure functions over lists (PROTOCOL.md sections 3 and 5).

The scenarios, the report and the regression comparison all use these, so a figure is computed
one way everywhere. Percentiles use linear interpolation between closest ranks (numpy's default,
"linear"): p-th percentile of sorted x at position (n - 1) * p / 100.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tasks.state.tables import LATENCIES, PERCENTILES

SPREAD_THRESHOLD = 0.25  # a spread (max - min) above 25% of the median is flagged
# A load client that waited for a core longer than this share of its round (other processes had the core)
# was measured on a busy machine: its stamps carry that wait, and the round is flagged.
WAIT_FLAG_SHARE = 0.05
_QUANTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}


def _clean(values: Iterable[float | None]) -> list[float]:
    out = []
    for v in values:
        if v is None:
            continue
        f = float(v)
        if not math.isnan(f):
            out.append(f)
    return out


def percentile(values: Iterable[float | None], p: float, unbounded: int = 0) -> float | None:
    """The p-th percentile (0..100) by linear interpolation; None for no values (None/NaN skipped). `unbounded`
    more values count as larger than any (`sorted_percentile`)."""
    return sorted_percentile(sorted(_clean(values)), p, unbounded)


def sorted_percentile(xs: Sequence[float], p: float, unbounded: int = 0) -> float | None:
    """The p-th percentile of the ascending values `xs` and `unbounded` more values larger than any of them (the
    latencies of requests that never completed: a failed request counts against its round's latency, as a user
    waiting forever would, so an engine cannot better its tail by failing its slowest requests). None where the
    percentile falls among the unbounded ones (more than 100 - p percent never completed), or there is nothing."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile p={p} is outside 0..100")
    pos = (len(xs) + unbounded - 1) * p / 100.0
    lo = math.floor(pos)
    if lo >= len(xs) or (pos > lo and lo + 1 >= len(xs)):
        return None  # at, or interpolated towards, a request that never completed (or no value at all)
    if pos == lo:
        return float(xs[lo])
    return float(xs[lo] + (xs[lo + 1] - xs[lo]) * (pos - lo))


def summarize(values: Iterable[float | None], unbounded: int = 0) -> dict[str, float | None]:
    """p50, p90, p95, p99, max and mean of the values (all None when there are none); with `unbounded` requests
    that never completed, the percentiles count them as larger than any value (`sorted_percentile`), and max and
    mean are of the values alone."""
    xs = sorted(_clean(values))
    out: dict[str, float | None] = {name: sorted_percentile(xs, q, unbounded) for name, q in _QUANTILES.items()}
    out["max"] = xs[-1] if xs else None
    out["mean"] = sum(xs) / len(xs) if xs else None
    return {name: out[name] for name in PERCENTILES}


# Latencies each request has one of: a request that failed counts as unbounded in their percentiles. ITL pools the
# gaps between events, a request's many or none, so it stays over the gaps the completed requests had.
PER_REQUEST_LATENCIES = ("ttft", "tpot", "e2e")


def median(values: Iterable[float | None]) -> float | None:
    """Median over rounds: the headline figure (the middle round of three)."""
    return percentile(values, 50.0)


def spread_flag(values: Iterable[float | None], threshold: float = SPREAD_THRESHOLD) -> bool:
    """True when the spread (max - min) of the round values is above `threshold` x their median."""
    xs = _clean(values)
    if len(xs) < 2:
        return False
    mid = median(xs)
    return (max(xs) - min(xs)) > threshold * abs(mid) if mid else max(xs) != min(xs)


def tpot(e2e_s: float | None, ttft_s: float | None, output_tokens: int | None) -> float | None:
    """(E2E - TTFT) / (output_tokens - 1), defined only for more than one output token."""
    if e2e_s is None or ttft_s is None or output_tokens is None or output_tokens <= 1:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


def _slo_limits(slo: Any) -> dict[str, float]:
    """SLO limits {ttft_s, tpot_s, e2e_s} from a config SLO model, a dict, or None (no limits)."""
    if slo is None:
        return {}
    get = slo.get if isinstance(slo, Mapping) else (lambda k: getattr(slo, k, None))
    return {k: float(get(k)) for k in ("ttft_s", "tpot_s", "e2e_s") if get(k) is not None}


def meets_slo(request: Mapping[str, Any], slo: Any) -> bool:
    """An ok request that meets every SLO given. A limit on a figure the request lacks is not met."""
    if request.get("status") != "ok":
        return False
    for key, limit in _slo_limits(slo).items():
        value = request.get(key)
        if value is None or value > limit:
            return False
    return True


def goodput_rps(requests: Sequence[Mapping[str, Any]], duration_s: float | None, slo: Any) -> float | None:
    """Requests per second that completed and met every SLO; with no SLO, every completed request.
    Published only under `slo_judged_withheld`'s rule, like the capacity (the same quantity)."""
    if not duration_s or duration_s <= 0:
        return None
    return sum(1 for r in requests if meets_slo(r, slo)) / duration_s


# Figures judged on the SLO: requests within every limit (the capacity search judges its loads the same way).
SLO_JUDGED_FIGURES = ("goodput_rps",)


def slo_judged_withheld(ttft_reliable: bool, slo: Any) -> str | None:
    """Why a figure judged on the SLO (goodput, the capacity) is not published, or None when it is.
    One rule for every path (summary, report, decision, regression check, `dayone bench`): an SLO
    on TTFT or TPOT judges each request by its stream timing, which is withheld where the engine's
    TTFT is unreliable; an SLO on E2E alone does not."""
    stream_timed = [name for name in ("ttft_s", "tpot_s") if name in _slo_limits(slo)]
    if ttft_reliable or not stream_timed:
        return None
    return (f"judged on {' and '.join(stream_timed)}, and this engine's TTFT is unreliable "
            "(stream timing not published)")


def withhold_slo_judged(figures: Mapping[str, Any] | None, ttft_reliable: bool, slo: Any) -> dict[str, Any] | None:
    """`figures` without those judged on the SLO where `slo_judged_withheld` withholds them."""
    if figures is None or slo_judged_withheld(ttft_reliable, slo) is None:
        return None if figures is None else dict(figures)
    return {k: v for k, v in figures.items() if k not in SLO_JUDGED_FIGURES}


def failed_requests(rounds: Sequence[Mapping[str, Any]], share_max: float,
                    errors: Callable[[], Iterable[str | None]] = lambda: ()) -> str | None:
    """Why a performance step failed for its requests, or None: more than `share_max` of its measured
    requests (warmup rounds aside) failed, e.g. "12 of 16 measured requests failed (75%, more than 50%):
    HTTP 500 x12". `errors` gives the failed requests' errors, read only when the step failed."""
    measured = [r for r in rounds if not r.get("warmup")]
    failed = sum(int(r.get("requests_failed") or 0) for r in measured)
    sent = failed + sum(int(r.get("requests_ok") or 0) for r in measured)
    if not sent or failed / sent <= share_max:
        return None
    common = Counter(str(e or "no error text")[:120] for e in errors()).most_common(3)
    why = "; ".join(f"{text} x{n}" for text, n in common)
    return (f"{failed} of {sent} measured requests failed ({failed / sent:.0%}, more than {share_max:.0%})"
            + (f": {why}" if why else ""))


def round_figures(
    requests: Sequence[Mapping[str, Any]], slo: Any = None, error_rate_max: float = 1.0
) -> dict[str, Any]:
    """A round's row figures from its request rows (requests table columns).

    duration = first send to last completion; output TPS = completion tokens of ok requests over
    the duration; ITL percentiles pool every gap of the round; TTFT, TPOT and E2E percentiles count each
    failed request as unbounded (`sorted_percentile`). `status` is "failed" when the error rate is above
    `error_rate_max`.
    """
    ok = [r for r in requests if r.get("status") == "ok"]
    failed = len(requests) - len(ok)
    starts = [r["send_ts"] for r in requests if r.get("send_ts") is not None]
    ends = [r["send_ts"] + r["e2e_s"] for r in ok if r.get("e2e_s") is not None]
    duration = (max(ends) - min(starts)) if starts and ends else None
    error_rate = failed / len(requests) if requests else 0.0
    out_tokens = sum(r.get("completion_tokens") or 0 for r in ok)
    fig: dict[str, Any] = {
        "requests_ok": len(ok),
        "requests_failed": failed,
        "error_rate": error_rate,
        "status": "failed" if error_rate > error_rate_max or not ok else "ok",
        "duration_s": duration,
        "request_tps": len(ok) / duration if duration else None,
        "output_tps": out_tokens / duration if duration else None,
    }
    pools: dict[str, list[float]] = {
        "ttft": [r["ttft_s"] for r in ok if r.get("ttft_s") is not None],
        "tpot": [r["tpot_s"] for r in ok if r.get("tpot_s") is not None],
        "itl": [g for r in ok for g in (r.get("itl_s") or [])],
        "e2e": [r["e2e_s"] for r in ok if r.get("e2e_s") is not None],
    }
    for lat in LATENCIES:
        for name, value in summarize(pools[lat], failed if lat in PER_REQUEST_LATENCIES else 0).items():
            fig[f"{lat}_{name}_s"] = value
    fig["goodput_rps"] = goodput_rps(requests, duration, slo)
    fig["length_deviations"] = sum(1 for r in requests if r.get("length_deviation"))
    return fig


# Figures shown per scenario and concurrency: the median over rounds with the round values.
HEADLINE_FIGURES = (
    "output_tps",
    "request_tps",
    "goodput_rps",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p95_s",
    "itl_p50_s",
    "itl_p99_s",
    "e2e_p50_s",
    "e2e_p95_s",
    "e2e_p99_s",  # stands in for the TTFT tail where stream timing is withheld
)


def over_rounds(rounds: Sequence[Mapping[str, Any]], figures: Sequence[str] = HEADLINE_FIGURES) -> dict[str, Any]:
    """Per figure: median over the measured rounds that did not fail, every round's value, spread flag.

    Warmup rounds never count. Failed rounds are listed in `rounds` (as None) but not in the median.
    """
    measured = [r for r in rounds if not r.get("warmup")]
    out: dict[str, Any] = {}
    for fig in figures:
        values = [r.get(fig) if r.get("status") == "ok" else None for r in measured]
        kept = _clean(values)
        out[fig] = {"median": median(kept), "rounds": values, "spread": spread_flag(kept)}
    return out


def _same_shape(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("input_tokens", "output_tokens", "concurrency", "rate_rps"))


FIRST_ENCOUNTER_FIGURES = ("ttft_p95_s", "ttft_p99_s", "e2e_p95_s", "e2e_p99_s")


def first_encounter_tail(rounds: Sequence[Mapping[str, Any]],
                         warmup_rounds: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any] | None:
    """The first round of a level's shape on a server new to it, shown beside the steady median.

    With warmup on, that round is the warmup round that first met the shape; otherwise it is the
    measured round flagged first_encounter. None when the server had met the shape before both.
    """
    measured = [r for r in rounds if not r.get("warmup")]
    candidates = [w for w in warmup_rounds if w.get("first_encounter") and measured and _same_shape(w, measured[0])]
    candidates += [r for r in measured if r.get("first_encounter")]
    if not candidates:
        return None
    r = candidates[0]
    warm = bool(r.get("warmup"))
    return {"round": r.get("round"), "warmup": warm,
            "source": f"warmup round {r.get('round')}" if warm else f"round {r.get('round')}",
            **{k: r.get(k) for k in FIRST_ENCOUNTER_FIGURES}}


def level_figures(rounds: Sequence[Mapping[str, Any]],
                  warmup_rounds: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A load level's published figures from its rounds rows, computed here only: summary.json (from the
    rounds table), `dayone bench` and the performance scenarios all read them from this function."""
    return {
        "figures": over_rounds(rounds),
        "first_encounter": first_encounter_tail(rounds, warmup_rounds),
        "failed_rounds": sum(1 for r in rounds if r.get("status") == "failed"),
        "length_deviations": sum(int(r.get("length_deviations") or 0) for r in rounds),
    }


def client_load(rows: Sequence[dict[str, Any]], requests: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The CPU the client got per scenario, from client_shards rows (warmup rounds left out): its most
    processes in a round and why (shards_reason), the CPU of its busiest round (in cores: CPU / the round's
    longest process run), its worst round's wait for a core (the worst process), each round that waited
    more than WAIT_FLAG_SHARE, named by level and round with its share, and, from the `requests` rows,
    how many sends had a wide write bracket (send_wide); in runner pods, the most pods of a round, their
    cores, and each round's pods (measured_by)."""
    by_round: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if not r.get("warmup"):
            key = (r.get("scenario") or "", float(r.get("rate_rps") or 0), r.get("concurrency") or 0,
                   r.get("input_tokens") or 0, r.get("output_tokens") or 0, r.get("round") or 0)
            by_round.setdefault(key, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(by_round):
        procs = by_round[key]
        first = procs[0]
        wall = max((p.get("wall_s") or 0.0) for p in procs)
        cpu = sum(p.get("cpu_s") or 0.0 for p in procs)
        shares = [p.get("waited_share") for p in procs]
        waited = None if any(x is None for x in shares) else max(shares)  # type: ignore[type-var]
        s = out.setdefault(key[0], {"scenario": key[0], "rounds": 0, "processes": 0, "cpu_cores": None,
                                    "waited_share": None, "busy_rounds": [], "processes_reasons": [],
                                    "pods": 1, "pod_cores": None, "measured_by": [],
                                    "wide_sends": sum(1 for q in requests if q.get("scenario") == key[0]
                                                      and q.get("send_wide"))})
        s["rounds"] += 1
        if first.get("shards_reason") and first["shards_reason"] not in s["processes_reasons"]:
            s["processes_reasons"].append(first["shards_reason"])
        s["processes"] = max(s["processes"], len(procs))
        rate = first.get("rate_rps")
        level = f"{rate:g} req/s" if rate is not None else f"c={first.get('concurrency')}"
        if first.get("pod_cores"):  # measured in runner pods: how many, of how many cores, each round
            pods = max(int(p.get("pods") or 1) for p in procs)
            s["pods"], s["pod_cores"] = max(s["pods"], pods), first["pod_cores"]
            s["measured_by"].append(f"{level} round {first.get('round')}: {pods} runner pod{'s' if pods > 1 else ''} "
                                    f"of {first['pod_cores']} core{'s' if first['pod_cores'] > 1 else ''}, {len(procs)} client "
                                    f"process{'es' if len(procs) > 1 else ''}")
        if wall > 0:
            s["cpu_cores"] = max(s["cpu_cores"] or 0.0, cpu / wall)
        if waited is not None:
            s["waited_share"] = max(s["waited_share"] or 0.0, waited)
            if waited > WAIT_FLAG_SHARE:
                s["busy_rounds"].append(f"{level} round {first.get('round')}: {waited:.0%}")
    return list(out.values())

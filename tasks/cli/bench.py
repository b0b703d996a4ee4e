"""`dayone bench`: the performance scenarios against a running endpoint, outside Airflow.

Same code path as the DAG's benchmark tasks: a RunConfig, a EngineContext, the warmup, then
`run_perf` per scenario; the tables are written as CSV and Parquet beside a summary.json.

An endpoint started with an API key: `--api-key-env VAR` names the environment variable that holds
the key (never the key itself on the command line, where `ps` and shell history would keep it).
An https endpoint behind an internal CA: `--ca-bundle PEM`, or `--insecure` to skip verification.
summary.json is published: it passes through desensitize (the endpoint's host, the key).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from tasks.config import ConfigError, parse_run_config
from tasks.config.engines import DIALECTS
from tasks.engines.context import EngineContext, endpoint_for
from tasks.engines.access import access_from_args, add_access_args, tls_fields
from tasks.core.names import PERF_SCENARIOS, SCENARIO_SWITCHES
from tasks.state.storage import RunDir, new_run_id, run_id_of
from tasks.state.tables import to_csv_bytes, to_frame, to_parquet_bytes

log = logging.getLogger("dayone.bench")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="run performance scenarios (short, prefill, decode, rate) against a running endpoint",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--endpoint", required=True, help="base URL of the server, e.g. http://127.0.0.1:30000")
    p.add_argument("--dialect", required=True, choices=DIALECTS, help="API dialect of the server")
    p.add_argument("--model", required=True, help="served model name, as /v1/models lists it")
    p.add_argument("--engine", help="engine name in the tables (default: the dialect)")
    p.add_argument("--scenario", default="short", help="comma-separated: short,prefill,decode,rate (default short)")
    p.add_argument("--concurrency", help="comma-separated concurrency levels, e.g. 1,4,8,16,32 (not for rate)")
    p.add_argument("--rates", help="comma-separated request rates per second for the rate scenario, e.g. 1,4")
    p.add_argument("--rounds", type=int, help="rounds per level (default 3)")
    p.add_argument("--requests-per-round", type=int, help="requests per round (default 8 x concurrency, at least 32)")
    p.add_argument("--input-tokens", type=int, help="prompt length in tokens (default per scenario)")
    p.add_argument("--output-tokens", type=int, help="output length in tokens (default per scenario)")
    p.add_argument("--slo", help="goodput SLOs in milliseconds, e.g. ttft=500,tpot=50,e2e=10000")
    p.add_argument("--timeout", type=float, help="per-request timeout in seconds (default 600)")
    add_access_args(p)
    p.add_argument("--no-warmup", action="store_true", help="skip the warmup matrix (first rounds are flagged)")
    p.add_argument("--run-id", help="run id in the tables (default bench-<UTC time>)")
    p.add_argument("--out", required=True, help="output directory for the tables and summary.json")
    p.set_defaults(run=run)


def _ints(text: str, field: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError([(field, f"{text!r} is not a comma-separated list of integers", "e.g. 1,4,8")]) from None


def _floats(text: str, field: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError([(field, f"{text!r} is not a comma-separated list of numbers", "e.g. 1,4.5")]) from None


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft=500,tpot=50,e2e=10000` (milliseconds) -> {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": 10.0}."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, value = item.partition("=")
        name = name.strip().lower()
        if name not in ("ttft", "tpot", "e2e"):
            raise ConfigError([("--slo", f"unknown SLO {name!r}", "use ttft=MS, tpot=MS and/or e2e=MS")])
        try:
            out[f"{name}_s"] = float(value) / 1000.0
        except ValueError:
            raise ConfigError([("--slo", f"{item!r} has no number of milliseconds", "e.g. ttft=500")]) from None
    return out


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    scenarios = [s.strip() for s in args.scenario.split(",") if s.strip()]
    for s in scenarios:
        if s not in PERF_SCENARIOS:
            raise ConfigError([("--scenario", f"{s!r} is not a performance scenario", f"use {', '.join(PERF_SCENARIOS)}")])
    engine = args.engine or args.dialect
    sc: dict[str, Any] = {name: {"enabled": name in scenarios} for name in SCENARIO_SWITCHES}
    sc["warmup"] = not args.no_warmup
    for name in scenarios:
        if args.rounds is not None:
            sc[name]["rounds"] = args.rounds
        if args.requests_per_round is not None:
            sc[name]["requests_per_round"] = args.requests_per_round
        if args.input_tokens is not None:
            sc[name]["input_tokens"] = args.input_tokens
        if args.output_tokens is not None:
            sc[name]["output_tokens"] = args.output_tokens
        if name == "rate" and args.rates:
            sc[name]["rates"] = _floats(args.rates, "--rates")
        if name != "rate" and args.concurrency:
            sc[name]["concurrency"] = _ints(args.concurrency, "--concurrency")
    doc: dict[str, Any] = {
        "run_id": args.run_id or new_run_id("bench"),
        "model": {"name": args.model},
        "engines": [{"name": engine, "dialect": args.dialect, "launcher": "external", "endpoint": args.endpoint,
                     **tls_fields(args)}],
        "scenarios": sc,
        "slo": parse_slo(args.slo),
    }
    if args.timeout is not None:
        doc["request_timeout_s"] = args.timeout
    return doc


def send_brackets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The measured requests' write brackets: how many were wide (their send is the stamp before the
    write) and the spread of the widths."""
    from tasks.load.client import SEND_BRACKET_WIDE_S

    widths = sorted(r["send_bracket_s"] for r in rows if r.get("send_bracket_s") is not None)
    at = lambda q: widths[min(len(widths) - 1, int(q * len(widths)))] if widths else None  # noqa: E731
    return {"requests": len(widths), "wide": sum(1 for r in rows if r.get("send_wide")),
            "wide_over_s": SEND_BRACKET_WIDE_S, "p50_s": at(0.5), "p99_s": at(0.99),
            "max_s": widths[-1] if widths else None}


def client_processes(run_dir: RunDir, engine: str) -> dict[str, list[str]]:
    """Each scenario's client-process choices, as recorded on its client_shards rows."""
    out: dict[str, list[str]] = {}
    for r in run_dir.read_rows("client_shards", engine):
        reasons = out.setdefault(r["scenario"], [])
        if r.get("shards_reason") and r["shards_reason"] not in reasons:
            reasons.append(r["shards_reason"])
    return out


def write_tables(run_dir: RunDir, out: Path, engine: str) -> dict[str, int]:
    """The requests and rounds tables as CSV and Parquet in `out`; returns row counts."""
    counts = {}
    for table in ("requests", "rounds"):
        frame = to_frame(table, run_dir.read_rows(table, engine))
        (out / f"{table}.csv").write_bytes(to_csv_bytes(frame))
        (out / f"{table}.parquet").write_bytes(to_parquet_bytes(frame))
        counts[table] = len(frame)
    return counts


def run(args: argparse.Namespace) -> int:
    from tasks.cli.live import watched
    from tasks.core.desensitize import desensitize, shown_endpoint
    from tasks.state.progress import step_running
    from tasks.evidence.restarts import restart_summary, watch_step
    from tasks.scenarios.perf import run_perf
    from tasks.scenarios.warmup import reset_shapes, run_warmup
    from tasks.targets.base import identity_digest
    from tasks.targets.sim import SimLauncher

    config = parse_run_config(config_from_args(args))
    engine = config.engines[0].name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir(run_id_of(config), root=out / "staging")
    digest = identity_digest({"endpoint": args.endpoint, "dialect": args.dialect, "model": args.model})
    access = access_from_args(args, config.engines[0])
    ctx = EngineContext(config, endpoint_for(config, engine, args.endpoint, digest, access), run_dir)
    # The server's history is unknown to the CLI: every shape counts as new until warmed here.
    reset_shapes(run_dir, engine)
    summary: dict[str, Any] = {"run_id": config.run_id, "engine": engine, "endpoint": args.endpoint,
                               "model": args.model, "slo": config.slo.model_dump(), "scenarios": {}}
    # An external endpoint's restart count is only known when it is DayOne's simulator; /metrics speaks for any.
    restart_count = lambda: SimLauncher().restart_count(args.endpoint.rstrip("/"))  # noqa: E731
    failed_rounds = 0
    with watched(run_dir, lambda: out / "bench.log", "dayone bench"):
        if config.scenarios.warmup:
            with step_running(run_dir, "warmup", [engine]):
                summary["warmup"] = watch_step(ctx, "warmup", restart_count, lambda: run_warmup(ctx))
        for name in PERF_SCENARIOS:
            if getattr(config.scenarios, name).enabled:
                with step_running(run_dir, name, [engine]):
                    result = watch_step(ctx, name, restart_count, lambda: run_perf(ctx, name))
                summary["scenarios"][name] = result
                failed_rounds += sum(level["failed_rounds"] for level in result["levels"])
    _apply_stream_rule(summary, run_dir, engine)
    summary["restarts"] = restart_summary(run_dir.read_rows("checks", engine))
    summary["send_brackets"] = send_brackets(
        [r for r in run_dir.read_rows("requests", engine) if r.get("scenario") in PERF_SCENARIOS])
    summary["client_processes"] = client_processes(run_dir, engine)
    summary["rows"] = write_tables(run_dir, out, engine)
    # published like every other summary: the endpoint's host and the key never land in it
    summary = desensitize(summary, extra_secrets=access.secrets)
    summary["endpoint"] = shown_endpoint(args.endpoint)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    _print_summary(summary)
    log.info("tables and summary.json written to %s", out)
    return 1 if failed_rounds or summary["restarts"]["restarted_steps"] else 0


def _apply_stream_rule(summary: dict[str, Any], run_dir: RunDir, engine: str) -> None:
    """The one publication rule (tasks/stats/reliability.py) over the measured streams: where
    they did not stream, TTFT, TPOT and ITL are withheld from the summary and the printout, and so is
    goodput where the SLO judges it on them (tasks/stats/figures.py slo_judged_withheld)."""
    from tasks.stats.reliability import ttft_verdict, withhold_stream_timed
    from tasks.stats.figures import withhold_slo_judged

    measured = [r for r in run_dir.read_rows("requests", engine) if r.get("scenario") in PERF_SCENARIOS]
    summary["ttft"] = ttft_verdict(None, measured)
    if summary["ttft"]["reliable"]:
        return
    for result in summary["scenarios"].values():
        for level in result["levels"]:
            level["figures"] = withhold_stream_timed(withhold_slo_judged(level["figures"], False, summary["slo"]))
            level["first_encounter"] = withhold_stream_timed(level["first_encounter"])


def _fmt(v: Any, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}"


def _print_summary(summary: dict[str, Any]) -> None:
    published = summary["ttft"]["reliable"]
    if not published:
        print(f"{summary['engine']}: {summary['ttft']['reason']}")
    lat = "TTFT" if published else "E2E"
    for step in summary["restarts"]["restarted_steps"]:
        print(f"{summary['engine']}: ENGINE RESTARTED in {step}, its figures are flagged: "
              f"{summary['restarts']['steps'][step]['reason']}")
    for name, result in summary["scenarios"].items():
        tpot = " | TPOT p50 ms" if published else ""
        print(f"{summary['engine']} {name}: level | output tok/s (rounds) | {lat} p50/p99 ms{tpot} | "
              f"first-encounter {lat} p95/p99 ms")
        for level in result["levels"]:
            f = level["figures"]
            key = lat.lower()
            label = f"rate {level['rate_rps']:g}/s" if level["rate_rps"] is not None else f"c={level['concurrency']}"
            rounds = "/".join(_fmt(v) for v in f["output_tps"]["rounds"])
            spread = " SPREAD>25%" if f["output_tps"]["spread"] else ""
            fe = level["first_encounter"]
            fe_text = (f"{_fmt(fe[f'{key}_p95_s'], 1000)}/{_fmt(fe[f'{key}_p99_s'], 1000)} ({fe['source']})"
                       if fe else "-")
            p50 = f.get(f"{key}_p50_s") or {}
            p99 = f.get(f"{key}_p99_s") or {}
            tpot_text = f" | {_fmt(f['tpot_p50_s']['median'], 1000, 2)}" if published else ""
            print(
                f"  {label:>12} | {_fmt(f['output_tps']['median'])} ({rounds}){spread} | "
                f"{_fmt(p50.get('median'), 1000)}/{_fmt(p99.get('median'), 1000)}{tpot_text} | {fe_text}"
                + (f" | {level['failed_rounds']} failed rounds" if level["failed_rounds"] else "")
            )

"""`dayone longctx` and `dayone cache`: the long-context needles (with the boundary re-test) and
the prefix-cache trial against a running endpoint, outside Airflow.

Same code path as the DAG's tasks: a RunConfig, a EngineContext, then run_long_context /
run_boundary / run_prefix_cache; the tables are written as CSV and Parquet in --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tasks.config import ConfigError, RunConfig, parse_run_config
from tasks.config.engines import DIALECTS
from tasks.engines.context import EngineContext, endpoint_for
from tasks.engines.access import access_from_args, add_access_args, tls_fields
from tasks.stats.reliability import WITHHELD
from tasks.core.names import SCENARIO_SWITCHES
from tasks.state.storage import RunDir, new_run_id, run_id_of
from tasks.state.tables import to_csv_bytes, to_frame, to_parquet_bytes



# ---- shared by the check, longctx and cache commands ---------------------------------------------


def add_endpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", required=True, help="base URL of the server, e.g. http://127.0.0.1:30000")
    p.add_argument("--dialect", required=True, choices=DIALECTS, help="API dialect of the server")
    p.add_argument("--model", required=True, help="served model name, as /v1/models lists it")
    p.add_argument("--engine", help="engine name in the tables (default: the dialect)")
    p.add_argument("--context-limit", type=int, help="model context window in tokens (default 1048576)")
    p.add_argument("--template-overhead", type=int, help="tokens the chat template adds (default 64)")
    p.add_argument("--timeout", type=float, help="per-request timeout in seconds (default 600)")
    p.add_argument("--run-id", help="run id in the tables (default <command>-<UTC time>)")
    p.add_argument("--out", required=True, help="output directory for the tables")
    add_access_args(p)


def ints(text: str, field: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError([(field, f"{text!r} is not a comma-separated list of integers", "e.g. 32768,131072")]) from None


def floats(text: str, field: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError([(field, f"{text!r} is not a comma-separated list of numbers", "e.g. 0.1,0.5,0.9")]) from None


def config_doc(args: argparse.Namespace, command: str, scenarios: dict[str, Any]) -> dict[str, Any]:
    """A run config for one external endpoint with only `scenarios` enabled."""
    sc: dict[str, Any] = {name: {"enabled": False} for name in SCENARIO_SWITCHES}
    sc["warmup"] = False
    sc.update(scenarios)
    model: dict[str, Any] = {"name": args.model}
    if args.context_limit is not None:
        model["context_limit_tokens"] = args.context_limit
    if args.template_overhead is not None:
        model["template_overhead_tokens"] = args.template_overhead
    doc: dict[str, Any] = {
        "run_id": args.run_id or new_run_id(command),
        "model": model,
        "engines": [{"name": args.engine or args.dialect, "dialect": args.dialect, "launcher": "external",
                     "endpoint": args.endpoint, **tls_fields(args)}],
        "scenarios": sc,
    }
    if args.timeout is not None:
        doc["request_timeout_s"] = args.timeout
    return doc


def context_for(args: argparse.Namespace, config: RunConfig) -> tuple[EngineContext, Path]:
    from tasks.targets.base import identity_digest

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir(run_id_of(config), root=out / "staging")
    digest = identity_digest({"endpoint": args.endpoint, "dialect": args.dialect, "model": args.model})
    engine = config.engines[0].name
    access = access_from_args(args, config.engines[0])
    return EngineContext(config, endpoint_for(config, engine, args.endpoint, digest, access), run_dir), out


def write_tables(ctx: EngineContext, out: Path, tables: tuple[str, ...]) -> dict[str, int]:
    """The named tables as CSV and Parquet in `out`; returns row counts."""
    counts = {}
    for table in tables:
        frame = to_frame(table, ctx.run_dir.read_rows(table, ctx.endpoint.engine))
        (out / f"{table}.csv").write_bytes(to_csv_bytes(frame))
        (out / f"{table}.parquet").write_bytes(to_parquet_bytes(frame))
        counts[table] = len(frame)
    return counts


# ---- longctx and cache -----------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "longctx",
        help="long-context needles (and the boundary re-test) against a running endpoint",
        description="Needles at exact prompt lengths and depths, cache cleared before each request.",
    )
    add_endpoint_args(p)
    p.add_argument("--lengths", help="comma-separated prompt lengths in tokens (default 32768,131072,263168,524288)")
    p.add_argument("--depths", help="comma-separated needle depths in 0..1 (default 0.1,0.5,0.9)")
    p.add_argument("--no-model-limit", action="store_true", help="do not add the model-limit length")
    p.add_argument("--output-tokens", type=int, help="max output tokens per needle (default 128)")
    p.add_argument("--prompt-style", choices=("chat", "completion"), help="chat (default) or completion")
    p.add_argument("--boundary", help="also run the boundary re-test at these lengths, e.g. 261000,263000,289000")
    p.add_argument("--settle-s", type=float, default=5.0,
                   help="boundary: seconds to wait after each request before reading the restart count (default 5)")
    p.set_defaults(run=run_longctx)

    c = subparsers.add_parser(
        "cache",
        help="prefix-cache trial: cold + repeats, client TTFT and server counters, with the verdict",
        description="One ~4,400-token prompt: clear, 1 cold request, N repeats; /metrics around each.",
    )
    add_endpoint_args(c)
    c.add_argument("--prompt-tokens", type=int, help="prompt length in tokens (default 4400)")
    c.add_argument("--repeats", type=int, help="exact repeats after the cold request (default 5)")
    c.add_argument("--output-tokens", type=int, help="output tokens per request (default 16)")
    c.set_defaults(run=run_cache)


def run_longctx(args: argparse.Namespace) -> int:
    from tasks.evidence.boundary import run_boundary
    from tasks.evidence.needles import run_long_context
    from tasks.evidence.restarts import watch_step
    from tasks.targets.sim import SimLauncher

    lc: dict[str, Any] = {"enabled": True, "include_model_limit": not args.no_model_limit}
    if args.lengths:
        lc["lengths"] = ints(args.lengths, "--lengths")
    if args.depths:
        lc["depths"] = floats(args.depths, "--depths")
    if args.output_tokens is not None:
        lc["output_tokens"] = args.output_tokens
    if args.prompt_style:
        lc["prompt_style"] = args.prompt_style
    scenarios: dict[str, Any] = {"long_context": lc}
    if args.boundary:
        scenarios["boundary"] = {"enabled": True, "lengths": ints(args.boundary, "--boundary")}
    config = parse_run_config(config_doc(args, "longctx", scenarios))
    ctx, out = context_for(args, config)
    # An external endpoint's restarts are only known when it is DayOne's simulator; /metrics speaks for any.
    restart_count = lambda: SimLauncher().restart_count(args.endpoint.rstrip("/"))  # noqa: E731
    rows = watch_step(ctx, "long_context", restart_count, lambda: {"rows": run_long_context(ctx)})["rows"]
    boundary_rows: list[dict] = []
    if args.boundary:
        boundary_rows = watch_step(ctx, "boundary", restart_count, lambda: {
            "rows": run_boundary(ctx, restart_count, settle_s=args.settle_s)})["rows"]
    counts = write_tables(ctx, out, ("needles", "checks"))
    needles = rows + [r for r in boundary_rows if "depth" in r]
    # The TTFT rule (tasks/stats/reliability.py): one stream that held its output back withholds them all.
    defects = [f"{r['target_tokens']} tokens at {r['depth']:.0%}: {r['stream_defect']}" for r in needles
               if r.get("stream_defect")]
    print(f"{ctx.endpoint.engine} needles: target tokens | prompt tokens | depth | attempt | TTFT s | passed | answer")
    for r in needles:
        ttft = "not published" if defects else "-" if r["ttft_s"] is None else f"{r['ttft_s']:.3f}"
        print(f"  {r['scenario']:>12} {r['target_tokens']:>8} | {r['prompt_tokens']} | {r['depth']:.2f} | "
              f"{r['attempt']}{' (first)' if r['first_encounter'] else ''} | {ttft} | "
              f"{'PASS' if r['passed'] else 'FAIL'} | {(r['answer'] or r['error'] or '')[:60]!r}")
    if defects:
        print(f"  {WITHHELD}{len(defects)} of {len(needles)} needle streams did not deliver output as generated "
              f"(e.g. {'; '.join(defects[:2])})")
    checks = ctx.run_dir.read_rows("checks", ctx.endpoint.engine)
    for r in checks:
        print(f"  {r['check']} ({r['scenario']}): {r['outcome']} ({r['evidence']['reason']})")
    print(f"rows written to {out}: {json.dumps(counts)}")
    failed = [r for r in rows + boundary_rows + checks if r.get("passed") is False or r.get("outcome") == "fail"]
    return 1 if failed else 0


def run_cache(args: argparse.Namespace) -> int:
    from tasks.evidence.cache import run_prefix_cache
    from tasks.targets.sim import SimLauncher

    pc: dict[str, Any] = {"enabled": True}
    if args.prompt_tokens is not None:
        pc["prompt_tokens"] = args.prompt_tokens
    if args.repeats is not None:
        pc["repeats"] = args.repeats
    if args.output_tokens is not None:
        pc["output_tokens"] = args.output_tokens
    config = parse_run_config(config_doc(args, "cache", {"prefix_cache": pc}))
    ctx, out = context_for(args, config)
    # An external endpoint's restart count is only known when it is DayOne's simulator; /metrics speaks for any.
    verdict = run_prefix_cache(ctx, lambda: SimLauncher().restart_count(args.endpoint.rstrip("/")))
    counts = write_tables(ctx, out, ("cache_trials", "server_metrics"))
    (out / "prefix_cache.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for r in ctx.run_dir.read_rows("cache_trials", ctx.endpoint.engine):
        if verdict.get("withheld"):
            ttft = "not published"
        else:
            ttft = "-" if r["ttft_s"] is None else f"{r['ttft_s'] * 1000:.1f} ms"
        server = ("server deltas not published" if r.get("deltas_unpublished") else
                  f"server queries +{r['server_queries_delta']}, hits +{r['server_hits_delta']}")
        e2e = "-" if r["e2e_s"] is None else f"{r['e2e_s'] * 1000:.1f} ms"
        print(f"  trial {r['trial']}{' (cold)' if r['trial'] == 0 else ''}: TTFT {ttft}, E2E {e2e}, {server}")
    print(f"{ctx.endpoint.engine} prefix cache: {verdict['verdict']} ({verdict['reason']})")
    print(f"rows written to {out}: {json.dumps(counts)}")
    return 0

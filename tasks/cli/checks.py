"""`dayone check`: the functional checks against a running endpoint, outside Airflow.

Same code path as the DAG's functional task; writes the `checks` table as CSV and Parquet, and
prints each check with its reason and the TTFT reliability verdict that follows from them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tasks.config import parse_run_config
from tasks.cli.evidence import add_endpoint_args, config_doc, context_for, write_tables


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "check",
        help="functional checks (model list, chat, streaming, reasoning, tools, image, echo, usage, SDK)",
        description=__doc__.splitlines()[0],
    )
    add_endpoint_args(p)
    p.add_argument("--skip", help="comma-separated check names to skip (reported not_applicable)")
    p.add_argument("--model-reasons", choices=("yes", "no"),
                   help="what you know of the model (model.reasoning): with yes, no reasoning at all fails "
                        "reasoning_split instead of being not_applicable")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tasks.checks import run_functional
    from tasks.stats.reliability import ttft_verdict

    skip = [s.strip() for s in (args.skip or "").split(",") if s.strip()]
    doc = config_doc(args, "check", {"functional": {"enabled": True, "skip": skip}})
    if args.model_reasons:
        doc["model"]["reasoning"] = args.model_reasons == "yes"
    config = parse_run_config(doc)
    ctx, out = context_for(args, config)
    rows = run_functional(ctx)
    counts = write_tables(ctx, out, ("checks",))
    verdict = ttft_verdict(rows)
    (out / "ttft_reliability.json").write_text(json.dumps(verdict, indent=2) + "\n", encoding="utf-8")
    print(f"{ctx.endpoint.engine} functional checks:")
    for r in rows:
        print(f"  {r['check']:<22} {r['outcome']:<15} {r['evidence'].get('reason', '')}")
    print(f"TTFT {'reliable' if verdict['reliable'] else 'UNRELIABLE'}: {verdict['reason']}")
    print(f"rows written to {out}: {json.dumps(counts)}")
    return 1 if any(r["outcome"] == "fail" for r in rows) else 0

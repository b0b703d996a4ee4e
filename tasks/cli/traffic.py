"""`dayone trace synth`: write a synthetic Mooncake-format trace (tasks/traffic/trace_synth.py)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="request traces: write a synthetic one")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    s = verbs.add_parser("synth", help="write a synthetic Mooncake-format trace, the same bytes for the same seed")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--requests", type=int, default=200, help="rows to write")
    s.add_argument("--rate", type=float, default=10.0, help="mean arrival rate (requests/s)")
    s.add_argument("--max-input-tokens", type=int, default=4096)
    s.add_argument("--max-output-tokens", type=int, default=256)
    s.add_argument("--out", required=True, help="file to write, or - for stdout")
    s.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tasks.traffic.trace_synth import synthetic_lines

    if args.requests < 1 or args.rate <= 0:
        print("dayone trace synth: --requests must be >= 1 and --rate > 0", file=sys.stderr)
        return 2
    lines = synthetic_lines(args.seed, args.requests, rate_rps=args.rate, max_input_tokens=args.max_input_tokens,
                            max_output_tokens=args.max_output_tokens)
    if args.out == "-":
        sys.stdout.writelines(lines)
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return 0

"""`dayone`: every pipeline step as a command, so a Kubernetes pod can run any of them.

Each subcommand lives with its module, which exposes `register(subparsers)`; this file only
lists them, and imports a module only when its command runs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tasks.config import ConfigError

# command -> module exposing register(subparsers) and a `run(args)` set as the parser default
COMMANDS: dict[str, str] = {
    "sim": "tasks.sim.cli",
    "bench": "tasks.cli.bench",
    "check": "tasks.cli.checks",
    "longctx": "tasks.cli.evidence",
    "cache": "tasks.cli.evidence",
    "pin": "tasks.k8s.images",
    "render": "tasks.cli.k8s",
    "step": "tasks.cli.step",
    "trace": "tasks.cli.traffic",
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dayone", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = COMMANDS.get(argv[0]) if argv else None
    seen = set()
    for name, module in COMMANDS.items():
        if wanted and module != wanted:
            sub.add_parser(name, help=f"(run `dayone {name} -h`)")  # listed, not loaded
            continue
        if module in seen:
            continue
        seen.add(module)
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except ConfigError as exc:
        print(f"dayone {args.command}: invalid config: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

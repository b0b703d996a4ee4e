"""`dayone sim` and `python -m tasks.sim`: run the engine simulator.

    dayone sim --dialect vllm --host 127.0.0.1 --port 8000 --profile slow.yaml --set slots=8

The profile file, then --profile-json, then each --set KEY.PATH=VALUE (and the named options)
are merged in that order. With faults.restart_on_crash a supervisor process respawns the server
after a crash and passes it the restart count, which /sim/state shows.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tasks.config.sim_profile import ProfileError, load_profile, parse_override

_NAMED = {  # option -> profile field
    "model": "model",
    "context_limit": "context_limit",
    "startup_delay_s": "startup_delay_s",
    "slots": "slots",
    "seed": "seed",
    "jit_delay_s": "jit_delay_s",
    "itl_s": "itl_s",
    "tokens_per_event": "tokens_per_event",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dialect", choices=("sglang", "vllm", "openai"), default="sglang")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--profile", help="YAML file of profile fields (tasks/config/sim_profile.py)")
    parser.add_argument("--profile-json", help="JSON object of profile fields, merged over --profile")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override one profile field, e.g. --set faults.stall.seconds=2 (repeatable)")
    parser.add_argument("--model")
    parser.add_argument("--context-limit", type=int)
    parser.add_argument("--startup-delay-s", type=float)
    parser.add_argument("--slots", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--jit-delay-s", type=float)
    parser.add_argument("--itl-s", type=float)
    parser.add_argument("--tokens-per-event", type=int)
    # Internal: set by the supervisor for the server process it spawns.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--restarts", type=int, default=0, help=argparse.SUPPRESS)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sim", help="run DayOne's engine simulator", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        overrides = [parse_override(item) for item in args.set]
        overrides += [{field: getattr(args, opt)} for opt, field in _NAMED.items() if getattr(args, opt) is not None]
        profile = load_profile(args.profile, args.profile_json, overrides)
    except (ProfileError, OSError) as exc:
        print(f"dayone sim: {exc}", file=sys.stderr)
        return 2
    if profile.faults.restart_on_crash and not args.child:
        from tasks.sim.supervisor import supervise

        return supervise(_module_argv(args))
    from tasks.sim.server import run_server

    return run_server(args.dialect, profile, args.host, args.port, args.restarts)


def _module_argv(args: argparse.Namespace) -> list[str]:
    """This server's arguments for `python -m tasks.sim`, as the supervisor passes them on."""
    argv = ["--dialect", args.dialect, "--host", args.host, "--port", str(args.port)]
    if args.profile:
        argv += ["--profile", args.profile]
    if args.profile_json:
        argv += ["--profile-json", args.profile_json]
    for item in args.set:
        argv += ["--set", item]
    for opt in _NAMED:
        value = getattr(args, opt)
        if value is not None:
            argv += ["--" + opt.replace("_", "-"), str(value)]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.sim", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))

"""llama.cpp's server on this machine: startup time, prompt and decode speed, parallel slots.

Method: each variant is started through DayOne's local target (pin, deploy, wait ready: the DAG's
path) with SmolLM2-135M-Instruct Q4_1; speeds come from llama.cpp's own per-request `timings`
(server side, so the client's scheduling does not count). Decode is measured at one stream and
at 4 concurrent streams; the parallel-1 variant is the reference for the parallel-4 one in the
same run (a ratio, since absolute figures move with whatever else the machine is doing).

    .venv/bin/python bench/llamacpp_engine.py [--threads N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tasks.config import parse_run_config
from tasks.state.storage import RunDir
from tasks.targets.local import LocalTarget

MODEL = "bench-llamacpp"
PROMPT_WORDS = 400
DECODE_TOKENS = 64


def _config(parallel: int, threads: int | None) -> object:
    settings = {"model": "smollm2", "ctx_size": 4096, "parallel": parallel}
    if threads:
        settings["threads"] = threads
    return parse_run_config({
        "model": {"name": MODEL, "context_limit_tokens": 4096},
        "engines": [{"name": f"p{parallel}", "dialect": "llamacpp", "launcher": "llamacpp", "llamacpp": settings}],
        "scenarios": {"long_context": {"enabled": False}, "boundary": {"enabled": False}},
    })


def _complete(client: httpx.Client, base: str, body: dict) -> dict:
    r = client.post(base + "/v1/completions", json={"model": MODEL, **body})
    r.raise_for_status()
    return r.json()


def measure(parallel: int, threads: int | None, root: Path) -> dict[str, float]:
    config = _config(parallel, threads)
    engine, target = config.engines[0], LocalTarget()
    run_dir = RunDir(f"bench-p{parallel}", root=root)
    started = time.monotonic()
    dep = target.deploy(config, engine, run_dir, target.pin(config, engine))
    try:
        target.wait_ready(config, dep, 120)
        ready_s = time.monotonic() - started
        with httpx.Client(timeout=300) as client:
            prompt = " ".join(f"word{i}" for i in range(PROMPT_WORDS))
            timings = _complete(client, dep.base_url, {"prompt": prompt, "max_tokens": 1})["timings"]
            prompt_tps = timings["prompt_per_second"]
            one = [
                _complete(client, dep.base_url, {"prompt": f"Story {i}:", "max_tokens": DECODE_TOKENS,
                                                 "ignore_eos": True})["timings"]["predicted_per_second"]
                for i in range(3)
            ]
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                outs = list(pool.map(lambda i: _complete(client, dep.base_url, {
                    "prompt": f"Tale {i}:", "max_tokens": DECODE_TOKENS, "ignore_eos": True}), range(8)))
            four_tps = sum(o["usage"]["completion_tokens"] for o in outs) / (time.monotonic() - t0)
        return {"ready_s": ready_s, "prompt_tps": prompt_tps, "decode_tps_1": statistics.median(one),
                "decode_tps_4_aggregate": four_tps}
    finally:
        target.teardown(config, engine.name, run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="server threads (default: the launcher's)")
    args = parser.parse_args()
    from importlib.metadata import version

    print("method: local target deploy -> ready, llama.cpp server-side timings; 4-stream decode from the client")
    print(f"environment: {platform.machine()} {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"xllamacpp {version('xllamacpp')}, SmolLM2-135M-Instruct Q4_1, threads {args.threads or 'default'}")
    with tempfile.TemporaryDirectory() as tmp:
        results = {p: measure(p, args.threads, Path(tmp)) for p in (1, 4)}
    for p, r in results.items():
        print(f"parallel {p}: ready {r['ready_s']:.2f} s, prompt {r['prompt_tps']:.0f} tok/s, decode 1 stream "
              f"{r['decode_tps_1']:.0f} tok/s, decode 4 streams {r['decode_tps_4_aggregate']:.0f} tok/s aggregate")
    ratio = results[4]["decode_tps_4_aggregate"] / results[1]["decode_tps_4_aggregate"]
    print(f"parallel 4 vs 1, 4-stream aggregate decode: x{ratio:.2f}")


if __name__ == "__main__":
    main()

"""Warmup and first-encounter bookkeeping (PROTOCOL.md sections 4 and 5).

The shapes a server has seen since it was (re)deployed live in the run directory, in
state/<engine>/shapes.json, so every task of the run (and a retry) sees the same history. The
deploy step calls `reset_shapes`; the first round of a shape not in the set is flagged
`first_encounter` and kept, warmup rounds included.

The warmup matrix covers the real traffic's shapes, the Day-1 report's warning (a new shape's first
encounter costs a long tail): the performance scenarios' shapes, the traffic scenarios' bucketed ones, and
the length buckets of the trace's window and the dataset's rows. It is kept as warmup_matrix.json, archived
and shown in the report: the warmup a production deployment of this model should run before serving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tasks.config import RunConfig
from tasks.engines.context import EngineContext
from tasks.load.client import new_session, run_async
from tasks.load.plan import Shape
from tasks.load.progress import Progress
from tasks.load.rounds import RoundPlan, run_round
from tasks.load.shards import shard_plan
from tasks.core.names import PERF_SCENARIOS
from tasks.state.storage import RunDir

WARMUP_SCENARIO = "warmup"
FILE_WARMUP_CONCURRENCY = 2  # a trace's or dataset's length bucket: a few requests (two waves of two)
CHARS_PER_TOKEN = 4  # a dataset prompt's tokens, estimated: about 4 characters of text make a token


def _state(engine: str) -> str:
    from tasks.state.documents import warmed_shapes_doc

    return warmed_shapes_doc(engine)


def seen_shapes(run_dir: RunDir, engine: str) -> set[str]:
    doc = run_dir.read_json(_state(engine), default={}) or {}
    return set(doc.get("shapes", []))


def mark_seen(run_dir: RunDir, engine: str, shape: Shape) -> None:
    shapes = seen_shapes(run_dir, engine)
    if shape.key not in shapes:
        run_dir.write_json(_state(engine), {"shapes": sorted(shapes | {shape.key})})


def reset_shapes(run_dir: RunDir, engine: str) -> None:
    """Forget every shape: the server was (re)deployed and has compiled nothing yet."""
    run_dir.write_json(_state(engine), {"shapes": []})


def is_first_encounter(run_dir: RunDir, engine: str, shape: Shape) -> bool:
    return shape.key not in seen_shapes(run_dir, engine)


def scenario_shapes(config: RunConfig, scenario: str) -> list[Shape]:
    """The shapes one performance scenario runs, in order."""
    s = getattr(config.scenarios, scenario)
    if scenario == "rate":
        return [Shape(s.input_tokens, s.output_tokens, rate_rps=float(r)) for r in s.rates]
    return [Shape(s.input_tokens, s.output_tokens, c) for c in s.concurrency]


def run_shapes(config: RunConfig, s3: Callable[[], Any] | None = None) -> list[Shape]:
    """The warmup matrix's shapes, in order (`warmup_matrix`)."""
    return list(warmup_matrix(config, s3))


def warmup_matrix(config: RunConfig, s3: Callable[[], Any] | None = None) -> dict[Shape, list[str]]:
    """The warmup matrix: every shape of every enabled performance and traffic scenario, and the length buckets
    of the trace's window and the dataset's rows, without repeats; each with the scenarios whose traffic has it.
    `s3` builds the client a trace or dataset in S3 is read with."""
    from tasks.scenarios.traffic_shapes import sessions_shapes, shared_prefix_shapes

    sc = config.scenarios
    found: dict[Shape, list[str]] = {}
    named = [(name, scenario_shapes(config, name)) for name in PERF_SCENARIOS if getattr(sc, name).enabled]
    named += [("sessions", sessions_shapes(config) if sc.sessions.enabled else []),  # their own shapes, bucketed
              ("shared_prefix", shared_prefix_shapes(config) if sc.shared_prefix.enabled else []),
              ("trace", trace_buckets(config, s3) if sc.trace.enabled else []),
              ("dataset", dataset_buckets(config, s3) if sc.dataset.enabled else [])]
    for name, shapes in named:
        for shape in shapes:
            found.setdefault(shape, [])
            if name not in found[shape]:
                found[shape].append(name)
    return found


def length_buckets(config: RunConfig, lengths: Iterable[tuple[int, int]]) -> list[Shape]:
    """(prompt, output) lengths as the shapes that warm them: each prompt length's bucket (a power of two, the
    lengths an engine compiles alike; within the context window), the longest output met in it (decode steps
    reuse one graph per batch size, so its length only has to reach the longest), FILE_WARMUP_CONCURRENCY
    requests in flight."""
    from tasks.scenarios.traffic_shapes import bucket_tokens

    longest: dict[int, int] = {}
    for prompt, output in lengths:
        bucket = bucket_tokens(max(prompt, 1))
        longest[bucket] = max(longest.get(bucket, 0), output)
    room = config.model.context_limit_tokens - config.model.template_overhead_tokens
    shapes = []
    for bucket, output in sorted(longest.items()):
        out = max(output, 1)
        shapes.append(Shape(max(1, min(bucket, room - out)), out, FILE_WARMUP_CONCURRENCY))
    return list(dict.fromkeys(shapes))


def trace_buckets(config: RunConfig, s3: Callable[[], Any] | None) -> list[Shape]:
    """The length buckets of the trace's window (its rows' prompt and output tokens)."""
    from tasks.traffic.trace_source import window_rows

    with window_rows(config, s3) as rows:
        return length_buckets(config, ((r.input_tokens, r.output_tokens) for r in rows))


def dataset_buckets(config: RunConfig, s3: Callable[[], Any] | None) -> list[Shape]:
    """The length buckets of the dataset's rows: a prompt's tokens estimated from its characters (the rows are
    text; the engine's count comes with its usage, after the fact), a row's own max_tokens or the default."""
    from tasks.traffic.dataset_rows import dataset_rows

    default = config.scenarios.dataset.max_tokens

    def chars(row: Any) -> int:
        return len(row.prompt) if row.prompt is not None else sum(len(m["content"]) for m in row.messages)

    with dataset_rows(config, s3) as rows:
        return length_buckets(config, ((chars(r) // CHARS_PER_TOKEN, r.max_tokens or default) for r in rows))


def warmup_requests(shape: Shape) -> int:
    """Two waves at the shape's concurrency: the batch fills, then drains (at least 4 requests)."""
    if shape.rate_rps is not None:
        return max(4, min(16, round(shape.rate_rps * 4)))
    return max(2 * (shape.concurrency or 0), 4)


def matrix_rows(matrix: dict[Shape, list[str]]) -> list[dict[str, Any]]:
    """The warmup matrix as the file a production deployment runs: each shape, its requests, its sources."""
    return [{"input_tokens": s.input_tokens, "output_tokens": s.output_tokens, "concurrency": s.concurrency,
             "rate_rps": s.rate_rps, "requests": warmup_requests(s), "sources": sources}
            for s, sources in matrix.items()]


def run_warmup(ctx: EngineContext, shapes: list[Shape] | None = None, launch: int = 0,
               scenario: str | None = None, s3: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Run one warmup round per shape (default: the run's matrix, kept as warmup_matrix.json for the archive
    and the report) and mark each shape seen.

    Rows go to the `warmup` partition with scenario "warmup", round = the shape's place in the
    matrix, warmup=True; they are kept but never headline figures. A relaunch of a performance
    `scenario` (launch > 0) warms its shapes in a partition of its own, its rounds numbered after
    the engine's earlier warmup rounds.
    """
    engine = ctx.endpoint.engine
    if not ctx.config.scenarios.warmup:
        return {"engine": engine, "skipped": "scenarios.warmup is false", "shapes": []}
    if shapes is None:
        from tasks.state.documents import WARMUP_MATRIX

        matrix = warmup_matrix(ctx.config, s3)
        ctx.run_dir.write_json(WARMUP_MATRIX, {"shapes": matrix_rows(matrix)})  # the same for every engine
        shapes = list(matrix)
    partition, first_round = WARMUP_SCENARIO, 1
    if launch:
        partition = f"{WARMUP_SCENARIO}.{scenario}.launch{launch}"
        first_round += sum(1 for r in ctx.run_dir.read_rows("rounds", engine) if r.get("warmup"))
    progress = Progress(sum(warmup_requests(s) for s in shapes), f"{engine} warmup")

    async def main() -> list[dict[str, Any]]:
        out = []
        async with new_session(ctx.endpoint.adapter.keeps_alive_after_stream, ctx.endpoint.access) as session:
            with ctx.run_dir.rows("requests", engine, partition=partition) as req_rows, ctx.run_dir.rows(
                "rounds", engine, partition=partition
            ) as round_rows:
                for i, shape in enumerate(shapes, start=first_round):
                    plan = RoundPlan(
                        scenario=WARMUP_SCENARIO,
                        shape=shape,
                        round=i,
                        requests=warmup_requests(shape),
                        first_encounter=is_first_encounter(ctx.run_dir, engine, shape),
                        warmup=True,
                        launch=launch,
                        **shard_plan(ctx.config.load, shape, ctx.endpoint.base_url, warmup_requests(shape)),
                    )
                    outcome = await run_round(ctx, session, plan, req_rows, progress)
                    round_rows.write(outcome.row)
                    mark_seen(ctx.run_dir, engine, shape)
                    out.append(
                        {
                            "shape": shape.key,
                            "first_encounter": plan.first_encounter,
                            "status": outcome.row["status"],
                            "ttft_p99_s": outcome.row["ttft_p99_s"],
                            "requests_failed": outcome.row["requests_failed"],
                        }
                    )
        return out

    try:
        done = run_async(main())
    finally:
        progress.close()
    return {"engine": engine, "shapes": done}

"""Lanes: engines that share a node run one after another; engines on separate nodes in parallel.

An idle engine on the same GPU node disturbs the measured one (memory, clocks, PCIe), so the
GLM-5.3-Flash Day 1 Hands-on report measured one engine at a time per node. Position p holds the p-th
engine of every lane; each engine's turn (`turns`) names the engine before it in its lane, which must be
torn down before it deploys, and the engines of its position, which are measured together. Pure: no
Airflow import, so the API check and tests use it too.
"""

from __future__ import annotations

from typing import Any

from tasks.config import ConfigError, RunConfig
from tasks.config.engines import EngineSpec
from tasks.config.variants import randomized_order

MAX_ENGINES_PER_NODE = 4


def lane_key(engine: EngineSpec) -> str:
    """The node an engine runs on, as far as the config says.

    An explicit node names the lane. Engines placed only by node labels share a lane per label set,
    and engines with no placement share one lane: they may land on the same node, so they wait.
    """
    if engine.node:
        return f"node:{engine.node}"
    if engine.node_selector:
        return "selector:" + ",".join(f"{k}={v}" for k, v in sorted(engine.node_selector.items()))
    return "unplaced"


def lanes(config: RunConfig) -> dict[str, list[str]]:
    """Lane key -> engine names in config order."""
    out: dict[str, list[str]] = {}
    for e in config.engines:
        out.setdefault(lane_key(e), []).append(e.name)
    return out


def check_lanes(config: RunConfig) -> None:
    """Reject more engines on one node than the DAG has positions, naming the field."""
    for key, names in lanes(config).items():
        if len(names) > MAX_ENGINES_PER_NODE:
            index = next(i for i, e in enumerate(config.engines) if e.name == names[MAX_ENGINES_PER_NODE])
            raise ConfigError([(
                f"engines[{index}].node",
                f"{len(names)} engines share {key} ({', '.join(names)}); at most {MAX_ENGINES_PER_NODE} run one "
                f"after another on a node in one run",
                f"split them over runs or nodes (engines[].node), at most {MAX_ENGINES_PER_NODE} per node",
            )])


def positions(config: RunConfig) -> list[list[str]]:
    """positions[p] = the p-th engine of every lane, always MAX_ENGINES_PER_NODE lists (some empty).

    The engines of one position are up together and measured round by round in turn (ABBA). An
    experiment measured interleaved puts all its variants in position 0; one that cannot interleave
    runs the variants of a lane in an order drawn per run (tasks/config/variants.py)."""
    out: list[list[str]] = [[] for _ in range(MAX_ENGINES_PER_NODE)]
    if interleaved(config):
        out[0] = [e.name for e in config.engines]
        return out
    check_lanes(config)
    for names in _lane_orders(config):
        for p, name in enumerate(names):
            out[p].append(name)
    return out


def turns(config: RunConfig) -> list[dict[str, Any]]:
    """Each engine's turn, position by position (the order the DAG maps its engines in): its
    `position`, the engine `after` which it deploys (the one before it in its lane, None for the first),
    and the engines measured `together` with it, those of its position (the first of them measures)."""
    placed = [names for names in positions(config) if names]
    before: dict[str, str | None] = {name: None for name in placed[0]} if placed else {}
    if not interleaved(config):
        for names in _lane_orders(config):
            before.update(zip(names, [None, *names[:-1]], strict=True))
    return [{"engine": name, "position": p, "after": before[name], "together": names}
            for p, names in enumerate(placed) for name in names]


def _lane_orders(config: RunConfig) -> list[list[str]]:
    """Each lane's engines in the order they run (drawn per run for an experiment)."""
    orders = list(lanes(config).values())
    if config.experiment is not None:
        orders = [randomized_order(names, config.run_id) for names in orders]
    return orders


def interleaved(config: RunConfig) -> bool:
    """Whether the experiment's variants are up together and measured round by round in turn.

    `auto`: yes for local processes (an idle variant holds memory, not the cores the measured one
    uses) and for variants on distinct nodes; no for variants that share a node on a cluster (an
    idle engine on the same GPU node disturbs the measured one): those run one after another in an
    order drawn per run."""
    exp = config.experiment
    if exp is None:
        return False
    if exp.order != "auto":
        return exp.order == "interleaved"
    if config.target == "local":
        return True
    keys = [lane_key(e) for e in config.engines]
    return len(set(keys)) == len(keys)


def design(config: RunConfig) -> str:
    """How the run measures its engines against each other, in the report's words."""
    if interleaved(config):
        return "interleaved"
    if config.experiment is not None:
        return "randomized"
    return "lanes"
